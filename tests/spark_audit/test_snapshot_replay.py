"""The audit's replay reaches the state a real member wrote in its own Raft snapshot, at that
snapshot's index, with `[[core.address]]` byte limits deciding on the way.

A group of three runs in this process (RaftLog, pysyncobj, body journals). n1 compacts its Raft
log every few KiB, so it writes snapshots while the test sends; n2 never does, so its journal
holds every entry from the first. A queue limited by bytes fills, and the SENDs after it are
dropped by the core (DROP decides on the sizes the body references carry). Once n1 wrote a
snapshot that counts drops, the group stops, and the audit's replay of n2's journal up to that
index must hold exactly n1's snapshot. A replay that built other references (once
`(index, ordinal)`, sized 0) stores the SENDs the members dropped, and differs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgpack
import pytest

from raftmq.app import group as group_module
from raftmq.config import NodeConfig
from raftmq.core.address_settings import DROP, AddressSettings
from raftmq.core.config import CoreConfig
from raftmq.embedded import EmbeddedBroker
from raftmq.replication.pysyncobj.snapshot_file import decode_snapshot
from spark_audit.facts import FACT_NAMES
from spark_audit.replay import SNAPSHOT, Replay
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

QUEUE = "/queue/limited"
BODY = b"b" * 100
CORE = CoreConfig(broker_name="embedded",
                  addresses=(AddressSettings(QUEUE, max_size_bytes=1000, address_full_policy=DROP),))
COMPACT_BYTES = 4096  # n1's; the others keep the default (64 MiB: never, in this test)


def snapshot_of(member: Path) -> tuple[int, Any] | None:
    path = member / SNAPSHOT
    if not path.exists():
        return None
    last, _previous, _cluster, state = decode_snapshot(path.read_bytes(), str(path))
    replica = msgpack.unpackb(state, raw=False)  # raftmq.server.replica.state_machine.Replica.snapshot
    assert replica["index"] == last[1], "the state is the one at the snapshot's index"
    return last[1], replica["broker"]


def test_the_replay_reaches_a_members_own_snapshot_under_byte_limits(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings_of = group_module.raft_settings

    def n1_compacts_often(group: Any, node_id: str, *args: Any, **kwargs: Any) -> Any:
        settings = settings_of(group, node_id, *args, **kwargs)
        if node_id != "n1":
            return settings
        return dataclasses.replace(settings,
                                   timings=dataclasses.replace(settings.timings, compact_after_bytes=COMPACT_BYTES))

    monkeypatch.setattr(group_module, "raft_settings", n1_compacts_often)
    n1, n2 = tmp_path / "n1", tmp_path / "n2"
    with EmbeddedBroker(nodes=3, config=NodeConfig(core=CORE), data_dir=tmp_path) as broker:
        broker.wait_for_leader()
        with broker.client() as client:
            for _ in range(10):  # 1000 bytes: the queue is full
                client.send(QUEUE, BODY)

            def a_snapshot_counts_drops() -> bool:
                for _ in range(20):
                    client.send(QUEUE, BODY)  # dropped, and receipted
                taken = snapshot_of(n1)
                return taken is not None and taken[1].get("dropped", {}).get(QUEUE, 0) > 0

            assert wait_until(a_snapshot_counts_drops, 60.0, step=0.0), "n1 wrote no snapshot after the drops began"
    taken = snapshot_of(n1)
    assert taken is not None and snapshot_of(n2) is None
    index, state = taken
    replay = Replay("embedded", "embedded", "n2", CORE)
    rows = [dict(zip(FACT_NAMES, row, strict=True)) for row in replay.read(str(n2), index, True)]
    [applied] = [row for row in rows if row["fact"] == "applied"]
    assert applied["committed"] and applied["index"] == index == replay.index
    replayed = msgpack.unpackb(msgpack.packb(replay.broker.snapshot(), use_bin_type=True), raw=False)
    assert state["dropped"][QUEUE] > 0 and replayed.get("dropped") == state["dropped"], (
        "the replay dropped what n1 dropped")
    assert replayed == state
