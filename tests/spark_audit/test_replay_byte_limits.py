"""The audit replays exactly what a member applied, with `[[core.address]]` byte limits set:
a member's core counts a destination's bytes by the size its body references carry, and
decides FAIL and DROP on them, so the replay must hand the core the same references
(raftmq.core.broker.Broker.begin_entry) for its state to be the member's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raftmq.core.address_settings import DROP, FAIL, AddressSettings
from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Command, Connect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect, Reject
from raftmq.protocol.header_block import block_of
from raftmq.server.replica.bodies import BodyStore
from raftmq.storage.journal import Journal
from spark_audit.facts import FACT_NAMES
from spark_audit.member_files import NOOP, command_of, write_bodies, write_entries
from spark_audit.replay import Replay
from tests.helpers.bodies import store_entry

DROPPING, FAILING = "/queue/dropping", "/queue/failing"
BODY = b"x" * 100
# Two 100-byte bodies fill either queue: the third SEND is dropped or refused; the global limit
# (five bodies) refuses or drops the next once the two queues and a third hold that much.
CORE = CoreConfig(broker_name="g1", global_max_size_bytes=500, addresses=(
    AddressSettings(DROPPING, max_size_bytes=200, address_full_policy=DROP),
    AddressSettings(FAILING, max_size_bytes=200, address_full_policy=FAIL),
    AddressSettings("/queue/other", address_full_policy=DROP),
))


def entries() -> list[list[Command]]:
    """SENDs past both queues' byte limits and the global one, with an ACK that makes room
    (a refused SEND ends its session: each FAIL has a producer of its own)."""
    def send(session: str, destination: str, value: int) -> Send:
        return Send(session, destination, block_of((("seq", str(value)),)), BODY, 1)

    return [
        [Connect("p", 1), Connect("c", 1), Connect("f1", 1), Connect("f2", 1)],
        [Subscribe("c", "s", DROPPING, 1, ACK_CLIENT_INDIVIDUAL, prefetch=1)],
        # 1 in flight, 2 ready: 200 bytes, full; 3 and 4 dropped
        [send("p", DROPPING, 1), send("p", DROPPING, 2), send("p", DROPPING, 3), send("p", DROPPING, 4)],
        [send("f1", FAILING, 5), send("f1", FAILING, 6), send("f1", FAILING, 7)],  # 7 refused
        [send("p", "/queue/other", 8), send("p", "/queue/other", 9)],  # 500 bytes in all: 9 dropped
        [Ack("c", 2, ack_id="1")],  # room again: 2 is delivered
        [send("p", DROPPING, 10), send("f2", FAILING, 11)],  # 10 stored, 11 refused
    ]


class Member:
    """A group member's apply path: each entry's bodies to the body journal (BodyStore), the
    references to the core."""

    def __init__(self, directory: Path) -> None:
        self.bodies = BodyStore(Journal(str(directory / "bodies"), cache_bytes=0))
        self.broker = Broker(CORE)
        self.effects: list[Effect] = []

    def apply(self, index: int, commands: Sequence[Command]) -> None:
        store_entry(self.bodies, index, 1, commands)
        self.broker.begin_entry(index)  # the core holds the references a member's holds
        for command in commands:
            self.effects += self.broker.apply(command)


def replayed(member: Path, bound: int) -> tuple[Replay, list[dict[str, Any]]]:
    replay = Replay("r", "g1", "n1", CORE)
    rows = [dict(zip(FACT_NAMES, row, strict=True)) for row in replay.read(str(member), bound, True)]
    return replay, rows


def test_the_replay_holds_the_members_state_under_byte_limits(tmp_path: Path) -> None:
    member = Member(tmp_path)
    log: list[tuple[int, int, list[Command] | None]] = [(1, 1, None)]
    for index, commands in enumerate(entries(), start=2):
        member.apply(index, commands)
        log.append((index, 1, commands))
    member.bodies.close()
    # The limits decided: a SEND dropped, two refused (one by the global limit), deliveries made.
    assert member.broker.state.dropped == {DROPPING: 2, "/queue/other": 1}
    assert [e.session for e in member.effects if type(e) is Reject] == ["f1", "f2"]
    assert sum(1 for e in member.effects if type(e) is Deliver) == 2
    files = str(tmp_path / "files")
    write_entries(files, [(index, term, NOOP if c is None else command_of(c)) for index, term, c in log],
                  commit_index=len(log))
    write_bodies(files, [(index, term, c) for index, term, c in log if c])

    replay, rows = replayed(Path(files), len(log))

    assert replay.broker.snapshot() == member.broker.snapshot()
    assert replay.broker.stats() == member.broker.stats()
    applied = [row for row in rows if row["fact"] == "applied"]
    assert [(row["index"], row["committed"]) for row in applied] == [(len(log), True)]
    # What the audit lists as waiting is what the member holds, and every stored SEND entered once.
    waiting = sorted(row["message_id"] for row in rows if row["fact"] == "waiting")
    held = sorted(message.message_id for store in member.broker.state.stores() for message in store.ready.values())
    held += [d.message.message_id for sub in member.broker.state.subscriptions() for d in sub.in_flight.values()]
    assert waiting == sorted(held)
    entered = [row["message_id"] for row in rows if row["fact"] == "enter"]
    assert len(entered) == len(set(entered)) == len(held) + 1  # one acknowledged
