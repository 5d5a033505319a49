"""Anomalies planted in copies of real chaos runs, one kind each, for the audit's tests
(tests/spark_audit): each function edits a run directory's files and returns the item the
audit must name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from raftmq.core.commands import Connect, Send
from raftmq.protocol.header_block import block_of
from raftmq.routing.route import FORWARD_ID_HEADER, ROUTE_HEADER, TO_HEADER
from spark_audit.member_files import append_entry, commands_of, read_entries, rewrite_entry


def copy_run(source: Path, root: Path, name: str) -> Path:
    """A copy of a run directory under a new name (the audit names runs by directory)."""
    target = root / name
    shutil.copytree(source, target, symlinks=True)
    return target


def read_ops(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def write_ops(run: Path, ops: list[dict[str, Any]]) -> None:
    (run / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in ops))


def receives(ops: list[dict[str, Any]]) -> list[int]:
    return [i for i, op in enumerate(ops) if op["f"] == "receive" and op["type"] == "ok"]


def members(run: Path, group: str) -> list[Path]:
    return sorted(p for p in (run / "data" / group).iterdir() if (p / "raft").is_dir())


def not_reference(run: Path, group: str) -> Path:
    """A member whose replay does not speak for the group (derive.reference picks the member
    that replayed furthest, ties to the lowest name)."""
    ranked = sorted(members(run, group), key=lambda m: (-read_entries(str(m))[-1][0], m.name))
    return ranked[-1]


# -- anomalies, each planted in a copy of a real run --------------------------------------------


def drop_receives(run: Path) -> str:
    """Lost: every receive of one acknowledged value is gone from the history."""
    ops = read_ops(run)
    value = ops[receives(ops)[len(receives(ops)) // 2]]["value"]
    write_ops(run, [op for op in ops if not (op["f"] == "receive" and op["value"] == value)])
    return value


def receive_ghost(run: Path) -> str:
    ops = read_ops(run)
    ghost = dict(ops[receives(ops)[-1]], value="never-sent-7", index=len(ops))
    write_ops(run, [*ops, ghost])
    return "never-sent-7"


def receive_twice(run: Path) -> str:
    ops = read_ops(run)
    at = receives(ops)[len(receives(ops)) // 3]
    write_ops(run, [*ops[:at + 1], dict(ops[at], redelivered=False), *ops[at + 1:]])
    return str(ops[at]["value"])


def swap_two_deliveries(run: Path) -> str:
    """Order: one consumer's two first deliveries of one producer's values, swapped."""
    ops = read_ops(run)
    seen: dict[str, int] = {}
    for i in receives(ops)[len(receives(ops)) // 4:]:
        consumer, producer = ops[i]["process"], ops[i]["value"].rsplit("-", 1)[0]
        previous = seen.get(consumer + "/" + producer)
        if previous is not None and not ops[i].get("redelivered") and not ops[previous].get("redelivered"):
            earlier = ops[previous]["value"]
            ops[previous]["value"], ops[i]["value"] = ops[i]["value"], earlier
            write_ops(run, ops)
            return str(earlier)
        seen[consumer + "/" + producer] = i
    raise AssertionError("no two deliveries of one producer to one consumer")


def change_one_replica(run: Path) -> str:
    """Divergence: one member's copy of a committed entry carries another body."""
    member = not_reference(run, "g1")
    index = next(i for i, _t, c in read_entries(str(member))[5:] if any(type(x) is Send for x in commands_of(c)))

    def changed(commands: list[Any]) -> list[Any]:
        at = next(i for i, c in enumerate(commands) if type(c) is Send)
        send = commands[at]
        commands[at] = Send(send.session, send.destination, send.headers, b"not what the others hold", send.now)
        return commands

    rewrite_entry(str(member), index, changed)
    return str(index)


def second_leader(run: Path) -> str:
    """Leaders: a member logs itself leader of a term another member led."""
    for member in members(run, "g1"):
        lines = [json.loads(x) for x in (member / "raftmq.log.jsonl").read_text().splitlines()]
        led = [x for x in lines if x.get("event") == "raft.leader_changed" and x.get("role") == "leader"]
        if led:
            term = led[0]["term"]
            other = next(m for m in members(run, "g1") if m != member)
            claim = {**led[0], "node": other.name, "leader": "127.0.10.99:1"}
            with open(other / "raftmq.log.jsonl", "a") as f:
                f.write(json.dumps(claim) + "\n")
            return str(term)
    raise AssertionError("no member logged a leadership")


