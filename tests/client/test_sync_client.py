"""The blocking facade `raftmq.client.sync.Client` against a real node (conftest's `broker`)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from raftmq import processes
from raftmq.client import FailoverEvent, SubscriptionEnded
from raftmq.client.sync import Client
from raftmq.errors import ClientError

pytestmark = pytest.mark.integration


def queue_name() -> str:
    return f"/queue/sync-{uuid.uuid4().hex[:10]}"


def closed_port() -> int:
    return processes.free_port()  # never bound: nobody listens there


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "raftmq-client-loop"]


def test_round_trip_send_receive_ack(broker: tuple[str, int]) -> None:
    host, port = broker
    destination = queue_name()
    threads_before = len(loop_threads())
    events: list[FailoverEvent] = []
    with Client.connect(f"failover:(stomp://{host}:{port})?randomize=false", max_reconnect_attempts=3) as client:
        client.add_listener(events.append)
        assert client.is_connected and client.address is not None and client.address.port == port
        receipt = client.send(destination, "héllo", headers={"k": "v"})
        assert receipt is not None and receipt.command == "RECEIPT"
        assert client.send(destination, b"\x00two", receipt=False) is None
        with client.subscribe(destination, ack="client-individual") as subscription:
            first = subscription.receive(timeout=5)
            second = subscription.receive(timeout=5)
            assert first is not None and second is not None
            assert (first.body.decode(), first.get("k")) == ("héllo", "v")
            assert second.body == b"\x00two"
            assert first.get("_AMQ_DUPL_ID") != second.get("_AMQ_DUPL_ID")
            assert subscription.ack(first, receipt=True) is True
            assert client.ack(second) is True
            started = time.monotonic()
            assert subscription.receive(timeout=0.2) is None
            assert 0.15 < time.monotonic() - started < 2
        assert len(loop_threads()) == threads_before + 1
    assert len(loop_threads()) == threads_before  # the loop thread is gone after close
    assert [e.kind for e in events] == ["closed"]
    with pytest.raises(ClientError, match="closed"):
        client.send(destination, "after close")
    client.close()  # twice is fine


def test_iterating_a_subscription_ends_when_it_is_closed(broker: tuple[str, int]) -> None:
    destination = queue_name()
    with Client.connect(f"{broker[0]}:{broker[1]}", randomize=False) as client:
        for i in range(3):
            client.send(destination, f"m{i}")
        subscription = client.subscribe(destination)
        received = []
        for message in subscription:
            received.append(message.body)
            if len(received) == 3:
                subscription.close()
        assert received == [b"m0", b"m1", b"m2"]
        with pytest.raises(SubscriptionEnded):
            subscription.receive(timeout=0.1)


def test_an_auto_subscription_hands_over_at_most_half_its_queue_and_loses_nothing(broker: tuple[str, int]) -> None:
    """In auto mode messages move to the receiving thread as they arrive, but no more than
    `queue_size // 2` wait there: the rest stay with the subscription (and the broker)."""
    destination = queue_name()
    url = f"stomp://{broker[0]}:{broker[1]}"
    with Client.connect(url) as client, Client.connect(url) as producer:
        subscription = client.subscribe(destination, queue_size=8)
        for i in range(100):
            producer.send(destination, f"m{i}")
        time.sleep(0.3)  # the pump has taken what it may
        pumped = subscription._pumped
        assert pumped is not None and 1 <= pumped.qsize() <= 4
        received = [subscription.receive(timeout=5) for _ in range(100)]
        assert [m.body if m is not None else None for m in received] == [f"m{i}".encode() for i in range(100)]
        assert subscription.receive(timeout=0.2) is None
        producer.send(destination, "late")
        late = subscription.receive(timeout=5)
        assert late is not None and late.body == b"late"


def test_a_closed_auto_subscription_hands_out_what_was_queued_then_ends(broker: tuple[str, int]) -> None:
    destination = queue_name()
    with Client.connect(f"stomp://{broker[0]}:{broker[1]}") as client:
        subscription = client.subscribe(destination)
        for i in range(3):
            client.send(destination, f"m{i}")
        first = subscription.receive(timeout=5)
        assert first is not None and first.body == b"m0"
        time.sleep(0.2)  # the other two arrived
        subscription.close()
        assert [m.body for m in (subscription.receive(timeout=5), subscription.receive(timeout=5)) if m] == [
            b"m1", b"m2"]
        for _ in range(2):
            with pytest.raises(SubscriptionEnded):
                subscription.receive(timeout=0.1)


def test_transactions_through_the_facade(broker: tuple[str, int]) -> None:
    destination = queue_name()
    with Client.connect(f"stomp://{broker[0]}:{broker[1]}") as client:
        subscription = client.subscribe(destination)
        client.begin("t1")
        client.send(destination, "held", transaction="t1")
        assert subscription.receive(timeout=0.2) is None
        client.commit("t1")
        message = subscription.receive(timeout=5)
        assert message is not None and message.body == b"held"


def test_connect_failures_are_bounded_and_leave_no_thread() -> None:
    threads_before = len(loop_threads())
    url = f"failover:(127.0.0.1:{closed_port()})?maxReconnectAttempts=2&initialReconnectDelay=10"
    with pytest.raises(ClientError, match="2 connect attempt"):
        Client.connect(url)
    # Retrying forever (the default) still ends at the facade's timeout.
    started = time.monotonic()
    with pytest.raises(ClientError, match="within 0.3 s"):
        Client.connect(f"127.0.0.1:{closed_port()}", timeout=0.3)
    assert time.monotonic() - started < 3
    assert len(loop_threads()) == threads_before


def test_bad_urls_fail_before_any_connection() -> None:
    with pytest.raises(ValueError, match="unknown failover option 'nope'"):
        Client.connect("failover:(127.0.0.1:1)?nope=1")
