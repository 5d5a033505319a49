"""A STOMP client pointed at a port that is not a member's STOMP port is told at once what it
reached, instead of waiting for a CONNECTED that never comes or failing on a parse error:

- the admin port (raftmq.server.admin.http) answers a CONNECT with a STOMP ERROR naming it;
- the Raft port (raftmq.replication.wire) no longer speaks first: it answers a CONNECT with a
  STOMP ERROR naming it, and a member's HELLO with its own (members still meet, in plain TCP
  and inside TLS);
- raftmq's client (raftmq.client.transport) recognises those ERRORs, the HELLO of a Raft port
  that speaks first (an older member) and an HTTP answer, with `NotStompPort`, and a failover
  client whose addresses are all such ports gives up at once.

In-process servers on loopback; stomp.py stands for any other STOMP client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from pysyncobj.poller import createPoller

from raftmq.client import connect, connect_failover
from raftmq.client.transport import RAFT_HELLO, NotStompPort
from raftmq.replication.wire import NONCE_BYTES, RaftConnection, RaftTls
from raftmq.replication.wire_server import RaftServer
from raftmq.security import TlsConfig
from raftmq.server.admin.http import AdminServer
from raftmq.tls import raft_tls_contexts
from tests.helpers.tls_certs import make_certificates

pytestmark = pytest.mark.integration

QUICK = 3.0  # seconds: "at once", with room for a loaded machine (the old behaviour took 10 s or more)
SECRET = "group secret"


# -- the servers ------------------------------------------------------------------------------


@contextlib.contextmanager
def admin_port() -> Iterator[int]:
    """An admin server on loopback, run by an event loop of its own."""
    loop = asyncio.new_event_loop()
    server = AdminServer(lambda: {"node": "n1", "failure": None}, None, None, "127.0.0.1", 0, group="g1")
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.port
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


class RaftPort:
    """A member's Raft port as the transport runs it: the wire's server and connections on
    pysyncobj's poller, polled by a thread (the tick thread's part)."""

    def __init__(self, tls: RaftTls | None = None) -> None:
        self.poller = createPoller("auto")
        self.tls = tls
        self.accepted: list[RaftConnection] = []
        self.refusals: list[str] = []
        self.received: list[Any] = []
        self.port = _free_port()
        self.server = RaftServer(self.poller, "127.0.0.1", self.port, self.accepted.append, self._connection)
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _connection(self, sock: socket.socket | None = None) -> RaftConnection:
        connection = RaftConnection(self.poller, SECRET, timeout=10, sock=sock, tls=self.tls,
                                    on_refused=lambda peer, reason: self.refusals.append(reason))
        connection.setOnMessageReceivedCallback(self.received.append)
        return connection

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self.poller.poll(0.02)

    def call(self, work: Any) -> Any:
        with self._lock:
            return work()

    def __enter__(self) -> RaftPort:
        self.server.bind()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for connection in self.accepted:
            connection.disconnect()
        self.server.unbind()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def received_within(sock: socket.socket, seconds: float) -> bytes:
    """What `sock` receives within `seconds` (until the peer closes)."""
    sock.settimeout(seconds)
    data = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def raftmq_client_fails(port: int) -> NotStompPort:
    async def attempt() -> NotStompPort:
        started = time.monotonic()
        with pytest.raises(NotStompPort) as refused:
            await connect("127.0.0.1", port, timeout=20)
        assert time.monotonic() - started < QUICK
        return refused.value

    return asyncio.run(attempt())


def stomp_py_error(port: int) -> str:
    """What stomp.py makes of a CONNECT to `port`: the ERROR frame's message."""
    errors: list[str] = []

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_error(self, frame: Any) -> None:
            errors.append(frame.headers.get("message", ""))

    connection = stomp.Connection([("127.0.0.1", port)], reconnect_attempts_max=1, timeout=5)
    connection.set_listener("l", Listener())
    started = time.monotonic()
    with contextlib.suppress(stomp.exception.StompException):
        connection.connect(wait=True, with_connect_command=True)
    wait_until(lambda: errors, "stomp.py to get an ERROR")
    assert time.monotonic() - started < QUICK
    with contextlib.suppress(Exception):
        connection.disconnect()
    return errors[0]


# -- the admin port ---------------------------------------------------------------------------


def test_a_stomp_client_at_the_admin_port_is_told_at_once() -> None:
    with admin_port() as port:
        refused = raftmq_client_fails(port)
        assert "admin (HTTP) port" in str(refused) and "group g1" in str(refused)
        assert "admin (HTTP) port" in stomp_py_error(port)


