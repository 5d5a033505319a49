"""A leader that goes (SIGTERM, as a rolling restart sends it) parks the sessions of the clients
connected to it at its successor, and raftmq's own client resumes each one there on a new
socket: no error reaches the application, the subscription, unacknowledged messages, open
transaction and pending receipts carry on, and what the client had sent that the old node never
read is sent again from the offset the ERROR named, once. Real 3-member groups."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from raftmq.client import FailoverClient, connect
from raftmq.client.admin import AdminAccess
from raftmq.client.failover_connector import FailoverEvent
from raftmq.client.resume import ReplayBuffer
from raftmq.client.stomp_client import StompClient
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.frame import Frame
from tests.helpers.group_harness import Group, connect_leader
from tests.helpers.stomp_raw import unique
from tests.helpers.tls_certs import make_certificates

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def stop_leader(group: Group, leader: str) -> str:
    """SIGTERM the leader; the member that leads after it."""
    group.signal(leader, signal.SIGTERM)
    assert group.wait_exit(leader) == 0
    return group.leader(among=tuple(node_id for node_id in group.members if node_id != leader))


def test_a_stopping_leaders_own_clients_resume_their_sessions_at_the_successor(group: Group) -> None:
    leader = group.leader()
    destination = unique()

    async def scenario() -> tuple[StompClient, StompClient, str]:
        producer = await connect_leader(group.client_addresses())
        consumer = await connect_leader(group.client_addresses())
        subscription = consumer.subscribe(destination, id="s1", ack="client-individual", receipt=True)
        assert subscription.receipt is not None
        await subscription.receipt
        for body in (b"m1", b"m2", b"m3"):
            await producer.send(destination, body, receipt=True)
        first = [await asyncio.wait_for(subscription.get(), 5) for _ in range(3)]
        await consumer.ack(first[0], receipt=True)
        await producer.begin("tx1", receipt=True)
        await producer.send(destination, b"in-tx", transaction="tx1", receipt=True)
        new = await asyncio.to_thread(stop_leader, group, leader)
        assert not producer.is_closed and not consumer.is_closed
        # The same session: its unacknowledged deliveries, its transaction and its subscription.
        await consumer.ack(first[1], receipt=True)
        await producer.commit("tx1")
        await producer.send(destination, b"m4", receipt=True)
        later = [await asyncio.wait_for(subscription.get(), 5) for _ in range(2)]
        assert [frame.body for frame in later] == [b"in-tx", b"m4"]
        for frame in (first[2], *later):
            await consumer.ack(frame, receipt=True)
        assert all(frame.get("redelivered") is None for frame in (*first, *later))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(subscription.get(), 1.5)  # m1..m4 acknowledged: nothing comes back
        await producer.disconnect()
        await consumer.disconnect()
        return producer, consumer, new

    producer, consumer, new = asyncio.run(scenario())
    assert producer.resumptions == 1 and consumer.resumptions == 1
    old_log = group.members[leader].stderr()
    assert "event='client.error'" in old_log and "resume_offset=" in old_log
    assert old_log.count("resume_offset=None") == 0
    new_log = group.members[new].stderr()
    assert new_log.count("by='client'") == 2 and "Traceback" not in new_log


def test_what_the_old_leader_never_read_is_sent_again_from_the_offset_once(group: Group) -> None:
    """A producer that never waits: SENDs are on the wire, unread, when the node stops reading.
    The ERROR's offset says where to resend from: every message arrives exactly once."""
    leader = group.leader()
    destination = unique()

    async def scenario() -> tuple[list[bytes], int, int]:
        producer = await connect_leader(group.client_addresses())
        receipts: list[asyncio.Future[Frame]] = []
        stopping = asyncio.create_task(asyncio.to_thread(stop_leader, group, leader))
        while not stopping.done() and len(receipts) < 50_000:  # until the node is gone
            try:
                receipt = producer.send_nowait(destination, b"p-%d" % len(receipts), receipt=True)
            except ClientError:  # its ERROR came before the stop returned: the client resumes on its own
                break
            assert receipt is not None
            receipts.append(receipt)
            if len(receipts) % 20 == 0:
                await asyncio.sleep(0.001)
        await stopping
        answers = await asyncio.wait_for(asyncio.gather(*receipts), 30)
        assert all(frame.command == "RECEIPT" for frame in answers)
        resumed, replayed, count = producer.resumptions, producer.replayed_bytes, len(receipts)
        await producer.disconnect()
        consumer = await connect_leader(group.client_addresses())
        subscription = consumer.subscribe(destination, ack="auto")
        bodies = [(await asyncio.wait_for(subscription.get(), 10)).body for _ in range(count)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(subscription.get(), 1.0)
        await consumer.disconnect()
        return bodies, resumed, replayed

    bodies, resumed, replayed = asyncio.run(scenario())
    count = len(bodies)
    assert resumed == 1 and replayed > 0  # some SENDs were on the wire, unread, when the node went
    numbers = [int(body[2:]) for body in bodies]
    assert sorted(numbers) == list(range(count)), "lost or twice"
    runs, start = [], 0
    for k in range(1, len(numbers) + 1):
        if k == len(numbers) or numbers[k] != numbers[k - 1] + 1:
            runs.append((numbers[start], numbers[k - 1]))
            start = k
    assert numbers == list(range(count)), f"out of order: runs {runs}"


def test_a_client_that_cannot_resume_ends_with_the_error_naming_the_leader(group: Group) -> None:
    """The offset lies before what the client kept (its buffer let it go): no resume is tried,
    and the connection ends with the node's ERROR, as for any client that does not resume."""
    leader = group.leader()
    destination = unique()

    async def scenario() -> BaseException | None:
        producer = await connect_leader(group.client_addresses())
        producer._replay = ReplayBuffer(limit=0)  # keeps nothing
        producer._transport.replay = producer._replay
        await producer.send(destination, b"x", receipt=True)
        await asyncio.to_thread(stop_leader, group, leader)
        return await asyncio.wait_for(producer.closed, 10)

    cause = asyncio.run(scenario())
    assert isinstance(cause, BrokerRefused) and cause.headers.get("message") == "not the leader"
    assert cause.headers.get("raftmq.resume-offset", "").isdigit()


def test_a_failover_client_rides_a_rolling_stop_of_each_leader_without_a_break(group: Group) -> None:
    """raftmq's failover client on the leader: two leaders stop in turn (each restarted after);
    the client sees `resumed` events, never `disconnected`, and its subscription carries on."""
    destination = unique()

    async def scenario() -> list[FailoverEvent]:
        events: list[FailoverEvent] = []
        client = FailoverClient([list(group.client_addresses())])
        client.events.append(events.append)
        await client.start()
        subscription = client.subscribe(destination, ack="client-individual")
        for turn in range(2):
            await client.send(destination, b"before-%d" % turn)
            message = await asyncio.wait_for(subscription.get(), 5)
            leader = group.leader()
            await asyncio.to_thread(stop_leader, group, leader)
            assert await client.ack(message, receipt=True)  # the same connection's delivery
            await asyncio.to_thread(group.start, leader)
        await client.send(destination, b"after")
        last = await asyncio.wait_for(subscription.get(), 5)
        assert last.body == b"after" and last.get("redelivered") is None
        await client.close()
        return events

    events = asyncio.run(scenario())
    kinds = [event.kind for event in events]
    assert kinds.count("resumed") == 2 and "disconnected" not in kinds, kinds


def ride_a_leader_stop(group: Group, **connect_options: Any) -> int:
    """raftmq's client on the leader (with `connect_options`): a delivery before the stop is
    acknowledged after it, a message sent after it arrives, nothing comes twice. Its resumptions."""
    leader = group.leader()
    destination = unique()
    host, port = group.client_addresses()[list(group.members).index(leader)]

    async def scenario() -> int:
        client = await connect(host, port, **connect_options)
        subscription = client.subscribe(destination, id="s1", ack="client-individual")
        await client.send(destination, b"before", receipt=True)
        before = await asyncio.wait_for(subscription.get(), 5)
        await asyncio.to_thread(stop_leader, group, leader)
        await client.ack(before, receipt=True)
        await client.send(destination, b"after", receipt=True)
        after = await asyncio.wait_for(subscription.get(), 5)
        assert after.body == b"after" and after.get("redelivered") is None
        await client.disconnect()
        return client.resumptions

    return asyncio.run(scenario())


def test_a_client_over_websocket_resumes_its_session_over_websocket(group: Group) -> None:
    assert ride_a_leader_stop(group, websocket_path="/stomp") == 1


def test_over_tls_the_session_is_parked_as_the_ticket_arrives_and_resumed_over_tls(tmp_path: Path) -> None:
    """A TLS connection cannot half-close, so a going leader cannot park a session it relays:
    it parks its own clients' sessions at the successor as their tickets arrive instead, and
    the client resumes over TLS."""
    server, _client = make_certificates(tmp_path / "certs")
    group = Group(tmp_path)
    group.config_path.write_text(group.config_path.read_text()
                                 + f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\n')
    group.admin_access = AdminAccess(ca_file=str(server.ca))
    try:
        group.start()
        assert ride_a_leader_stop(group, ca_file=str(server.ca)) == 1
    finally:
        group.close()
