"""`Broker.begin_entry`: the body references a group member's core mints for itself, and the
quiet apply of a member that serves no session (a follower)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Begin, Command, Commit, Connect, Send, Subscribe
from raftmq.core.effects import Deliver, Effect, Receipt
from raftmq.protocol.header_block import block_of


def entry(broker: Broker, index: int, commands: Sequence[Command], *, quiet: bool = False) -> list[Effect]:
    broker.begin_entry(index, quiet=quiet)
    return [effect for command in commands for effect in broker.apply(command)]


def held_bodies(broker: Broker) -> list[Any]:
    return list(broker.body_refs())


def test_each_send_is_held_as_index_ordinal_and_size_counting_every_send_of_the_entry() -> None:
    broker = Broker()
    entry(broker, 3, [Connect("p", 1), Begin("p", "t", 1)])
    entry(broker, 7, [
        Send("stranger", "/queue/a", "", b"refused", 2),  # not connected: rejected, yet ordinal 0
        Send("p", "/queue/a", "", b"abc", 2, receipt="r1"),
        Connect("q", 2),  # not a Send: no ordinal
        Send("p", "/queue/b", block_of((("h", "v"),)), b"", 2, transaction="t"),
    ])
    assert held_bodies(broker) == [(7, 1, 3), (7, 2, 0)]  # the queue's, then the transaction's
    entry(broker, 8, [Commit("p", "t", 3), Send("p", "/queue/a", "", b"12345", 3)])
    assert sorted(held_bodies(broker)) == [(7, 1, 3), (7, 2, 0), (8, 0, 5)]


def test_without_an_entry_bodies_are_held_as_they_are() -> None:
    broker = Broker()  # a single node: its bodies stay in the core
    for command in (Connect("p", 1), Send("p", "/queue/a", "", b"abc", 2)):
        broker.apply(command)
    assert held_bodies(broker) == [b"abc"]


def traffic() -> list[list[Command]]:
    return [
        [Connect("p", 1), Connect("c", 1), Subscribe("c", "s", "/queue/a", 1, ACK_CLIENT_INDIVIDUAL, receipt="r0")],
        [Send("p", "/queue/a", "", b"one", 2, receipt="r1"), Send("p", "/queue/a", "", b"two", 2)],
        [Ack("c", 3, ack_id="1", receipt="r2"), Subscribe("c", "auto", "/queue/b", 3)],
        [Send("p", "/queue/b", "", b"three", 4, receipt="r3")],
    ]


def test_a_quiet_apply_builds_no_deliver_or_receipt_and_reaches_the_same_state() -> None:
    loud, quiet = Broker(), Broker()
    heard: list[Effect] = []
    kept: list[Effect] = []
    for index, commands in enumerate(traffic(), start=1):
        heard += entry(loud, index, commands)
        kept += entry(quiet, index, commands, quiet=True)
    assert [type(e) for e in heard].count(Deliver) == 3 and [type(e) for e in heard].count(Receipt) == 4
    assert kept == []
    assert quiet.snapshot() == loud.snapshot()
    loud.check_invariants()
    quiet.check_invariants()
