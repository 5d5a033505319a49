"""In-process node tests: heart-beats, flow control, slow and stuck consumers, leadership and
garbage input. The node runs on its own event loop thread; clients use real sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raftmq.server.stomp.output as output_module
from raftmq.config import NodeConfig
from raftmq.core.commands import Command, Send
from raftmq.errors import NotLeader
from raftmq.replication.commit_log import CommitLog, InMemoryLog, LogStatus, Proposer, StateMachine
from tests.helpers.stomp_raw import RawClient, connect, frame_bytes, in_process_node, unique

pytestmark = pytest.mark.integration

FAST_BEATS = NodeConfig(heartbeat_send_ms=100, heartbeat_receive_ms=100)


class HoldingLog(CommitLog):
    """A commit log that commits only when the test says so."""

    def __init__(self, leader: bool = True, hint: str | None = None) -> None:
        self.held: list[tuple[Sequence[Command], asyncio.Future[None]]] = []
        self.max_held_commands = 0
        self._leader = leader
        self._hint = hint
        self._machine: StateMachine | None = None

    async def start(self, machine: StateMachine) -> None:
        self._machine = machine

    def status(self) -> LogStatus:
        return LogStatus(self._leader, self._hint, 0, 0, 0, False, {})

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        if not self._leader:
            future.set_exception(NotLeader(self._hint))
            return future
        self.held.append((list(commands), future))
        self.max_held_commands = max(self.max_held_commands, self.held_commands())
        return future

    def held_commands(self) -> int:
        return sum(len(commands) for commands, _ in self.held)

    def release(self) -> int:
        held, self.held = self.held, []
        assert self._machine is not None
        self._machine.apply([command for commands, _ in held for command in commands])
        for _, future in held:
            future.set_result(None)
        return sum(len(commands) for commands, _ in held)

    async def stop(self) -> None:
        self.held = []

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def leader_hint(self) -> str | None:
        return self._hint


def test_server_sends_heart_beats_at_the_agreed_interval() -> None:
    with in_process_node(FAST_BEATS) as runner:
        client = RawClient(runner.address)
        connected = client.connect(**{"heart-beat": "0,100"})
        assert connected.headers["heart-beat"] == "100,100"
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.65)
        assert 3 <= client.heartbeats <= 8, client.heartbeats
        client.close()


def test_client_that_promised_heart_beats_and_went_quiet_is_closed() -> None:
    with in_process_node(FAST_BEATS) as runner:
        client = RawClient(runner.address)
        client.connect(**{"heart-beat": "100,0"})
        started = time.monotonic()
        frames = client.read_until_closed(timeout=3)
        elapsed = time.monotonic() - started
        assert [f.command for f in frames] == ["ERROR"]
        assert "heart-beat" in frames[0].headers["message"]
        assert 0.15 <= elapsed <= 1.5, elapsed


def test_client_that_keeps_beating_stays_connected() -> None:
    # The client's beats come from a stomp-py thread sharing the GIL with the node: leave slack.
    config = NodeConfig(heartbeat_send_ms=100, heartbeat_receive_ms=250)
    with in_process_node(config) as runner:
        conn, listener = connect(runner.address, heartbeats=(100, 100))
        assert listener.connected_headers["heart-beat"] == "100,250"
        queue = unique()
        conn.subscribe(queue, id="s")
        time.sleep(1.2)  # more than twice the agreed interval: only the beats keep it open
        conn.send(queue, "still here")
        assert listener.message().body == "still here"
        assert listener.errors.empty()
        conn.disconnect()


def test_session_stops_reading_while_too_many_commands_are_uncommitted() -> None:
    log = HoldingLog()
    # No ticker: a Tick proposed while the test counts would be one command more than it sent
    # (it was, once, on a slow run: 2001 committed of 2000).
    config = NodeConfig(max_pending_commands=10, tick_interval_ms=0)
    with in_process_node(config, log) as runner:
        queue = unique()
        client = RawClient(runner.address)
        client.send(frame_bytes("CONNECT", {"accept-version": "1.2"}))
        time.sleep(0.1)
        runner.run(log.release)
        assert client.read_frame().command == "CONNECTED"
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        frame = frame_bytes("SEND", {"destination": queue}, b"x" * 2048)
        total = 2000  # 4 MiB: far more than the socket buffers hold
        sender = threading.Thread(target=lambda: client.send(frame * total), daemon=True)
        sender.start()
        deadline = time.monotonic() + 5
        while runner.run(log.held_commands) <= 10 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        held = runner.run(log.held_commands)
        assert 10 < held < 400, held  # one read's worth past the limit, never the whole stream
        time.sleep(0.3)
        assert runner.run(log.held_commands) == held  # reading stopped, TCP holds the rest
        committed = 0
        deadline = time.monotonic() + 10
        while committed < total and time.monotonic() < deadline:
            committed += runner.run(log.release)
            time.sleep(0.005)
        sender.join(timeout=5)
        assert committed == total
        assert log.max_held_commands < 400
        client.close()


def test_follower_refuses_connect_naming_the_leader() -> None:
    config = NodeConfig(follower_clients="redirect")
    with in_process_node(config, commit_log=HoldingLog(leader=False, hint="10.0.0.7:61613")) as runner:
        client = RawClient(runner.address)
        client.send(frame_bytes("CONNECT", {"accept-version": "1.2"}))
        frames = client.read_until_closed()
        assert [f.command for f in frames] == ["ERROR"]
        assert frames[0].headers["message"] == "not the leader"
        assert frames[0].headers["leader"] == "10.0.0.7:61613"


def test_stuck_consumer_does_not_stall_other_destinations_or_its_queue(inproc) -> None:
    stuck_queue, other_queue = unique(), unique()
    stuck = socket.create_connection(inproc.address)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(
        frame_bytes("CONNECT", {"accept-version": "1.2"})
        + frame_bytes("SUBSCRIBE", {"destination": stuck_queue, "id": "s", "ack": "client-individual",
                                    "activemq.prefetchSize": "5"})
    )  # ...and never reads again
    healthy, healthy_listener = connect(inproc.address)
    healthy.subscribe(stuck_queue, id="s", ack="auto")
    producer, plistener = connect(inproc.address)
    body = "y" * 32 * 1024
    for i in range(200):  # 6.4 MiB for the stuck queue
        producer.send(stuck_queue, body, headers={"n": str(i)})
    producer.send(stuck_queue, "end", receipt="flood-done")
    plistener.receipt("flood-done", timeout=10)
    # A producer/consumer pair on another queue is not held up.
    pair, pair_listener = connect(inproc.address)
    pair.subscribe(other_queue, id="p")
    started = time.monotonic()
    for i in range(50):
        pair.send(other_queue, f"ping{i}")
        assert pair_listener.message().body == f"ping{i}"
    assert time.monotonic() - started < 3
    # The stuck consumer holds at most its prefetch; the other consumer of its queue got the rest.
    received = [healthy_listener.message(timeout=10) for _ in range(196)]
    assert received[-1].body == "end"
    healthy_listener.no_message(within=0.2)
    stuck.close()
    # The stuck consumer's five deliveries return to the queue when it goes.
    redelivered = [healthy_listener.message() for _ in range(5)]
    assert all(m.headers["redelivered"] == "true" for m in redelivered)
    for conn in (healthy, producer, pair):
        conn.disconnect()


def test_auto_ack_consumer_that_never_reads_is_closed_past_the_buffer_cap(monkeypatch, inproc) -> None:
    monkeypatch.setattr(output_module, "SLOW_CONSUMER_BYTES", 512 * 1024)
    topic = unique("/topic/flood")
    stuck = socket.create_connection(inproc.address)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(frame_bytes("CONNECT", {"accept-version": "1.2"})
                  + frame_bytes("SUBSCRIBE", {"destination": topic, "id": "s"}))
    time.sleep(0.1)
    assert len(inproc.node.sessions) == 1
    producer, plistener = connect(inproc.address)
    body = "z" * 64 * 1024
    for i in range(200):  # 12.5 MiB: more than the kernel buffers take
        producer.send(topic, body)
    producer.send(topic, "end", receipt="done")
    plistener.receipt("done", timeout=10)
    deadline = time.monotonic() + 5
    while len(inproc.node.sessions) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(inproc.node.sessions) == 1  # only the producer is left
    producer.disconnect()
    stuck.close()


class SwitchedLease(InMemoryLog):
    """An in-memory log whose leader lease the test turns off and on."""

    def __init__(self) -> None:
        super().__init__()
        self.lease = True

    def holds_lease(self) -> bool:
        return self.lease


def _read_until_quiet(sock: socket.socket, quiet: float = 0.5, limit: float = 20.0) -> bytes:
    sock.settimeout(quiet)
    data = bytearray()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def test_output_waits_while_the_socket_holds_earlier_bytes_so_a_lapsed_lease_lets_out_no_backlog(monkeypatch) -> None:
    # A consumer that stops reading: its socket fills. Had the node gone on handing deliveries
    # to the transport, they would wait there and leave whenever the client read again, after
    # the lease lapsed. They wait in the connection instead, and go only under the lease.
    monkeypatch.setattr(output_module, "SLOW_CONSUMER_BYTES", 1 << 30)
    lease = SwitchedLease()
    with in_process_node(commit_log=lease) as runner:
        topic = unique("/topic/backlog")
        stuck = socket.create_connection(runner.address)
        stuck.sendall(frame_bytes("CONNECT", {"accept-version": "1.2"})
                      + frame_bytes("SUBSCRIBE", {"destination": topic, "id": "s"}))
        deadline = time.monotonic() + 5
        while len(runner.node.sessions) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        producer, plistener = connect(runner.address)
        body = "z" * 64 * 1024
        for _ in range(600):  # 37.5 MiB: far more than the kernel's buffers (4 and 6 MiB at most)
            producer.send(topic, body)
        producer.send(topic, "end", receipt="done")
        plistener.receipt("done", timeout=20)
        lease.lease = False
        while_lapsed = _read_until_quiet(stuck).count(b"MESSAGE\n")
        lease.lease = True
        after = _read_until_quiet(stuck).count(b"MESSAGE\n")
        assert while_lapsed < 250, f"{while_lapsed} of 601 deliveries left while the lease did not hold"
        assert while_lapsed + after == 601
        producer.disconnect()
        stuck.close()


@st.composite
def _frame_soup(draw: st.DrawFn) -> bytes:
    """Frames that are well formed or nearly so, with random commands, headers and bodies."""
    commands = st.sampled_from(["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT",
                                "CONNECT", "DISCONNECT", "BOGUS"])
    names = st.sampled_from(["destination", "id", "ack", "transaction", "receipt", "selector", "content-length",
                             "activemq.prefetchSize", "x"])
    values = st.one_of(
        st.sampled_from(["/queue/fz", "/topic/fz", "client", "auto", "t1", "1", "-1", "a = 'b'", "(", ""]),
        st.text(max_size=8))
    out = b""
    for _ in range(draw(st.integers(1, 5))):
        headers = draw(st.dictionaries(names, values, max_size=4))
        body = draw(st.binary(max_size=20))
        out += frame_bytes(draw(commands), headers, body)
    return out


def test_garbage_never_crashes_the_node(inproc) -> None:
    connect_frame = frame_bytes("CONNECT", {"accept-version": "1.2"})

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.one_of(st.binary(max_size=200), _frame_soup()), connect_first=st.booleans())
    def feed(data: bytes, connect_first: bool) -> None:
        client = RawClient(inproc.address)
        try:
            client.send((connect_frame if connect_first else b"") + data)
            try:
                client.read_until_closed(timeout=0.05)
            except TimeoutError:
                pass  # still open: a partial frame, or nothing wrong
        except OSError:
            pass
        finally:
            client.close()

    feed()
    stats = inproc.run(inproc.node.stats)
    assert stats["internal_errors"] == 0
    assert stats["apply_failures"] == 0
    conn, listener = connect(inproc.address)
    queue = unique()
    conn.subscribe(queue, id="s")
    conn.send(queue, "alive")
    assert listener.message().body == "alive"
    conn.disconnect()


def test_pipelined_frames_after_connect_use_the_negotiated_escaping(inproc) -> None:
    queue = unique()
    client = RawClient(inproc.address)
    # STOMP 1.1 has no \r escape; a 1.2 parser would accept it. Pipelined right behind CONNECT.
    client.send(
        frame_bytes("CONNECT", {"accept-version": "1.1"})
        + frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s"})
        + b"SEND\ndestination:" + queue.encode() + b"\nx:a\\cb\n\nok\0"
    )
    assert client.read_frame().headers["version"] == "1.1"
    message = client.read_frame()
    assert message.command == "MESSAGE" and message.body == b"ok"
    assert message.headers["x"] == "a\\cb"  # escaped again on the way out
    client.send(b"SEND\ndestination:" + queue.encode() + b"\nx:a\\rb\n\nbad\0")
    frames = client.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"]


class SpyLog(InMemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.sends: list[Send] = []

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        self.sends.extend(c for c in commands if isinstance(c, Send))
        return super().propose(commands)

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        self.sends.extend(c for c in commands if isinstance(c, Send))
        super().propose_for(commands, proposer, number)


def test_sends_are_translated_with_user_headers_only() -> None:
    log = SpyLog()
    with in_process_node(commit_log=log) as runner:
        _check_translated_send(runner, log.sends)


def _check_translated_send(runner, captured: list[Send]) -> None:  # noqa: ANN001
    client = RawClient(runner.address)
    client.connect()
    queue = unique()
    client.send(frame_bytes("SEND", {"destination": queue, "receipt": "r", "priority": "7", "x": "1",
                                     "content-length": "2"}, b"hi"))
    assert client.read_frame().headers["receipt-id"] == "r"
    (send,) = captured
    assert send.destination == queue and send.body == b"hi" and send.receipt == "r"
    assert send.headers == "priority:7\nx:1\n"  # the block, as read
    client.close()
