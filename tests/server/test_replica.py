"""The replica, driven without a node, a socket or a loop: what a committed batch does."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from raftmq.clock import ManualClock
from raftmq.config import NodeConfig
from raftmq.core.commands import Connect, Send
from raftmq.replication.commit_log import CommitLog, InMemoryLog
from raftmq.server.replica.state_machine import Replica
from raftmq.server.stomp.connection import Connection
from tests.helpers.proxy import Proxy, raising


@dataclass
class Host:
    config: NodeConfig = field(default_factory=NodeConfig)
    name: str = "n1"
    commit_log: CommitLog = field(default_factory=InMemoryLog)
    sessions: dict[str, Connection] = field(default_factory=dict)
    clock: ManualClock = field(default_factory=ManualClock)
    failures: list[str] = field(default_factory=list)
    replays: int = 0
    awaiting_adoption: dict[str, object] = field(default_factory=dict)

    def fail(self, reason: str) -> None:
        self.failures.append(reason)

    def connected(self, connection: Connection, command: Connect) -> None: ...

    def disconnected(self, connection: Connection) -> None: ...

    def replayed(self) -> None:
        self.replays += 1


def _core_raising_on_send(replica: Replica, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """A bug in the core's SEND handler, planted in its handler table (the core may be compiled)."""

    def handler(command: Send) -> None:
        raise error

    monkeypatch.setitem(replica.broker._handlers, Send, handler)


def test_a_core_that_raises_stops_the_node_instead_of_skipping_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host()  # no session here: the batch goes to the core in one call (`Broker.apply_all`)
    replica = Replica(host, None, None)
    now = host.clock.now_ms()
    replica.apply([Connect("s", now, None, None)])
    _core_raising_on_send(replica, monkeypatch, KeyError("a bug in the core"))
    with pytest.raises(KeyError):
        replica.apply([Connect("t", now, None, None), Send("s", "/queue/a", "", b"x", now)])
    assert replica.apply_failures == 1
    assert host.failures == ["the broker core raised on a committed Send: KeyError: 'a bug in the core'"]


def test_a_core_that_raises_for_a_session_served_here_stops_the_node_too(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host()
    replica = Replica(host, None, None)
    now = host.clock.now_ms()
    replica.apply([Connect("s", now, None, None)])
    host.sessions["s"] = Proxy(object())  # type: ignore[assignment]  # served here: one command at a time
    monkeypatch.setattr(replica, "broker", Proxy(replica.broker, apply=raising(KeyError("a bug in the core"))))
    with pytest.raises(KeyError):
        replica.apply([Send("s", "/queue/a", "", b"x", now)])
    assert replica.apply_failures == 1
    assert host.failures == ["the broker core raised on a committed Send: KeyError: 'a bug in the core'"]


def test_after_a_failed_entry_nothing_later_is_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression (found by the chaos disk-full nemesis on the symmetric preset): a member whose
    # body journal could not take entry N went on applying N+1...; without N's delivery its
    # ack ids named other messages, and a consumer's ACK through it settled a message no one
    # had received. Fail-stop means the state stops at the entry that failed.
    host = Host()
    replica = Replica(host, None, None)
    now = host.clock.now_ms()
    replica.apply([Connect("s", now, None, None)])
    _core_raising_on_send(replica, monkeypatch, OSError(28, "No space left on device"))
    with pytest.raises(OSError):
        replica.apply([Send("s", "/queue/a", "", b"x", now)])
    monkeypatch.undo()
    replica.apply([Send("s", "/queue/a", "", b"y", now)])
    assert "/queue/a" not in replica.broker.stats()["destinations"]  # the later entry was not applied


def test_old_commands_are_a_replay_not_traffic() -> None:
    host = Host()
    replica = Replica(host, None, None)
    replica.apply([Connect("s", host.clock.now_ms(), None, None)])
    assert host.replays == 0
    host.clock.advance(60_000)  # a minute later these commands are being replayed
    replica.apply([Send("s", "/queue/a", "", b"x", host.clock.now_ms() - 30_000)])
    assert host.replays == 1
    assert replica.broker.stats()["destinations"]["/queue/a"]["depth"] == 1
