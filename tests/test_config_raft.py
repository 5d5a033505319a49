"""The `[raft]` table reaches pysyncobj unchanged in meaning: one type (`RaftTimings`, in ms)
from the group file to the member's settings, turned into pysyncobj's seconds only where its
`SyncObjConf` is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf

from cluster.group_file import load_group_config
from raftmq.app.group import raft_settings
from raftmq.config import RaftTimings
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.raft_log import RaftLog

GROUP = """[group]
name = "g"
data_dir = "data"
[[node]]
id = "n1"
client = "127.0.0.1:7001"
raft = "127.0.0.1:7101"
"""

# Every [raft] key set away from its default (and every timing a distinct number of ms).
RAFT = """[raft]
tick_period_ms = 7
append_entries_period_ms = 30
election_timeout_min_ms = 410
election_timeout_max_ms = 930
leader_fallback_timeout_ms = 1200
connection_timeout_ms = 2100
connection_retry_ms = 330
commit_timeout_ms = 6100
snapshot_timeout_ms = 7300
max_entry_bytes = 100000
max_in_flight_entries = 3
append_entries_batch_bytes = 20000000
compact_after_bytes = 50000000
settle_wait_ms = 2.5
"""


class Built(Exception):
    """Raised by the stand-in for pysyncobj's constructor once it has the config."""


def built_conf(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[SyncObjConf, RaftLog]:
    """The `SyncObjConf` a member of the group file `text` hands pysyncobj, along the path a
    running member takes (group file -> `raft_settings` -> `RaftLog` -> `HardenedSyncObj`)."""
    path = tmp_path / "group.toml"
    path.write_text(text.replace('data_dir = "data"', f'data_dir = "{tmp_path / "data"}"'))
    log = RaftLog(raft_settings(load_group_config(path), "n1"))
    seen: list[SyncObjConf] = []

    def capture(self: SyncObj, self_address: str, peers: Any, conf: SyncObjConf, **kwargs: Any) -> None:
        seen.append(conf)
        raise Built

    monkeypatch.setattr(SyncObj, "__init__", capture)
    journal = RaftJournal(str(tmp_path / "raft.journal"))
    try:
        with pytest.raises(Built):
            log._make_syncobj(journal)
    finally:
        journal._destroy()
    (conf,) = seen
    return conf, log


def test_the_defaults_reach_pysyncobj_as_the_tuned_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf, log = built_conf(tmp_path, GROUP, monkeypatch)
    assert log.settings.timings == RaftTimings()
    # docs/replication.md: 5 ms ticks, 99 ms heartbeats, 0.3-0.6 s elections, the fallback at
    # the election minimum, 24 MiB batches (one 16 MiB body fits).
    assert conf.autoTickPeriod == pytest.approx(0.005)
    assert conf.appendEntriesPeriod == pytest.approx(0.099)
    assert (conf.raftMinTimeout, conf.raftMaxTimeout) == (pytest.approx(0.3), pytest.approx(0.6))
    assert conf.leaderFallbackTimeout == pytest.approx(0.3)
    assert conf.connectionTimeout == pytest.approx(1.5)
    assert conf.connectionRetryTime == pytest.approx(0.25)
    assert conf.appendEntriesBatchSizeBytes == 24 * 2**20


def test_a_group_files_raft_table_reaches_pysyncobj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf, log = built_conf(tmp_path, GROUP + RAFT, monkeypatch)
    timings = log.settings.timings
    assert timings == RaftTimings(7, 30, 410, 930, 1200, 2100, 330, 6100, 7300, 100000, 3, 20000000, 50000000, 3, 2.5)
    assert conf.autoTickPeriod == pytest.approx(0.007)
    assert conf.appendEntriesPeriod == pytest.approx(0.03)
    assert (conf.raftMinTimeout, conf.raftMaxTimeout) == (pytest.approx(0.41), pytest.approx(0.93))
    assert conf.leaderFallbackTimeout == pytest.approx(1.2)
    assert conf.connectionTimeout == pytest.approx(2.1)
    assert conf.connectionRetryTime == pytest.approx(0.33)
    assert conf.appendEntriesBatchSizeBytes == 20_000_000


def test_the_connection_timeout_is_never_below_the_election_maximum(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text = GROUP + ("[raft]\nelection_timeout_min_ms = 900\nelection_timeout_max_ms = 1800\n"
                    "connection_timeout_ms = 1000\n")
    conf, _ = built_conf(tmp_path, text, monkeypatch)
    assert conf.connectionTimeout == pytest.approx(1.8)
    assert conf.leaderFallbackTimeout == pytest.approx(0.9)  # unset: the election minimum