def test_the_admin_port_still_answers_http_with_and_without_headers() -> None:
    with admin_port() as port:
        for request in (b"GET /live HTTP/1.0\r\n\r\n", b"GET /live HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(request)
                answer = received_within(sock, 5)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b'"failure": null}\n'), answer
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /live HTTP/1.1\r\n" + b"X-Long: " + b"x" * 20_000 + b"\r\n\r\n")
            assert received_within(sock, 5).startswith(b"HTTP/1.1 431 ")


# -- the Raft port ----------------------------------------------------------------------------


def test_the_raft_port_says_nothing_first_and_answers_a_connect_with_an_error() -> None:
    with RaftPort() as raft:
        with socket.create_connection(("127.0.0.1", raft.port), timeout=5) as silent:
            assert received_within(silent, 0.5) == b""  # it used to send its HELLO to anyone
        with socket.create_connection(("127.0.0.1", raft.port), timeout=5) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
            answer = received_within(sock, 5)
        assert answer.startswith(b"ERROR\n") and b"raftmq-port:raft\n" in answer and answer.endswith(b"\0")
        assert b"message:this is a raftmq Raft port, not a STOMP port\n" in answer
        assert "Raft port" in str(raftmq_client_fails(raft.port))
        assert "Raft port" in stomp_py_error(raft.port)
        wait_until(lambda: len(raft.refusals) >= 3, "the refusals to be reported")
        assert all("STOMP client" in reason for reason in raft.refusals[-3:])


@pytest.mark.parametrize("tls", [False, True])
def test_members_still_meet_the_accepting_one_speaking_second(tls: bool, tmp_path: Path) -> None:
    contexts = None
    if tls:
        server_files, _ = make_certificates(tmp_path)
        contexts = raft_tls_contexts(TlsConfig(str(server_files.cert), str(server_files.key), raft=True))
    with RaftPort(contexts) as raft:
        connected = threading.Event()
        member = raft.call(lambda: raft._connection())
        member.setOnConnectedCallback(connected.set)
        assert raft.call(lambda: member.connect("127.0.0.1", raft.port))
        assert connected.wait(5), raft.refusals
        wait_until(lambda: raft.accepted and raft.accepted[0].authenticated, "the accepting side to open")
        raft.call(lambda: member.send({"type": "hello", "term": 1}))
        wait_until(lambda: raft.received, "a message through the wire")
        assert raft.received == [{"type": "hello", "term": 1}] and raft.refusals == []
        raft.call(member.disconnect)
    if tls:  # a STOMP client speaking TLS gets the ERROR inside TLS
        with RaftPort(contexts) as raft:
            client_context = ssl.create_default_context()
            client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
            with socket.create_connection(("127.0.0.1", raft.port), timeout=5) as plain, \
                    client_context.wrap_socket(plain) as sock:
                sock.sendall(b"STOMP\naccept-version:1.2\nhost:x\n\n\0")
                assert b"raftmq-port:raft\n" in received_within(sock, 5)


# -- raftmq's client --------------------------------------------------------------------------


@contextlib.contextmanager
def answering(first: bytes) -> Iterator[int]:
    """A server that sends `first` to whoever connects (before or after its CONNECT), then waits."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        held = []
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                sock, _ = listener.accept()
                sock.sendall(first)
                held.append(sock)
        for sock in held:
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_the_client_knows_an_older_raft_ports_hello_and_an_http_answer() -> None:
    with answering(RAFT_HELLO + os.urandom(NONCE_BYTES)) as port:  # a member that speaks first, as they did
        assert "Raft port" in str(raftmq_client_fails(port))
    with answering(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") as port:
        assert "HTTP port" in str(raftmq_client_fails(port))


def test_a_failover_client_whose_addresses_are_no_stomp_ports_gives_up_at_once() -> None:
    with admin_port() as admin, RaftPort() as raft:
        url = f"failover:(stomp://127.0.0.1:{admin},stomp://127.0.0.1:{raft.port})?startupMaxReconnectAttempts=20"

        async def attempt() -> None:
            started = time.monotonic()
            with pytest.raises(NotStompPort, match="no STOMP port among the addresses") as refused:
                await connect_failover(url)
            assert time.monotonic() - started < QUICK
            assert "admin (HTTP) port" in str(refused.value) and "Raft port" in str(refused.value)

        asyncio.run(attempt())
