"""What a connection hands on when the leadership leaves: the commands that failed with
NotLeader, in the order they were proposed, whatever order they failed in (a later proposal is
refused at once while an earlier one still waits for the log). The successor proposes them in
that order; a reordering would store a producer's messages out of order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from raftmq.core.commands import Command, Send
from raftmq.errors import NotLeader
from raftmq.replication.commit_log import Proposer
from raftmq.server.stomp.connection import Connection
from tests.server.test_stomp_session import NOW, Host


class Clock:
    def now_ms(self) -> int:
        return NOW


@dataclass
class ProposingHost(Host):
    loop: asyncio.AbstractEventLoop | None = None
    clock: Clock = field(default_factory=Clock)
    flow: None = None
    proposals: list[tuple[Sequence[Command], Proposer, int]] = field(default_factory=list)

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        self.proposals.append((commands, proposer, number))


def send(body: bytes) -> Send:
    return Send("s", "/queue/a", "", body, NOW, None, None)


def test_commands_refused_after_the_leadership_left_are_handed_on_in_the_order_proposed() -> None:
    async def scenario() -> list[bytes]:
        host = ProposingHost(loop=asyncio.get_running_loop())
        connection = Connection(host, "s")  # type: ignore[arg-type]
        connection.proposals._propose_now([send(b"1"), send(b"2")])
        connection.proposals._propose_now([send(b"3")])
        connection.proposals._propose_now([send(b"4")])
        connection.hold_for_redirect()
        earlier, later, last = host.proposals
        for commands, proposer, number in (later, last):  # refused at once: a transfer under way
            proposer.settled(number, commands, NotLeader(None))
        commands, proposer, number = earlier
        proposer.settled(number, commands, NotLeader(None))  # the leadership moved before it was appended
        return [command.body for command in connection.unproposed if isinstance(command, Send)]

    assert asyncio.run(scenario()) == [b"1", b"2", b"3", b"4"]
