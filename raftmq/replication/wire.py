"""The Raft port's wire: authenticated, encrypted, msgpack-framed, bounded. No pickle.

pysyncobj's own connection unpickles the first frame of any TCP connection before any check,
so whoever can reach a member's Raft port can run code as the broker; and it grows its read
buffer by concatenation, so one fast stream stalls the tick thread. `RaftConnection` and
`RaftServer` (raftmq.replication.wire_server) replace its `TcpConnection` and `TcpServer`
(same methods, same poller, same tick thread), and `DurableTransport`
(raftmq.replication.pysyncobj.transport) builds them.

A connection, both ways:

1. Each side sends HELLO: `MAGIC` + 16 random bytes (its nonce); the accepting side once the
   other's came (a silent stranger hears nothing, a STOMP CONNECT gets a STOMP ERROR). Before
   the peer has proved itself a frame may be at most `HANDSHAKE_FRAME_MAX` bytes, and the whole
   handshake must end within `HANDSHAKE_SECONDS` (checked every tick: a silent stranger is closed too).
2. Both derive `k = HMAC-SHA256(secret, client nonce + server nonce)` and send a proof,
   `HMAC(k, role)`, compared in constant time. Nothing the peer sends is decoded as a Raft
   message before its proof checked out.
3. From then on every frame is AES-256-GCM under a per-direction key derived from `k`, with the
   frame's sequence number as nonce (a replayed, reordered or altered frame fails and closes the
   connection), holding one msgpack-encoded pysyncobj message (dicts, lists, str, int, float,
   bool, None, bytes: arrays decode as tuples, the shape pysyncobj's entries have).

Reads take at most `READ_BUDGET_BYTES` per poll event (the poller is level-triggered and comes
back), frames past the frame limit (twice the append-entries batch size) close the connection,
and the buffer is a bytearray trimmed as frames are consumed. Outgoing connections bind to the
member's own host, so its Raft traffic always carries its own address (firewall rules and
partition tests rely on it).

With `[tls] raft = true` all of the above runs inside TLS (`RaftTls`: ssl.SSLObject over memory
buffers, on the same non-blocking socket), and the TLS handshake (ECDHE: keys a later leak of the
password cannot recover) comes before HELLO. The connecting side checks that the accepting one
presents the group's certificate; the accepting side asks for none (HELLO and the proofs, inside
TLS, prove the password both ways).

The secret is the group's configured password or, when none is configured, a random one that the
first member to start writes (0600) into the group's data directory (raftmq.replication.group_secret).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

import msgpack
import structlog
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE

from raftmq.errors import WireError

log = structlog.get_logger("raftmq.replication.wire")

MAGIC = b"RAFTMQ1\n"
NONCE_BYTES = 16
STOMP_FIRST = (b"CONN", b"STOM")  # a STOMP client's first bytes (CONNECT, STOMP), read as a frame length
STOMP_REFUSAL = (
    b"ERROR\ncontent-type:text/plain\nmessage:this is a raftmq Raft port, not a STOMP port\nraftmq-port:raft\n\n"
    b"a group's members replicate here; STOMP clients connect to a member's client port\n\0"
)
HANDSHAKE_FRAME_MAX = 64
HANDSHAKE_SECONDS = 3.0
# pysyncobj fills an append-entries until it reaches its batch size, so one may hold up to twice that (the last
# entry is at most one batch); snapshot chunks are 256 KiB. The transport passes `frame_max_for(batch bytes)`.
def frame_max_for(batch_bytes: int) -> int:
    return 2 * batch_bytes + 2**20


FRAME_MAX = frame_max_for(24 * 2**20)
READ_BUDGET_BYTES = 2**20
MAX_UNAUTHENTICATED = 16  # strangers still in their handshake, per member
_LENGTH = struct.Struct(">I")
_SEQ = struct.Struct(">4xQ")  # 12-byte GCM nonce: four zero bytes and the frame's sequence number
_HELLO, _PROOF, _OPEN = range(3)
# The Raft messages a peer answers (append-entries with its next index, a vote or pre-vote with
# its answer): a peer sent one of these that says nothing for `timeout` is taken for dead. A
# member's name, sent once when it connects, is never answered.
ANSWERED = frozenset({"append_entries", "request_vote", "pre_vote"})
RaftTls = tuple[ssl.SSLContext, ssl.SSLContext, bytes]  # client context, server context, the group's certificate (DER)


# ---------------------------------------------------------------------------------------------
# Message codec


def encode_message(message: Any) -> bytes:
    return bytes(msgpack.packb(message, use_bin_type=True))


def decode_message(data: bytes) -> Any:
    """Plain data only: msgpack builds no objects but dicts, tuples, str, bytes and numbers."""
    return msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True)


# ---------------------------------------------------------------------------------------------
# Connection


def _derive(secret: bytes, client_nonce: bytes, server_nonce: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """(client proof, server proof, client->server key, server->client key)."""
    k = hmac.new(secret, b"raftmq-raft-1" + client_nonce + server_nonce, hashlib.sha256).digest()

    def part(label: bytes) -> bytes:
        return hmac.new(k, label, hashlib.sha256).digest()

    return part(b"client proof"), part(b"server proof"), part(b"client key"), part(b"server key")


class RaftConnection:
    """One Raft peer connection; the interface pysyncobj's TCPTransport uses of TcpConnection."""

    def __init__(self, poller: Any, secret: str, *, timeout: float, sock: socket.socket | None = None,
                 bind_host: str | None = None, send_buffer: int = 2**21, recv_buffer: int = 2**21,
                 frame_max: int = FRAME_MAX, on_refused: Callable[[str, str], None] | None = None,
                 tls: RaftTls | None = None) -> None:
        self._frame_max = frame_max
        self._tls = tls
        self._ssl: ssl.SSLObject | None = None  # this socket's TLS session, while `tls`
        self._tls_up = False
        self.sendRandKey = self.recvRandKey = self.encryptor = None  # pysyncobj's Fernet: unused
        self._poller = poller
        self._secret = secret.encode()
        self._timeout = timeout
        self._bind_host = bind_host
        self._send_buffer, self._recv_buffer = send_buffer, recv_buffer
        self._on_refused = on_refused
        self._on_message: Callable[[Any], None] | None = None
        self._on_connected: Callable[[], None] | None = None
        self._on_disconnected: Callable[[], None] | None = None
        self._sock: socket.socket | None = None
        self._fileno: int | None = None
        self._state: int = CONNECTION_STATE.DISCONNECTED
        self.peer = "?"
        self._in = bytearray()
        self._out = bytearray()
        self._pending: list[Any] = []
        self._phase = _HELLO
        self._handshake_deadline = float("inf")
        self._last_read = time.monotonic()
        self._awaiting_since: float | None = None  # the first request (ANSWERED) since the last read
        if sock is not None:  # accepted: the peer is the client of the handshake
            self._adopt(sock, client=False)
            self._tcp_established()

    # -- pysyncobj's interface ------------------------------------------------------------------

    def setOnConnectedCallback(self, callback: Callable[[], None] | None) -> None:
        self._on_connected = callback

    def setOnMessageReceivedCallback(self, callback: Callable[[Any], None] | None) -> None:
        self._on_message = callback

    def setOnDisconnectedCallback(self, callback: Callable[[], None] | None) -> None:
        self._on_disconnected = callback

    @property
    def state(self) -> int:
        return self._state

    def fileno(self) -> int | None:
        return self._fileno

    def getSendBufferSize(self) -> int:
        return len(self._out)

    def connect(self, host: str | None, port: int) -> bool:
        if host is None:  # pysyncobj passes None for a node it cannot resolve
            return False
        self._close_socket()  # silently: the transport calls this from its disconnect handler
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if self._bind_host:
                sock.bind((self._bind_host, 0))
            self._adopt(sock, client=True)
            sock.connect((host, port))
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno != errno.EINPROGRESS:
                self._close_socket()
                return False
        self.peer = f"{host}:{port}"
        return True

    def send(self, message: Any) -> None:
        if self._phase != _OPEN:
            self._pending.append(message)  # pysyncobj may speak first on an accepted connection
            return
        if self._awaiting_since is None and isinstance(message, dict) and message.get("type") in ANSWERED:
            self._awaiting_since = time.monotonic()
        self._send_frame(self._seal(encode_message(message)))

    def disconnect(self) -> None:
        notify = self._state != CONNECTION_STATE.DISCONNECTED and self._on_disconnected is not None
        self._close_socket()
        if notify:
            assert self._on_disconnected is not None
            self._on_disconnected()

    # -- ours --------------------------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        return self._phase == _OPEN

    def check_deadlines(self, now: float) -> None:
        """Called every tick: close a handshake that took too long (a silent stranger sends no
        event that would let us notice), or a peer that has answered nothing for `timeout` since
        we asked it something (`ANSWERED`). A connection nobody asks anything on (two followers
        of a working leader) stays open: closing it for its silence made the pair reconnect,
        with a handshake, every `timeout` for nothing."""
        if now >= self.next_deadline():
            if self._phase != _OPEN:
                self._refuse("handshake not completed in time")
            else:
                self.disconnect()

    def next_deadline(self) -> float:
        """When `check_deadlines` would close this connection if nothing comes meanwhile (on
        time.monotonic's clock; infinity: never)."""
        if self._state == CONNECTION_STATE.DISCONNECTED:
            return float("inf")
        if self._phase != _OPEN:
            return self._handshake_deadline
        if self._awaiting_since is None:
            return float("inf")
        return self._awaiting_since + self._timeout  # cleared by every read

    # -- socket ---------------------------------------------------------------------------------

    def _adopt(self, sock: socket.socket, client: bool) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._recv_buffer)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._fileno = sock.fileno()
        self._client = client
        self._in = bytearray()
        self._out = bytearray()
        self._pending = []
        self._phase = _HELLO
        self._nonce = os.urandom(NONCE_BYTES)
        self._peer_proof = b""
        self._send_key: AESGCM | None = None
        self._recv_key: AESGCM | None = None
        self._send_seq = self._recv_seq = 0
        self._last_read = time.monotonic()
        self._awaiting_since = None
        self._handshake_deadline = self._last_read + HANDSHAKE_SECONDS
        self._state = CONNECTION_STATE.CONNECTING
        self._tcp_up = not client
        self._ssl, self._tls_up = None, False
        if self._tls is not None:
            self._bio_in, self._bio_out = ssl.MemoryBIO(), ssl.MemoryBIO()
            context = self._tls[0] if client else self._tls[1]
            self._ssl = context.wrap_bio(self._bio_in, self._bio_out, server_side=not client)
        if not client:
            try:
                host, port = sock.getpeername()[:2]
                self.peer = f"{host}:{port}"
            except OSError:
                pass
        self._poller.subscribe(self._fileno, self._on_event,
                               POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR)

    def _close_socket(self) -> None:
        self._sock, self._fileno = close_polled(self._poller, self._sock, self._fileno)
        self._state = CONNECTION_STATE.DISCONNECTED
        self._in = bytearray()
        self._out = bytearray()
        self._pending = []

    def _on_event(self, descr: int, event: int) -> None:
        if descr != self._fileno or self._sock is None:
            self._poller.unsubscribe(descr)
            return
        try:
            # SO_ERROR: a connect's outcome; once up, an error shows as POLLERR or a failed recv/send
            if event & POLL_EVENT_TYPE.ERROR or (
                not self._tcp_up and self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            ):
                self.disconnect()
                return
            if not self._tcp_up:
                self._tcp_up = True
                self._tcp_established()
            if event & POLL_EVENT_TYPE.READ:
                self._read()
            if self._sock is not None and event & POLL_EVENT_TYPE.WRITE:
                self._flush()
        except WireError as exc:
            self._refuse(str(exc))

    def _tcp_established(self) -> None:
        if self._ssl is not None:
            self._tls_handshake()  # HELLO once it is done
        elif self._client:  # the accepting side answers the peer's HELLO
            self._send_frame(MAGIC + self._nonce)

    def _tls_handshake(self) -> None:
        assert self._ssl is not None and self._tls is not None
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._tls_flush()
            return
        except ssl.SSLError as exc:
            raise WireError(f"TLS: {exc.reason or exc}") from None
        if self._client and not _same(self._ssl.getpeercert(binary_form=True), self._tls[2]):
            raise WireError("TLS: the peer does not present the group's certificate")
        self._tls_up = True
        if self._client:
            self._send_frame(MAGIC + self._nonce)

    def _tls_flush(self) -> None:
        pending = self._bio_out.read()
        if pending:
            self._out += pending
            self._flush()

    def _tls_received(self, chunk: bytes) -> bytes:
        """The plaintext `chunk` of TLS records completes (b"" while a record is unfinished)."""
        assert self._ssl is not None
        self._bio_in.write(chunk)
        if not self._tls_up:
            self._tls_handshake()
            if not self._tls_up:
                return b""
        plain = bytearray()
        while True:
            try:
                piece = self._ssl.read(READ_BUDGET_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLError as exc:
                raise WireError(f"TLS: {exc.reason or exc}") from None
            if not piece:
                break
            plain += piece
        self._tls_flush()  # a key update, say
        return bytes(plain)

    def _read(self) -> None:
        # Read until EAGAIN: stopping at a short read cost 1P×1C 0.2 ms of p50 (sittings, 2026-12).
        budget = READ_BUDGET_BYTES
        while budget > 0 and self._sock is not None:
            try:
                chunk = self._sock.recv(min(budget, self._recv_buffer))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.disconnect()
                return
            if not chunk:
                self.disconnect()
                return
            if self._ssl is not None:
                budget -= len(chunk)
                chunk = self._tls_received(chunk)
                budget += len(chunk)
            self._in += chunk
            budget -= len(chunk)
            self._last_read = time.monotonic()
            self._awaiting_since = None
            self._parse()

    def _parse(self) -> None:
        offset = 0
        data = self._in
        limit = self._frame_max if self._phase == _OPEN else HANDSHAKE_FRAME_MAX
        # A callback may close (and the transport reconnect) this connection: stop at once then.
        while len(data) - offset >= _LENGTH.size and self._in is data:
            if self._phase == _HELLO and not self._client and bytes(data[:4]) in STOMP_FIRST:
                self._send_raw(STOMP_REFUSAL)
                raise WireError("a STOMP client (CONNECT), refused with an ERROR frame")
            (length,) = _LENGTH.unpack_from(data, offset)
            if length > limit:
                raise WireError(f"frame of {length} bytes (limit {limit})")
            end = offset + _LENGTH.size + length
            if end > len(data):
                break
            frame = bytes(data[offset + _LENGTH.size:end])
            offset = end
            self._frame(frame)
            limit = self._frame_max if self._phase == _OPEN else HANDSHAKE_FRAME_MAX
        if self._in is data:
            del data[:offset]

    def _frame(self, frame: bytes) -> None:
        if self._phase == _OPEN:
            assert self._recv_key is not None
            try:
                plain = self._recv_key.decrypt(_SEQ.pack(self._recv_seq), frame, None)
                message = decode_message(plain)
            except Exception as exc:
                raise WireError(f"bad frame from an authenticated peer ({type(exc).__name__})") from None
            self._recv_seq += 1
            if self._on_message is not None:
                self._on_message(message)
        elif self._phase == _HELLO:
            if len(frame) != len(MAGIC) + NONCE_BYTES or not frame.startswith(MAGIC):
                raise WireError("not a raftmq Raft peer (bad hello)")
            peer_nonce = frame[len(MAGIC):]
            client_nonce, server_nonce = (self._nonce, peer_nonce) if self._client else (peer_nonce, self._nonce)
            client_proof, server_proof, client_key, server_key = _derive(self._secret, client_nonce, server_nonce)
            mine, self._peer_proof = (client_proof, server_proof) if self._client else (server_proof, client_proof)
            send_key, recv_key = (client_key, server_key) if self._client else (server_key, client_key)
            self._send_key, self._recv_key = AESGCM(send_key), AESGCM(recv_key)
            self._phase = _PROOF
            if not self._client:
                self._send_frame(MAGIC + self._nonce)
            self._send_frame(mine)
        else:
            if not hmac.compare_digest(frame, self._peer_proof):
                raise WireError("wrong group secret")
            self._phase = _OPEN
            self._state = CONNECTION_STATE.CONNECTED
            pending, self._pending = self._pending, []
            for message in pending:
                self.send(message)
            if self._client and self._on_connected is not None:
                self._on_connected()

    def _seal(self, plain: bytes) -> bytes:
        assert self._send_key is not None
        sealed = self._send_key.encrypt(_SEQ.pack(self._send_seq), plain, None)
        self._send_seq += 1
        return sealed

    def _send_frame(self, frame: bytes) -> None:
        self._send_raw(_LENGTH.pack(len(frame)), frame)

    def _send_raw(self, *parts: bytes) -> None:
        if self._sock is None:
            return
        if self._ssl is not None:
            self._ssl.write(b"".join(parts))
            self._tls_flush()
            return
        for part in parts:  # no copy of a large frame
            self._out += part
        self._flush()

    def _flush(self) -> None:
        while self._out and self._sock is not None:
            try:
                sent = self._sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.disconnect()
                return
            del self._out[:sent]
        if self._fileno is not None:
            write = POLL_EVENT_TYPE.WRITE if self._out or not self._tcp_up else 0
            mask = POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR | write
            self._poller.subscribe(self._fileno, self._on_event, mask)

    def _refuse(self, reason: str) -> None:
        if self._on_refused is not None:
            self._on_refused(self.peer, reason)
        self.disconnect()


def close_polled(poller: Any, sock: socket.socket | None, fileno: int | None) -> tuple[None, None]:
    """Unsubscribe a socket from the tick's poller and close it; (None, None), for its holder's
    socket and descriptor."""
    if fileno is not None:
        poller.unsubscribe(fileno)
    if sock is not None:
        sock.close()
    return None, None


def _same(peer: bytes | None, own: bytes) -> bool:
    return peer is not None and hmac.compare_digest(peer, own)
