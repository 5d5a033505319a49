"""A 3-member group loses its leader (kill -9, or a graceful SIGTERM) while producers stream
with receipts: every receipted message is delivered afterwards, none is stored twice."""

from __future__ import annotations

import asyncio
import collections
import signal
import threading
import time

import pytest

from raftmq.client import connect
from raftmq.errors import BrokerRefused, ClientError
from tests.helpers.group_harness import (
    REDIRECT,
    Group,
    Producer,
    StompPyProducer,
    body_for,
    connect_leader,
    drain_queue,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def check_delivered(delivered: list[tuple[str, bytes, dict[str, str]]], receipted: set[str], sent: set[str]) -> None:
    counts = collections.Counter(message_id for message_id, _body, _headers in delivered)
    twice = {message_id: n for message_id, n in counts.items() if n > 1}
    assert not twice, f"stored (or delivered) more than once: {sorted(twice)[:10]}"
    missing = receipted - set(counts)
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:10]}"
    assert set(counts) <= sent, f"unknown messages: {sorted(set(counts) - sent)[:5]}"
    for message_id, body, headers in delivered:
        assert body == body_for(message_id), f"{message_id}: wrong body"
        assert "redelivered" not in headers  # nobody consumed before: every delivery is a first one


def test_leader_kill_loses_no_receipted_message(group: Group) -> None:
    destination = "/queue/failover"
    old_leader = group.leader()
    addresses = group.client_addresses()
    ours = Producer(addresses, destination, "ours", count=1500, window=20)
    theirs = StompPyProducer(addresses, destination, "stomppy", count=250)
    thread = threading.Thread(target=theirs.run, kwargs={"timeout": 45.0}, daemon=True)

    async def scenario() -> None:
        task = asyncio.create_task(ours.run(timeout=45.0))
        thread.start()
        deadline = time.monotonic() + 20
        while (len(ours.receipted) < 300 or len(theirs.receipted) < 30) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert len(ours.receipted) >= 300 and len(theirs.receipted) >= 30, (ours.errors, theirs.errors)
        group.kill(old_leader)
        killed_at = (len(ours.receipted), len(theirs.receipted))
        await task
        await asyncio.to_thread(thread.join, 50.0)
        assert killed_at[0] < len(ours.ids) and killed_at[1] < len(theirs.ids), "the kill came after the stream"

    asyncio.run(scenario())
    assert not thread.is_alive()
    assert ours.reconnects >= 1 and theirs.reconnects >= 1, "the producers never saw the leader go"
    assert ours.receipted == set(ours.ids), ours.errors[-5:]
    assert theirs.receipted == set(theirs.ids), theirs.errors[-5:]
    new_leader = group.leader()
    assert new_leader != old_leader

    delivered = asyncio.run(drain_queue(addresses, destination))
    check_delivered(delivered, ours.receipted | theirs.receipted, set(ours.ids) | set(theirs.ids))
    assert len(delivered) == len(ours.ids) + len(theirs.ids)
    # The old leader comes back as a follower and catches up.
    group.start(old_leader)
    status = group.wait_applied(old_leader, group.status(new_leader)["applied_index"])
    assert status["role"] == "follower" and status["broker"]["destinations"][destination]["depth"] == 0


def test_graceful_stop_hands_over_and_redirects_clients_that_do_not_resume(group: Group) -> None:
    """A client that does not resume its session (any plain STOMP client; ours with
    `resume=False`) hears where the leader is, and its unacknowledged messages come back."""
    destination = "/queue/handover"
    leader = group.leader()
    addresses = group.client_addresses()

    async def scenario() -> tuple[BaseException | None, set[str]]:
        client = await connect_leader(addresses, resume=False)
        for i in range(50):
            await client.send(destination, body_for(f"h-{i}"), [("_AMQ_DUPL_ID", f"h-{i}")], receipt=True)
        consumer = await connect_leader(addresses, resume=False)
        subscription = consumer.subscribe(destination, ack="client-individual", prefetch=10)
        first = [await asyncio.wait_for(subscription.get(), 5) for _ in range(10)]  # unacked, in flight
        started = time.monotonic()
        group.signal(leader, signal.SIGTERM)
        cause = await asyncio.wait_for(client.closed, 5)
        await asyncio.wait_for(consumer.closed, 5)
        assert time.monotonic() - started < 3
        return cause, {frame.get("_AMQ_DUPL_ID") for frame in first}

    cause, in_flight = asyncio.run(scenario())
    assert group.wait_exit(leader) == 0
    stderr = group.members[leader].stderr()
    assert "node.leadership_transferred" in stderr and "Traceback" not in stderr
    new_leader = group.leader(among=tuple(i for i in group.members if i != leader))
    assert isinstance(cause, BrokerRefused), cause
    assert cause.headers.get("message") == "not the leader"
    assert cause.headers.get("leader") == group.members[new_leader].client
    # The consumer's unacked deliveries went back to the queue on the new leader: all 50 remain.
    delivered = asyncio.run(drain_queue(addresses, destination))
    ids = [message_id for message_id, _body, _headers in delivered]
    assert sorted(ids) == sorted(f"h-{i}" for i in range(50))
    redelivered = {message_id for message_id, _body, headers in delivered if headers.get("redelivered") == "true"}
    assert redelivered == in_flight


def test_follower_refuses_connect_naming_the_leader(group: Group) -> None:
    leader = group.leader()
    follower = next(i for i in group.members if i != leader)

    async def attempt() -> BrokerRefused:
        try:
            await connect("127.0.0.1", group.members[follower].client_port, headers=REDIRECT)
        except BrokerRefused as exc:
            return exc
        raise AssertionError("a follower accepted CONNECT")

    refused = asyncio.run(attempt())
    assert refused.headers["leader"] == group.members[leader].client
    assert isinstance(refused, ClientError)
