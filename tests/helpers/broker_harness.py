"""A thin driver for `Broker` in tests: commands with a shared clock, and effect filters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from raftmq.core.broker import Broker
from raftmq.core.commands import (
    Abort,
    Ack,
    Begin,
    Command,
    Commit,
    Connect,
    Disconnect,
    Nack,
    Send,
    Subscribe,
    Tick,
    Unsubscribe,
)
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect, Receipt, Reject
from raftmq.protocol.header_block import block_of


def delivers(effects: Iterable[Effect]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def bodies(effects: Iterable[Effect]) -> list[Any]:
    return [e.message.body for e in delivers(effects)]


def errors(effects: Iterable[Effect]) -> list[Reject]:
    return [e for e in effects if isinstance(e, Reject)]


def receipts(effects: Iterable[Effect]) -> list[str]:
    return [e.receipt_id for e in effects if isinstance(e, Receipt)]


class Harness:
    """Applies commands to one broker; `now` only moves when a test moves it."""

    def __init__(self, config: CoreConfig | None = None, **overrides: Any) -> None:
        self.config = config or CoreConfig(**overrides)
        self.broker = Broker(self.config)
        self.now = 1_000
        self.commands: list[Command] = []

    def apply(self, command: Command) -> list[Effect]:
        self.commands.append(command)
        return self.broker.apply(command)

    def connect(self, session: str, **kw: Any) -> list[Effect]:
        return self.apply(Connect(session, self.now, **kw))

    def disconnect(self, session: str, **kw: Any) -> list[Effect]:
        return self.apply(Disconnect(session, self.now, **kw))

    def subscribe(self, session: str, sub_id: str, destination: str, **kw: Any) -> list[Effect]:
        return self.apply(Subscribe(session, sub_id, destination, self.now, **kw))

    def unsubscribe(self, session: str, sub_id: str, **kw: Any) -> list[Effect]:
        return self.apply(Unsubscribe(session, sub_id, self.now, **kw))

    def send(
        self,
        session: str,
        destination: str,
        body: Any = b"",
        headers: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
        **kw: Any,
    ) -> list[Effect]:
        pairs = tuple(headers.items()) if isinstance(headers, Mapping) else tuple(headers)
        return self.apply(Send(session, destination, block_of(pairs), body, self.now, **kw))

    def ack(self, session: str, ack_id: str | None = None, **kw: Any) -> list[Effect]:
        return self.apply(Ack(session, self.now, ack_id=ack_id, **kw))

    def nack(self, session: str, ack_id: str | None = None, **kw: Any) -> list[Effect]:
        return self.apply(Nack(session, self.now, ack_id=ack_id, **kw))

    def begin(self, session: str, transaction: str, **kw: Any) -> list[Effect]:
        return self.apply(Begin(session, transaction, self.now, **kw))

    def commit(self, session: str, transaction: str, **kw: Any) -> list[Effect]:
        return self.apply(Commit(session, transaction, self.now, **kw))

    def abort(self, session: str, transaction: str, **kw: Any) -> list[Effect]:
        return self.apply(Abort(session, transaction, self.now, **kw))

    def tick(self, now: int | None = None) -> list[Effect]:
        if now is not None:
            self.now = now
        return self.apply(Tick(self.now))

    def stats(self, destination: str) -> dict[str, int]:
        return self.broker.stats()["destinations"][destination]

    def drain(self, session: str, destination: str, sub_id: str = "drain") -> list[Any]:
        """Bodies of everything ready at `destination` (an auto subscription taken and dropped)."""
        got = bodies(self.subscribe(session, sub_id, destination))
        self.unsubscribe(session, sub_id)
        return got
