"""A follower that stops (SIGTERM, as a rolling restart sends it) parks the sessions it relays at
the leader, and raftmq's own client resumes each one there on a new socket, as a leader's own
clients do: no error reaches the application, the subscription and the unacknowledged message
carry on, and nothing acknowledged comes back. Real 3-member groups."""

from __future__ import annotations

import asyncio
import signal

import pytest

from raftmq.client import connect
from tests.helpers.group_harness import Group, connect_leader
from tests.helpers.stomp_raw import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_stopping_followers_clients_resume_their_sessions_at_the_leader(group: Group) -> None:
    leader = group.leader()
    follower = next(node_id for node_id in group.members if node_id != leader)
    host, port = group.client_addresses()[list(group.members).index(follower)]
    destination = unique()

    def stop_follower() -> None:
        group.signal(follower, signal.SIGTERM)
        assert group.wait_exit(follower) == 0

    async def scenario() -> int:
        producer = await connect_leader(group.client_addresses())
        consumer = await connect(host, port)  # relayed by the follower to the leader
        subscription = consumer.subscribe(destination, id="s1", ack="client-individual", receipt=True)
        assert subscription.receipt is not None
        await subscription.receipt
        for body in (b"m1", b"m2"):
            await producer.send(destination, body, receipt=True)
        first = [await asyncio.wait_for(subscription.get(), 5) for _ in range(2)]
        await consumer.ack(first[0], receipt=True)  # m1 acknowledged, m2 held
        await asyncio.to_thread(stop_follower)
        assert not consumer.is_closed
        await asyncio.wait_for(consumer.ack(first[1], receipt=True), 10)  # still this session's to acknowledge
        await producer.send(destination, b"m3", receipt=True)
        later = await asyncio.wait_for(subscription.get(), 5)  # the subscription carries on
        assert later.body == b"m3" and later.get("redelivered") is None
        await consumer.ack(later, receipt=True)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(subscription.get(), 1.5)  # m1..m3 acknowledged: nothing comes back
        await producer.disconnect()
        await consumer.disconnect()
        return consumer.resumptions

    assert asyncio.run(scenario()) == 1
    follower_log = group.members[follower].stderr()
    assert "resume_offset=" in follower_log and "resume_offset=None" not in follower_log
    leader_log = group.members[leader].stderr()
    assert leader_log.count("by='client'") == 1 and "Traceback" not in leader_log
    assert "relay_goes=True" in leader_log and "event='client.parked'" in leader_log
