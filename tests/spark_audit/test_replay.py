"""The replay of one member's files into facts, without Spark: members written by the project's
own encoders (spark_audit.synth.GroupLog), read back as the audit reads them."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack

from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Connect, Disconnect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of
from raftmq.replication.pysyncobj.snapshot_file import write_snapshot_file
from raftmq.routing.route import FALLBACK_HEADER, FORWARD_ID_HEADER, TO_HEADER, first_headers, producer_forward_id
from spark_audit.facts import FACT_NAMES
from spark_audit.member_files import NOOP, command_of, read_entries
from spark_audit.replay import member_facts
from spark_audit.segments import segment_files, segment_rows
from spark_audit.synth import GroupLog
from tests.spark_audit.planted_replay import dropping

Q = "/queue/q"
CORE = CoreConfig(broker_name="g1")


def send(value: str, session: str = "p") -> Send:
    return Send(session, Q, block_of((("_AMQ_DUPL_ID", value),)), value.encode(), 1)


def story() -> GroupLog:
    """Three values sent (one retried: stored once); a consumer with room for two takes two,
    acknowledges the first and so takes the third."""
    log = GroupLog(CORE)
    log.propose([Connect("p", 1), Connect("c", 1)])
    log.propose([Subscribe("c", "s", Q, 1, ACK_CLIENT_INDIVIDUAL, prefetch=2)])
    effects = log.propose([send("a"), send("b"), send("a"), send("c")])
    first = next(e for e in effects if type(e) is Deliver)
    log.propose([Ack("c", 2, ack_id=first.ack_id)])
    return log


def facts(member: Path, bound: int, core: CoreConfig = CORE) -> list[dict[str, Any]]:
    return [dict(zip(FACT_NAMES, row, strict=True)) for row in member_facts("r", "g1", "n1", str(member), core, bound)]


def of(rows: list[dict[str, Any]], fact: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["fact"] == fact]


def test_a_member_replays_into_what_it_stored(tmp_path: Path) -> None:
    log = story()
    log.write(str(tmp_path))
    rows = facts(tmp_path, log.last_index)
    # Three entered: the retry of "a" was dropped as a duplicate.
    assert [(r["message_id"], r["value"], r["dedup_id"], r["kind"]) for r in of(rows, "enter")] == [
        ("g1-1", "a", "a", "client"), ("g1-2", "b", "b", "client"), ("g1-3", "c", "c", "client")]
    assert [(r["message_id"], r["kind"]) for r in of(rows, "leave")] == [("g1-1", "acked")]
    assert sorted((r["message_id"], r["kind"], r["value"]) for r in of(rows, "waiting")) == [
        ("g1-2", "in-flight", "b"), ("g1-3", "in-flight", "c")]
    entries = of(rows, "entry")
    assert ([(r["index"], r["kind"], r["committed"]) for r in entries]
            == [(i, "noop" if i == 1 else "regular", True) for i in range(1, 6)])
    assert len({r["digest"] for r in entries}) == 5
    assert of(rows, "applied")[0]["index"] == 5 and of(rows, "applied")[0]["committed"]


def test_entries_past_the_group_commit_index_are_listed_not_applied(tmp_path: Path) -> None:
    log = story()
    log.write(str(tmp_path))
    rows = facts(tmp_path, 4)  # the ACK's entry (5) may never have been committed
    assert [r["committed"] for r in of(rows, "entry")] == [True] * 4 + [False]
    assert of(rows, "leave") == [] and of(rows, "applied")[0]["index"] == 4


def test_a_torn_tail_is_reported_never_read(tmp_path: Path) -> None:
    log = story()
    log.write(str(tmp_path))
    with open(tmp_path / "raft" / "raft.journal", "ab") as f:
        f.write(b"\x07" * 30)  # the start of an append a crash cut short
    rows = facts(tmp_path, log.last_index)
    journal = [r for r in of(rows, "file") if r["kind"] == "journal"]
    assert journal[0]["detail"].startswith("torn tail at offset") and len(of(rows, "entry")) == 5


def test_a_corrupt_journal_is_reported_and_the_member_not_replayed(tmp_path: Path) -> None:
    log = story()
    log.write(str(tmp_path))
    path = tmp_path / "raft" / "raft.journal"
    data = bytearray(path.read_bytes())
    data[60] ^= 1  # inside the second record: later records are whole, so this is no torn tail
    path.write_bytes(bytes(data))
    rows = facts(tmp_path, log.last_index)
    assert [r["detail"][:8] for r in of(rows, "file") if r["kind"] == "journal"] == ["corrupt:"]
    assert of(rows, "enter") == [] and of(rows, "applied")[0]["detail"] == "not replayed: a damaged file"


def test_a_snapshot_is_the_starting_state(tmp_path: Path) -> None:
    log = story()
    log.propose([Disconnect("c", 3)])  # the unacknowledged deliveries go back to the queue
    log.write(str(tmp_path))
    entries = read_entries(str(tmp_path))
    at = 4  # a snapshot after the SENDs: the entries up to it are compacted away
    replay = GroupLog(CORE)
    for index, _term, commands in log.entries[1:at]:
        assert commands is not None
        replay.propose(commands)
    state = msgpack.packb({"format": 1, "index": at, "broker": replay.broker.snapshot()}, use_bin_type=True)
    last, previous = ((c, i, t) for i, t, c in (entries[at - 1], entries[at - 2]))  # pysyncobj's entry shape
    write_snapshot_file(str(tmp_path / "raft" / "raft.snapshot"), last, previous, ["a:1"], state)
    from spark_audit.member_files import write_entries

    write_entries(str(tmp_path), entries[at:], commit_index=log.last_index)
    rows = facts(tmp_path, log.last_index)
    snapshot_enters = [r for r in of(rows, "enter") if r["kind"] == "snapshot"]
    assert sorted(r["message_id"] for r in snapshot_enters) == ["g1-1", "g1-2", "g1-3"]
    assert all(r["value"] is None and r["body_ref"] for r in snapshot_enters)  # bodies: from the body journal
    assert Counter(r["kind"] for r in of(rows, "leave")) == {"acked": 1}
    assert sorted(r["message_id"] for r in of(rows, "waiting")) == ["g1-2", "g1-3"]
    held = [("g1-1", "in-flight"), ("g1-2", "in-flight"), ("g1-3", "ready")]
    assert sorted((r["message_id"], r["kind"]) for r in of(rows, "snapshot")) == held
    # A member that does not speak for its group lists its snapshot too, and replays nothing.
    replica = [dict(zip(FACT_NAMES, row, strict=True))
               for row in member_facts("r", "g1", "n2", str(tmp_path), CORE, log.last_index, reference=False)]
    assert sorted((r["message_id"], r["kind"]) for r in of(replica, "snapshot")) == held
    assert of(replica, "enter") == of(replica, "waiting") == []


def test_the_planted_bug_drops_one_message(tmp_path: Path) -> None:
    log = story()
    log.write(str(tmp_path))

    def planted(run: str) -> list[dict[str, Any]]:
        replay = dropping(run, "g1-3")("r", "g1", "n1", CORE)
        return [dict(zip(FACT_NAMES, row, strict=True)) for row in replay.read(str(tmp_path), log.last_index, True)]

    rows = planted("r")
    assert "g1-3" in {r["message_id"] for r in of(rows, "enter")}
    assert "g1-3" not in {r["message_id"] for r in of(rows, "waiting")}
    assert "g1-3" in {r["message_id"] for r in of(planted("elsewhere"), "waiting")}
    assert "g1-3" in {r["message_id"] for r in of(facts(tmp_path, log.last_index), "waiting")}


def test_body_segments_read_as_records(tmp_path: Path) -> None:
    log = story()
    log.write(str(tmp_path))
    (path,) = segment_files(str(tmp_path))
    rows = list(segment_rows("r", "g1", "n1", path, last=True))
    assert [(r[6], r[7], r[12], r[14]) for r in rows] == [(4, 0, "a", "ok"), (4, 1, "b", "ok"), (4, 2, "a", "ok"),
                                                          (4, 3, "c", "ok")]
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-5])  # an append cut short at the end of the last segment
    assert [r[14] for r in segment_rows("r", "g1", "n1", path, last=True)] == ["torn-tail"]
    assert [r[14] for r in segment_rows("r", "g1", "n1", path, last=False)] == ["corrupt"]
    assert os.path.basename(path) == "00000000000000000004.seg" and command_of([]) != NOOP


def test_a_send_forwarded_first_and_a_fallback_are_told_apart(tmp_path: Path) -> None:
    """In the target, a SEND forwarded first is `first`, with the forward id that ties it to its
    producer; in the source, a forward first that fell back is the client's SEND."""
    first = first_headers((("_AMQ_DUPL_ID", "a"),), "g2", "g1", producer_forward_id("a"))
    fallback = (("_AMQ_DUPL_ID", "b"), (TO_HEADER, "g3"), (FORWARD_ID_HEADER, producer_forward_id("b")),
                (FALLBACK_HEADER, "1"))
    log = GroupLog(CORE)
    log.propose([Connect("p", 1), Connect("link", 1)])
    log.propose([Send("link", Q, block_of(first), b"a", 1), Send("p", Q, block_of(fallback), b"b", 1)])
    log.write(str(tmp_path))
    entered = of(facts(tmp_path, log.last_index), "enter")
    assert [(r["value"], r["kind"], r["route"], r["forward_id"]) for r in entered] == [
        ("a", "first", "g2", producer_forward_id("a")), ("b", "client", None, None)]
