"""A real run with `[[core.address]]` byte limits (tests/spark_audit/conftest.py `limits_run`):
for each member, the audit's replay of its Raft journal reaches exactly the state the member's
own apply path (body store, then core, as `Replica.apply` runs them) reaches over the same
committed entries. The core decides FAIL on the bytes its body references carry, so a replay
that built other references (once `(index, ordinal)`, sized 0) lets in SENDs the members
refused, and the states differ. That the run audits clean is
`test_injected_anomalies.py::test_a_real_run_audits_clean[limits-clean]`; a replay and a
member's snapshot at one index, on synthetic member files, is `test_replay_byte_limits.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from raftmq.core.broker import Broker
from raftmq.core.config import CoreConfig
from raftmq.replication.entry_codec import decode_entry
from raftmq.replication.pysyncobj.raft_journal_format import entry_of, scan_journal
from raftmq.server.replica.bodies import BodyStore
from raftmq.storage.journal import Journal
from spark_audit.facts import FACT_NAMES
from spark_audit.layout import core_configs, read_run
from spark_audit.replay import JOURNAL, Replay
from tests.helpers.audit_anomalies import read_ops

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]


def packed(broker: Broker) -> Any:
    return msgpack.unpackb(msgpack.packb(broker.snapshot(), use_bin_type=True), raw=False)


def applied_by_the_member(member: Path, core: CoreConfig, bound: int, scratch: Path) -> tuple[int, Any]:
    """The member's apply path over its committed entries: each entry's bodies referenced and
    written by a real body store, each command applied by the core."""
    with Journal(str(scratch / member.name), cache_bytes=0) as journal:
        bodies = BodyStore(journal, cache_bytes=0)
        broker = Broker(core, bodies)
        last = 0
        for record in scan_journal((member / JOURNAL).read_bytes()).records:
            entry = entry_of(record.command)
            if record.index > bound or entry is None:
                continue
            commands = decode_entry(entry)
            bodies.begin(record.index, record.term, commands)
            broker.begin_entry(record.index)
            for command in commands:
                broker.apply(command)
            bodies.end()
            last = record.index
        return last, packed(broker)


def replayed(member: Path, core: CoreConfig, bound: int) -> tuple[int, Any]:
    replay = Replay("limits", "g1", member.name, core)
    rows = [dict(zip(FACT_NAMES, row, strict=True)) for row in replay.read(str(member), bound, True)]
    [applied] = [row for row in rows if row["fact"] == "applied"]
    assert applied["committed"], f"{member.name} could not be replayed to {bound}: {applied}"
    return replay.index, packed(replay.broker)


def test_the_replay_reaches_each_members_state_under_byte_limits(limits_run: Path, tmp_path: Path) -> None:
    ops = read_ops(limits_run)
    refused = [op for op in ops if op["type"] == "fail" and op.get("error") == "address full"]
    stored = [op for op in ops if op["type"] == "ok" and op["f"] == "send"]
    assert refused and stored, "the byte limit refused some SENDs and stored others"
    run = read_run(limits_run)
    core = core_configs(run)["g1"]  # what the audit replays with: the group file's limits
    assert core.addresses and core.addresses[0].max_size_bytes
    members = sorted(path for path in (limits_run / "data" / "g1").iterdir() if (path / JOURNAL).exists())
    assert len(members) == 3
    # Every member's journal up to the lowest index all of them hold (a killed member may lag).
    bound = min(scan_journal((member / JOURNAL).read_bytes()).records[-1].index for member in members)
    for member in members:
        index, state = applied_by_the_member(member, core, bound, tmp_path)
        assert index == bound and not (member / "raft" / "raft.snapshot").exists()
        assert replayed(member, core, bound) == (index, state), f"{member.name}: the replay differs at {index}"
