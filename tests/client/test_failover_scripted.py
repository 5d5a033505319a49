"""FailoverClient against scripted servers (tests/helpers/fake_broker.py): resends, refusals,
resubscription, stale acknowledgements, transactions and giving up, each at a chosen moment."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from raftmq.client import (
    Address,
    FailoverClient,
    FailoverEvent,
    FailoverExhausted,
    FailoverOptions,
    TransactionRolledBack,
    connect_failover,
)
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.frame import Frame
from tests.helpers.fake_broker import FakeBroker, FakeConnection, default_handler

pytestmark = pytest.mark.integration

TEST_TIMEOUT = 10.0
FAST = FailoverOptions(
    initial_reconnect_delay_ms=5, max_reconnect_delay_ms=20, randomize=False, connect_timeout_ms=2000
)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def sends(conn: FakeConnection) -> list[Frame]:
    return [frame for frame in conn.frames if frame.command == "SEND"]


def stop_listening(broker: FakeBroker) -> None:
    assert broker._server is not None
    broker._server.close()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def counting_ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"id-{next(counter)}"


def test_unreceipted_sends_are_resent_with_their_ids_in_order_before_new_ones() -> None:
    def first_two_only(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "SEND" and len(sends(conn)) > 2:
            return  # sits on these receipts: they are outstanding when the line drops
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(first_two_only) as first, FakeBroker() as second:
            events: list[FailoverEvent] = []
            client = await connect_failover(
                [[("127.0.0.1", first.port), ("127.0.0.1", second.port)]], options=FAST, dupl_id_factory=counting_ids()
            )
            client.events.append(events.append)
            futures = [client.send_nowait("/queue/a", f"m{i}".encode()) for i in range(4)]
            futures.append(client.send_nowait("/queue/a", b"m4", {"_AMQ_DUPL_ID": "mine"}))
            conn = await first.connection()
            await first.wait_for_frames(conn, 6)  # CONNECT + 5 SENDs
            # The broker has read them; its two receipts may still be on their way to the client.
            receipted = await asyncio.wait_for(asyncio.gather(*futures[:2]), 5)
            assert [frame.command for frame in receipted] == ["RECEIPT", "RECEIPT"]
            assert client.pending_sends == 3
            stop_listening(first)
            conn.close()
            await until(lambda: any(e.kind == "disconnected" for e in events))
            futures.append(client.send_nowait("/queue/a", b"m5"))  # sent while reconnecting
            results = await asyncio.gather(*futures)
            assert all(frame.command == "RECEIPT" for frame in results)
            written_again = sends(second.connections[0])
            assert [f.body for f in written_again] == [b"m2", b"m3", b"m4", b"m5"]
            assert [f.get("_AMQ_DUPL_ID") for f in written_again] == ["id-2", "id-3", "mine", "id-4"]
            assert [f.get("_AMQ_DUPL_ID") for f in sends(conn)] == ["id-0", "id-1", "id-2", "id-3", "mine"]
            # Those written again say so (the broker routes them where they may have gone); the new one does not.
            assert [f.get("_raftmq_resent") for f in written_again] == ["1", "1", "1", None]
            assert all(f.get("_raftmq_resent") is None for f in sends(conn))
            connected = [e for e in events if e.kind == "connected"]
            assert len(connected) == 1 and connected[0].address == Address("127.0.0.1", second.port)
            assert connected[0].resent == ("id-2", "id-3", "mine")
            assert client.pending_sends == 0
            await client.close()

    run(scenario())


def test_a_send_the_broker_refuses_fails_and_the_others_are_retried() -> None:
    def refuse_poison(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "SEND" and frame.body == b"poison":
            conn.send("ERROR", [("message", "invalid destination"), ("receipt-id", frame.get("receipt") or "")])
            conn.close()
            return
        if frame.command == "SEND" and frame.body == b"after" and len(conn.broker.connections) == 1:
            return  # the broker processes nothing after the refused frame
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(refuse_poison) as broker:
            url = f"failover:(stomp://127.0.0.1:{broker.port})?randomize=false&initialReconnectDelay=5"
            client = await connect_failover(url)
            before = client.send_nowait("/queue/a", b"before")
            poison = client.send_nowait("/queue/a", b"poison")
            after = client.send_nowait("/queue/a", b"after")
            assert (await before).command == "RECEIPT"
            with pytest.raises(BrokerRefused, match="invalid destination"):
                await poison
            assert (await after).command == "RECEIPT"
            first, second = broker.connections
            assert [f.body for f in sends(second)] == [b"after"]
            assert sends(second)[0].get("_AMQ_DUPL_ID") == sends(first)[2].get("_AMQ_DUPL_ID")
            await client.close()

    run(scenario())


def test_subscriptions_come_back_and_stale_messages_are_never_acked() -> None:
    delivered = itertools.count(1)

    def handler(conn: FakeConnection, frame: Frame) -> None:
        default_handler(conn, frame)
        if frame.command == "SUBSCRIBE":
            for _ in range(2):  # two messages per subscription per connection
                n = next(delivered)
                headers = [("subscription", frame.get("id") or ""), ("message-id", f"m{n}"), ("ack", f"a{n}")]
                conn.send("MESSAGE", [*headers, ("destination", "/queue/a")], f"body{n}".encode())

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect_failover([[("127.0.0.1", broker.port)]], options=FAST)
            subscription = client.subscribe(
                "/queue/a", id="s1", ack="client-individual", headers={"selector": "kind = 'x'"}, prefetch=5
            )
            assert (await subscription.receipt).command == "RECEIPT"
            stale = await subscription.get()
            assert stale.body == b"body1" and stale.connection == 1
            await until(lambda: subscription.qsize() == 1)  # body2 waits unconsumed
            first = broker.connections[0]
            first.close()
            await until(lambda: client.connection_number == 2)
            fresh = await subscription.get()
            # body2 was delivered on the broken connection and never acked: the broker redelivers
            # it, so the client drops its copy instead of handing out one it cannot ack.
            assert fresh.body == b"body3" and fresh.connection == 2
            second = broker.connections[1]
            resubscribe = [f for f in second.frames if f.command == "SUBSCRIBE"][0]
            original = [f for f in first.frames if f.command == "SUBSCRIBE"][0]
            strip = lambda f: [h for h in f.headers if h[0] != "receipt"]  # noqa: E731
            assert strip(resubscribe) == strip(original)
            assert ("selector", "kind = 'x'") in resubscribe.headers and ("id", "s1") in resubscribe.headers
            assert await client.ack(stale) is False
            assert await client.ack(fresh, receipt=True) is True
            acks = [f for f in second.frames if f.command == "ACK"]
            assert [f.get("id") for f in acks] == ["a3"]
            assert not [f for f in first.frames if f.command == "ACK"]
            assert subscription.attachments == 2
            await client.close()

    run(scenario())


def test_auto_ack_messages_queued_at_the_break_are_still_handed_out() -> None:
    def handler(conn: FakeConnection, frame: Frame) -> None:
        default_handler(conn, frame)
        if frame.command == "SUBSCRIBE" and len(conn.broker.connections) == 1:
            for n in range(3):
                headers = [("subscription", "s"), ("message-id", str(n)), ("destination", "/topic/t")]
                conn.send("MESSAGE", headers, b"%d" % n)
            conn.close()

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect_failover([[("127.0.0.1", broker.port)]], options=FAST)
            subscription = client.subscribe("/topic/t", id="s")
            bodies = [(await subscription.get()).body for _ in range(3)]
            assert bodies == [b"0", b"1", b"2"]  # consumed as far as the broker knows
            await until(lambda: len(broker.connections) == 2 and subscription.attached)
            await client.close()
            assert not subscription.active

    run(scenario())


def test_a_refused_subscribe_ends_that_subscription_only() -> None:
    def handler(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "SUBSCRIBE" and frame.get("selector") == "bad((":
            conn.send("ERROR", [("message", "invalid selector"), ("receipt-id", frame.get("receipt") or "")])
            conn.close()
            return
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect_failover([[("127.0.0.1", broker.port)]], options=FAST)
            good = client.subscribe("/queue/good", id="good")
            bad = client.subscribe("/queue/bad", id="bad", headers={"selector": "bad(("})
            with pytest.raises(BrokerRefused, match="invalid selector"):
                await bad.receipt
            with pytest.raises(BrokerRefused):
                await bad.get()
            await client.wait_connected(timeout=5)
            await until(lambda: good.attachments == 2)
            second = broker.connections[1]
            await until(lambda: any(f.command == "SUBSCRIBE" for f in second.frames))
            assert [f.get("id") for f in second.frames if f.command == "SUBSCRIBE"] == ["good"]
            await client.close()

    run(scenario())


def test_a_break_rolls_back_open_transactions() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            client = await connect_failover([[("127.0.0.1", broker.port)]], options=FAST)
            await client.begin("tx1")
            await client.send("/queue/a", b"in tx", transaction="tx1")
            broker.connections[0].close()
            await until(lambda: client.connection_number == 2 and client.is_connected)
            with pytest.raises(TransactionRolledBack):
                client.send_nowait("/queue/a", b"more", transaction="tx1")
            with pytest.raises(TransactionRolledBack):
                await client.commit("tx1")
            await client.begin("tx2")
            await client.send("/queue/a", b"ok", transaction="tx2")
            await client.commit("tx2")
            assert [f.command for f in broker.connections[1].frames][-3:] == ["BEGIN", "SEND", "COMMIT"]
            await client.close()

    run(scenario())


def test_exhausted_reconnect_attempts_fail_everything_pending_with_client_error() -> None:
    def hold_sends(conn: FakeConnection, frame: Frame) -> None:
        if frame.command != "SEND":
            default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(hold_sends) as broker:
            events: list[FailoverEvent] = []
            client = await connect_failover(
                f"failover:(127.0.0.1:{broker.port})?maxReconnectAttempts=3&initialReconnectDelay=5&randomize=false"
            )
            client.events.append(events.append)
            subscription = client.subscribe("/queue/a")
            outstanding = [client.send_nowait("/queue/a", b"x") for _ in range(3)]
            await broker.wait_for_frames(broker.connections[0], 5)
            stop_listening(broker)
            broker.connections[0].close()
            for future in outstanding:
                with pytest.raises(ClientError, match="gave up"):
                    await future
            cause = await client.closed
            assert isinstance(cause, FailoverExhausted) and "3 connect attempt(s)" in str(cause)
            kinds = [e.kind for e in events]
            assert kinds == ["disconnected", "attempt_failed", "attempt_failed", "attempt_failed", "failed"]
            with pytest.raises(ClientError):
                await subscription.get()
            with pytest.raises(ClientError, match="client failed"):
                client.send_nowait("/queue/a", b"late")
            await client.close()  # harmless after failure

    run(scenario())


def test_the_timeout_option_bounds_a_send_waiting_for_a_connection() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            client = await connect_failover(
                f"failover:(127.0.0.1:{broker.port})?timeout=150&initialReconnectDelay=20&maxReconnectDelay=20"
            )
            stop_listening(broker)
            broker.connections[0].close()
            await until(lambda: not client.is_connected)
            started = asyncio.get_running_loop().time()
            with pytest.raises(ClientError, match="not sent within 150 ms"):
                await client.send("/queue/a", b"x")
            assert 0.1 < asyncio.get_running_loop().time() - started < 1.0
            assert client.pending_sends == 0
            await client.close()

    run(scenario())


def test_close_fails_unconfirmed_sends_and_a_raising_listener_is_contained() -> None:
    def hold_sends(conn: FakeConnection, frame: Frame) -> None:
        if frame.command != "SEND":
            default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(hold_sends) as broker:
            client = FailoverClient([[("127.0.0.1", broker.port)]], FAST)
            seen: list[str] = []
            client.events.append(lambda event: (_ for _ in ()).throw(RuntimeError("listener bug")))
            client.events.append(lambda event: seen.append(event.kind))
            asyncio.get_running_loop().set_exception_handler(lambda loop, context: seen.append("handler"))
            async with client:
                waiting = client.send_nowait("/queue/a", b"x")
                await broker.wait_for_frames(await broker.connection(), 2)
            with pytest.raises(ClientError, match="outcome unknown"):
                await waiting
            assert seen == ["handler", "connected", "handler", "closed"]  # the first listener raised each time
            assert await client.closed is None

    run(scenario())


def test_a_deposed_leader_naming_its_successor_is_followed_first() -> None:
    async def scenario() -> None:
        async with FakeBroker() as other, FakeBroker() as successor:

            def deposed(conn: FakeConnection, frame: Frame) -> None:
                if frame.command == "SEND":
                    conn.send("ERROR", [("message", "not the leader"), ("leader", f"127.0.0.1:{successor.port}")])
                    conn.close()
                    return
                default_handler(conn, frame)

            async with FakeBroker(deposed) as leader:
                events: list[FailoverEvent] = []
                # first-element would try `other` next (the broken node goes last): the hint wins.
                group = [("127.0.0.1", leader.port), ("127.0.0.1", other.port), ("127.0.0.1", successor.port)]
                client = await connect_failover([group], options=FAST)
                client.events.append(events.append)
                receipt = await client.send("/queue/a", b"x")
                assert receipt is not None and receipt.command == "RECEIPT"
                assert client.address == Address("127.0.0.1", successor.port)
                assert not other.connections
                assert [(e.kind, e.target) for e in events][:3] == [
                    ("disconnected", None),
                    ("redirected", Address("127.0.0.1", successor.port)),
                    ("connected", None),
                ]
                await client.close()

    run(scenario())


def test_the_policy_picks_the_first_node_and_only_the_given_random_decides() -> None:
    async def landing(ports: list[int], policy: str, seed: int) -> int:
        group = [("127.0.0.1", port) for port in ports]
        client = await connect_failover([group], options=FAST.replace(policy=policy), rng=random.Random(seed))
        assert client.address is not None
        index = ports.index(client.address.port)
        await client.close()
        return index

    async def scenario() -> None:
        async with FakeBroker() as a, FakeBroker() as b, FakeBroker() as c:
            ports = [a.port, b.port, c.port]
            assert {await landing(ports, "first-element", seed) for seed in range(4)} == {0}
            for policy in ("random", "round-robin", "random-sticky"):
                first = [await landing(ports, policy, seed) for seed in range(8)]
                again = [await landing(ports, policy, seed) for seed in range(8)]
                assert first == again, policy  # reproducible through the seeded Random
                assert len(set(first)) > 1, policy  # and not stuck on one node

    run(scenario())


def test_retry_now_ends_the_back_off_wait_and_only_while_reconnecting() -> None:
    slow = FailoverOptions(initial_reconnect_delay_ms=5_000, max_reconnect_delay_ms=5_000, randomize=False,
                           connect_timeout_ms=2000)

    async def scenario() -> None:
        async with FakeBroker() as first, FakeBroker() as second:
            events: list[FailoverEvent] = []
            client = await connect_failover([[("127.0.0.1", first.port), ("127.0.0.1", second.port)]], options=slow)
            client.events.append(events.append)
            client.retry_now()  # while connected: nothing to cut short, and not kept for later
            conn = await first.connection()
            stop_listening(first)
            conn.close()
            await until(lambda: any(e.kind == "disconnected" for e in events))
            await asyncio.sleep(0.5)
            assert not client.is_connected  # the back-off holds: 5 s before the first attempt
            loop = asyncio.get_running_loop()
            woken = loop.time()
            client.retry_now()
            await until(lambda: client.is_connected, timeout=2.0)
            assert loop.time() - woken < 1.0
            await client.close()

    run(scenario())