def damage_segment(run: Path) -> str:
    """Files: one bit flipped in the first batch of a member's body journal segment."""
    member = not_reference(run, "g1")
    segment = sorted((member / "bodies").glob("*.seg"))[0]
    data = bytearray(segment.read_bytes())
    data[60] ^= 0x10  # inside the first batch's compressed records: its data CRC fails
    segment.write_bytes(bytes(data))
    return segment.name


def consumed_value(run: Path) -> str:
    ops = read_ops(run)
    return str(ops[receives(ops)[len(receives(ops)) // 2]]["value"])


def forwarded_copy(run: Path) -> str:
    """Stored duplicates: a bridge that copied instead of moving delivers a consumed value to g2
    again, under a forward id of its own."""
    value = consumed_value(run)
    append_entry(str(members(run, "g2")[0]), [
        Connect("audit-bridge", 0),
        Send("audit-bridge", "/queue/chaos", block_of((("_AMQ_DUPL_ID", value), (FORWARD_ID_HEADER, "raftmq:copy-1>g2"),
                                              (TO_HEADER, "g2"), (ROUTE_HEADER, "g3"))), value.encode(), 0),
    ])
    return value


def stranded_forward(run: Path) -> str:
    """Bridges: a message passing through g1 for g2 still in g1's store-and-forward queue at the end."""
    append_entry(str(members(run, "g1")[0]), [
        Connect("audit-bridge", 0),
        Send("audit-bridge", "/queue/chaos",
             block_of((("_AMQ_DUPL_ID", "stranded-1"), (FORWARD_ID_HEADER, "raftmq:strand-1>g2"), (TO_HEADER, "g2"))),
             b"stranded-1", 0),
    ])
    return "stranded-1"


def overlong_route(run: Path) -> str:
    """Bridges: a message that reached g3 over more hops than max_hops allows."""
    append_entry(str(members(run, "g3")[0]), [
        Connect("audit-bridge", 0),
        Send("audit-bridge", "/queue/chaos",
             block_of((("_AMQ_DUPL_ID", "overlong-1"), (FORWARD_ID_HEADER, "raftmq:long-1>g3"), (TO_HEADER, "g3"),
                       (ROUTE_HEADER, "g1,g2"))),
             b"overlong-1", 0),
    ])
    return "overlong-1"


def mqtt_receive_twice(run: Path, qos: int) -> str:
    """An mqtt run: a subscriber's reception of a completed publication of QoS `qos`, repeated
    without DUP (QoS 2: stored twice, which raftmq promises never happens; QoS 1: allowed)."""
    ops = read_ops(run)
    publishers = {op["process"] for op in ops if op["f"] == "open" and op["value"].get("qos") == qos}
    completed = {op["value"] for op in ops if op["f"] == "send" and op["type"] == "ok" and op["process"] in publishers}
    at = next(i for i in receives(ops)[len(receives(ops)) // 3:] if ops[i]["value"] in completed)
    write_ops(run, [*ops[:at + 1], dict(ops[at], redelivered=False), *ops[at + 1:]])
    return str(ops[at]["value"])


GROUP_ANOMALIES = {
    "lost": ("lost", drop_receives),
    "unexpected": ("unexpected", receive_ghost),
    "receive-twice": ("consumer_duplicates", receive_twice),
    "reorder": ("order", swap_two_deliveries),
    "replica": ("divergence", change_one_replica),
    "leader": ("leaders", second_leader),
    "segment": ("files", damage_segment),
}
CLUSTER_ANOMALIES = {
    "copy": ("stored_duplicates", forwarded_copy),
    "strand": ("bridges", stranded_forward),
    "overlong": ("bridges", overlong_route),
}
MQTT_ANOMALIES = {
    "lost": ("lost", drop_receives),
    "unexpected": ("unexpected", receive_ghost),
    "qos2-twice": ("consumer_duplicates", lambda run: mqtt_receive_twice(run, 2)),
}
