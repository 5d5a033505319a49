"""A failover client's set of subscriptions (FailoverSubscriptions), with a fake connection:
ids, subscribing again on each connection in order, and ending them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raftmq.client.failover_subscription import FailoverSubscription, FailoverSubscriptions
from raftmq.errors import ClientError, SubscriptionEnded
from raftmq.protocol.frame import Frame


class FakeStream:
    def __init__(self) -> None:
        self.receipt: asyncio.Future[Frame] | None = asyncio.get_running_loop().create_future()
        self.active = True

    async def get(self) -> Frame:
        raise ClientError("not used")

    def get_nowait(self) -> Frame | None:
        return None

    def qsize(self) -> int:
        return 0

    async def unsubscribe(self, *, receipt: bool = False) -> None:
        self.active = False


class FakeConnection:
    """Takes SUBSCRIBEs until `broken`; remembers the ids, in order."""

    def __init__(self, broken_after: int = 1_000) -> None:
        self.subscribed: list[str] = []
        self.last_receipt_id: str | None = None
        self._broken_after = broken_after

    @property
    def is_closed(self) -> bool:
        return False

    def subscribe(self, destination: str, *, id: str | None = None, **_: Any) -> FakeStream:  # noqa: A002
        if len(self.subscribed) >= self._broken_after:
            raise ClientError("connection lost")
        assert id is not None
        self.subscribed.append(id)
        self.last_receipt_id = f"r-{id}"
        return FakeStream()


class Keeper:
    stomp_client = None

    async def wait_connected(self, timeout: float | None = None) -> None:
        return None

    def forget_subscription(self, subscription: Any) -> None:
        pass


def run(test: Any) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def test_ids_are_new_or_the_callers_and_never_twice() -> None:
    async def scenario() -> None:
        subs = FailoverSubscriptions()
        assert [subs.new_id(None), subs.new_id("mine"), subs.new_id(None)] == ["sub-1", "mine", "sub-2"]
        subs.add(FailoverSubscription(Keeper(), "mine", "/queue/a", "auto", [], None, None))
        with pytest.raises(ClientError, match="already in use"):
            subs.new_id("mine")

    run(scenario)


def test_every_connection_subscribes_them_again_in_order_until_it_breaks() -> None:
    async def scenario() -> None:
        subs = FailoverSubscriptions()
        made = [FailoverSubscription(Keeper(), f"s{i}", "/queue/a", "client", [], None, None) for i in range(3)]
        for subscription in made:
            subs.add(subscription)
        written: list[tuple[str, FailoverSubscription]] = []
        first = FakeConnection()
        subs.attach_all(first, 1, lambda receipt_id, sub: written.append((receipt_id, sub)))
        assert first.subscribed == ["s0", "s1", "s2"]
        assert written == [("r-s0", made[0]), ("r-s1", made[1]), ("r-s2", made[2])]
        subs.detach_all()
        assert not any(sub.attached for sub in made)
        subs.forget(made[1])
        broken = FakeConnection(broken_after=1)
        subs.attach_all(broken, 2, lambda *_: None)
        assert broken.subscribed == ["s0"] and made[0].attached and not made[2].attached
        assert not subs.attach(made[2], None, 3, lambda *_: None)  # no connection

    run(scenario)


def test_ending_them_all_forgets_them() -> None:
    async def scenario() -> None:
        subs = FailoverSubscriptions()
        made = [FailoverSubscription(Keeper(), f"s{i}", "/queue/a", "auto", [], None, None) for i in range(2)]
        for subscription in made:
            subs.add(subscription)
        gave_up = ClientError("gave up")
        subs.end_all(gave_up)
        assert not any(sub.active for sub in made)
        with pytest.raises(ClientError, match="gave up"):
            await made[0].get()
        assert made[1].receipt.exception() is gave_up
        connection = FakeConnection()
        subs.attach_all(connection, 2, lambda *_: None)
        assert connection.subscribed == []
        subs.add(FailoverSubscription(Keeper(), "s9", "/queue/a", "auto", [], None, None))
        subs.end_all(None)
        assert subs.new_id("s9") == "s9"

    run(scenario)


def test_an_ended_subscription_says_so() -> None:
    async def scenario() -> None:
        subscription = FailoverSubscription(Keeper(), "s", "/queue/a", "auto", [], None, None)
        subscription.end(None)
        with pytest.raises(SubscriptionEnded):
            await subscription.get()

    run(scenario)
