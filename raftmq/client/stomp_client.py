"""`connect()` and `StompClient`: one STOMP 1.0/1.1/1.2 connection on asyncio.

The client is a thin layer over `StompTransport`: it matches RECEIPTs to futures, routes
MESSAGEs to subscriptions and keeps heart-beats. It holds no reconnect logic; a failover client
can wrap it, watching `closed` and re-issuing subscriptions. One thing it does carry over to a
new socket: a raftmq session whose node goes, when the ERROR that ends the connection asks it to
resume the session at the leader (raftmq.client.resume); `closed` then does not resolve, and the
session goes on, its subscriptions and pending receipts included.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import Callable

from raftmq.client.browse import BrowseResult, browse
from raftmq.client.futures import fail_quietly
from raftmq.client.headers import HeadersArg, ack_headers, header_list
from raftmq.client.heartbeat import HeartbeatTimers, agree_with_broker
from raftmq.client.resume import RESUME_SECONDS, ReplayBuffer, ResumePlan, resume_connect, resume_plan
from raftmq.client.subscription import DEFAULT_QUEUE_SIZE, MessageCallback, Subscription
from raftmq.client.terms import TermFloor
from raftmq.client.tls import resolve_ssl_context
from raftmq.client.transport import PORT_HEADER, StompTransport, dial
from raftmq.core.commands import ACK_MODES
from raftmq.errors import BrokerRefused, ClientError, NotStompPort
from raftmq.protocol.codec import encode_frame
from raftmq.protocol.frame import ADOPTED_HEADER, SUPPORTED_VERSIONS, Frame
from raftmq.protocol.limits import Limits


class StompClient:
    """A connected STOMP session. Build one with `connect()`."""

    def __init__(self, limits: Limits | None = None, resume: bool = True) -> None:
        self._loop = asyncio.get_running_loop()
        self._limits = limits
        self._transport = StompTransport(self._on_frame, self._on_lost, limits)
        self._replay: ReplayBuffer | None = ReplayBuffer() if resume else None
        self._transport.replay = self._replay
        self._receipt_ends: dict[str, int] = {}  # where each frame with a receipt ends in the stream
        self._dial: tuple[ssl.SSLContext | None, str | None] | None = None  # (TLS, WebSocket path): `connect`'s
        self._resuming: asyncio.Future[Frame] | None = None  # the resumed session's CONNECTED
        self._resume_task: asyncio.Task[None] | None = None
        self.resumptions = 0  # sessions carried on over a new socket (raftmq.client.resume)
        self.replayed_bytes = 0  # of what it wrote, bytes written again after a resume (never read before)
        self.on_resumed: Callable[[str], None] | None = None
        """Called with the leader's address when the session carried on there."""
        self._connected: asyncio.Future[Frame] = self._loop.create_future()
        self._receipts: dict[str, asyncio.Future[Frame]] = {}
        self._receipt_ids = itertools.count(1)
        self._sub_ids = itertools.count(1)
        self._subscriptions: dict[str, Subscription] = {}
        self._version = "1.2"
        self._closing = False
        self._heartbeat: HeartbeatTimers | None = None
        self._agreed_heartbeat = agree_with_broker((0, 0), None)
        self.server_headers: dict[str, str] = {}
        self.terms = TermFloor()  # a failover client shares one among its connections
        self.last_receipt_id: str | None = None
        """The receipt id of the latest frame sent with a receipt: lets a wrapper (the failover
        client) tell which of its frames an ERROR's `receipt-id` refers to."""
        self.closed: asyncio.Future[BaseException | None] = self._loop.create_future()
        """Resolves when the connection is gone: `None` after `disconnect()`, else the cause."""

    # -- properties ---------------------------------------------------------------------------
    @property
    def version(self) -> str:
        """The negotiated STOMP version."""
        return self._version

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    @property
    def receipts_in_flight(self) -> int:
        return len(self._receipts)

    # -- sending ------------------------------------------------------------------------------
    def send_nowait(
        self,
        destination: str,
        body: bytes,
        headers: HeadersArg = None,
        receipt: bool = False,
        *,
        transaction: str | None = None,
    ) -> asyncio.Future[Frame] | None:
        """Queue a SEND; returns the future of its RECEIPT when `receipt` is true, else None."""
        frame_headers = [("destination", destination)]
        if transaction is not None:
            frame_headers.append(("transaction", transaction))
        frame_headers.extend(header_list(headers))
        return self._send_frame(Frame("SEND", frame_headers, body), receipt)

    async def send(
        self,
        destination: str,
        body: bytes,
        headers: HeadersArg = None,
        receipt: bool = False,
        *,
        transaction: str | None = None,
    ) -> Frame | None:
        """Send a message; with `receipt`, return once the broker's RECEIPT arrived.

        Raises `BrokerRefused` when the broker answers ERROR, `ClientError` when the connection
        is lost first. Without a receipt it only waits while the socket buffer is full.
        """
        fut = self.send_nowait(destination, body, headers, receipt, transaction=transaction)
        if fut is not None:
            return await fut
        await self.drain()
        return None

    async def drain(self) -> None:
        """Wait while the socket's send buffer is full (flow control for unreceipted sends)."""
        self._check_open()
        await self._transport.drain()
        self._check_open()

    # -- subscriptions --------------------------------------------------------------------------
    def subscribe(
        self,
        destination: str,
        *,
        id: str | None = None,  # noqa: A002 - the STOMP header is called id
        ack: str = "auto",
        headers: HeadersArg = None,
        prefetch: int | None = None,
        callback: MessageCallback | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        receipt: bool = False,
    ) -> Subscription:
        """Subscribe; iterate the returned `Subscription` (or pass `callback`).

        `prefetch` is sent under the names ActiveMQ (`activemq.prefetchSize`) and RabbitMQ
        (`prefetch-count`) use; raftmq accepts both.
        """
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
        self._check_open()
        sub_id = id if id is not None else f"sub-{next(self._sub_ids)}"
        if sub_id in self._subscriptions:
            raise ClientError(f"subscription id {sub_id!r} is already in use")
        if queue_size == DEFAULT_QUEUE_SIZE and prefetch:
            # Never fill at the prefetch window itself: a full queue stops reading the socket,
            # and a consumer waiting for its ACK's RECEIPT would then wait forever.
            queue_size = max(2 * prefetch, DEFAULT_QUEUE_SIZE)
        subscription = Subscription(self, sub_id, destination, ack, callback, queue_size)
        frame_headers = [("destination", destination), ("id", sub_id), ("ack", ack)]
        if prefetch is not None:
            frame_headers.append(("activemq.prefetchSize", str(prefetch)))
            frame_headers.append(("prefetch-count", str(prefetch)))
        frame_headers.extend(header_list(headers))
        self._subscriptions[sub_id] = subscription
        fut = self._send_frame(Frame("SUBSCRIBE", frame_headers), receipt)
        subscription.receipt = fut
        return subscription

    async def browse(
        self, destination: str, *, limit: int | None = None, selector: str | None = None, timeout: float = 10.0
    ) -> BrowseResult:
        """Copies of the messages waiting in the queue `destination`, in queue order, without
        consuming them (ActiveMQ's queue browser; see raftmq.client.browse)."""
        return await browse(self, destination, limit=limit, selector=selector, timeout=timeout)

    def hold_reading(self, holder: object) -> None:
        """A subscription's queue is full: stop reading the socket until it is released."""
        self._transport.hold_reading(holder)

    def release_reading(self, holder: object) -> None:
        self._transport.release_reading(holder)

    def unsubscribe_subscription(self, subscription: Subscription, receipt: bool) -> asyncio.Future[Frame] | None:
        """UNSUBSCRIBE `subscription` (its `unsubscribe` calls this) and forget it."""
        self._subscriptions.pop(subscription.id, None)
        if self._closing or self.closed.done():
            return None
        return self._send_frame(Frame("UNSUBSCRIBE", [("id", subscription.id)]), receipt)

    # -- acknowledgement ------------------------------------------------------------------------
    def ack_nowait(
        self, frame: Frame, *, receipt: bool = False, transaction: str | None = None
    ) -> asyncio.Future[Frame] | None:
        """ACK a received MESSAGE (cumulative in `client` mode, as STOMP defines)."""
        return self._send_frame(Frame("ACK", ack_headers(self._version, frame, transaction)), receipt)

    def nack_nowait(
        self, frame: Frame, *, receipt: bool = False, transaction: str | None = None
    ) -> asyncio.Future[Frame] | None:
        if self._version == "1.0":
            raise ClientError("NACK does not exist in STOMP 1.0")
        return self._send_frame(Frame("NACK", ack_headers(self._version, frame, transaction)), receipt)

    async def ack(self, frame: Frame, *, receipt: bool = False, transaction: str | None = None) -> None:
        fut = self.ack_nowait(frame, receipt=receipt, transaction=transaction)
        if fut is not None:
            await fut

    async def nack(self, frame: Frame, *, receipt: bool = False, transaction: str | None = None) -> None:
        fut = self.nack_nowait(frame, receipt=receipt, transaction=transaction)
        if fut is not None:
            await fut

    # -- transactions ---------------------------------------------------------------------------
    async def begin(self, txid: str, *, receipt: bool = False) -> None:
        await self._command("BEGIN", txid, receipt)

    async def commit(self, txid: str, *, receipt: bool = True) -> None:
        await self._command("COMMIT", txid, receipt)

    async def abort(self, txid: str, *, receipt: bool = False) -> None:
        await self._command("ABORT", txid, receipt)

    async def _command(self, command: str, txid: str, receipt: bool) -> None:
        fut = self._send_frame(Frame(command, [("transaction", txid)]), receipt)
        if fut is not None:
            await fut
        else:
            await self.drain()

    # -- closing --------------------------------------------------------------------------------
    async def disconnect(self, timeout: float = 10.0) -> None:
        """DISCONNECT with a receipt (so everything sent before it was processed), then close."""
        if self.closed.done() or self._closing:
            await asyncio.shield(self.closed)
            return
        fut = self._send_frame(Frame("DISCONNECT"), True)
        self._closing = True
        # A full subscription queue holds reading; the receipt would then never be read.
        self._transport.release_all_reading()
        try:
            if fut is not None:
                async with asyncio.timeout(timeout):
                    await fut
        except (ClientError, TimeoutError):
            pass  # closing anyway; a lost connection is what we asked for
        finally:
            self._transport.close()
            self._finish(None)

    def abort_connection(self, reason: str = "aborted by the client") -> None:
        """Drop the socket without DISCONNECT (tests, and failover later)."""
        self._transport.abort(ClientError(reason))

    # -- internals ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed.done():
            cause = self.closed.result()
            raise ClientError(f"connection closed: {cause}" if cause else "connection closed") from cause
        if self._closing:
            raise ClientError("connection is closing")

    def _send_frame(self, frame: Frame, receipt: bool) -> asyncio.Future[Frame] | None:
        self._check_open()
        fut: asyncio.Future[Frame] | None = None
        if receipt:
            receipt_id = str(next(self._receipt_ids))
            self.last_receipt_id = receipt_id
            frame.headers.append(("receipt", receipt_id))
            fut = self._loop.create_future()
            self._receipts[receipt_id] = fut
        self._transport.write(encode_frame(frame, self._version))
        if receipt and self._replay is not None:
            self._receipt_ends[receipt_id] = self._replay.end
        return fut

    def _on_frame(self, frame: Frame) -> None:
        command = frame.command
        if command == "MESSAGE" and not self.terms.admits(frame):
            return  # a deposed leader's: the new leader delivers it again (raftmq.client.terms)
        if command == "MESSAGE":
            sub_id = frame.get("subscription")
            subscription = self._subscriptions.get(sub_id) if sub_id is not None else None
            if subscription is None and sub_id is None and len(self._subscriptions) == 1:
                subscription = next(iter(self._subscriptions.values()))  # STOMP 1.0 brokers
            if subscription is not None:
                try:
                    subscription.deliver(frame)
                except Exception as exc:  # a raising callback must not kill the connection
                    self._loop.call_exception_handler(
                        {"message": "subscription callback raised", "exception": exc, "frame": frame}
                    )
        elif command == "RECEIPT":
            receipt_id = frame.get("receipt-id") or ""
            fut = self._receipts.pop(receipt_id, None)
            if fut is not None and not fut.done():
                fut.set_result(frame)
            end = self._receipt_ends.pop(receipt_id, None)
            if end is not None and self._replay is not None:
                self._replay.confirm(end)  # the broker read everything up to that frame
        elif command == "CONNECTED":
            if self._resuming is not None and frame.get(ADOPTED_HEADER) is not None:
                if not self._resuming.done():
                    self._resuming.set_result(frame)
                return
            self.terms.admits(frame)
            if not self._connected.done():
                self._connected.set_result(frame)
        elif command == "ERROR":
            self._on_error(frame)

    def _on_error(self, frame: Frame) -> None:
        message = frame.get("message") or frame.body.decode("utf-8", "replace").strip() or "ERROR"
        refused: ClientError = BrokerRefused(message, frame.header_dict(), frame.body)
        if self._resuming is not None:  # the leader would not resume the session
            fail_quietly(self._resuming, refused)
            return
        plan = resume_plan(frame) if self._may_resume() else None
        if plan is not None:
            return self._begin_resume(plan, refused)
        if frame.get(PORT_HEADER) is not None:  # a raftmq member's admin or Raft port (raftmq.client.transport)
            refused = NotStompPort(f"{message} ({frame.body.decode('utf-8', 'replace').strip()})")
        if not self._connected.done():
            fail_quietly(self._connected, refused)
        fut = self._receipts.pop(frame.get("receipt-id") or "", None)
        if fut is not None:
            fail_quietly(fut, refused)
        # The broker closes after ERROR and processes nothing after the offending frame.
        self._transport.abort(refused)

    def _on_lost(self, exc: BaseException | None) -> None:
        if self._resuming is not None:  # the connection to the leader broke before it resumed the session
            fail_quietly(self._resuming, ClientError(f"connection lost while resuming: {exc}"))
            return
        if self._closing:
            self._finish(None)
            return
        if isinstance(exc, ClientError):
            cause: BaseException = exc
        else:
            cause = ClientError(f"connection lost: {exc}" if exc else "connection closed by the broker")
            cause.__cause__ = exc
        self._finish(cause)

    def _finish(self, cause: BaseException | None) -> None:
        if self.closed.done():
            return
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        error = cause or ClientError("connection closed")
        fail_quietly(self._connected, error)
        self._receipt_ends.clear()
        receipts, self._receipts = self._receipts, {}
        for fut in receipts.values():
            fail_quietly(fut, error)
        for subscription in list(self._subscriptions.values()):
            subscription.end(cause)
        self.closed.set_result(cause)

    async def _handshake(
        self,
        host: str,
        *,
        login: str | None,
        passcode: str | None,
        vhost: str | None,
        version: str,
        heartbeat: tuple[int, int],
        headers: HeadersArg,
    ) -> None:
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"version must be one of {SUPPORTED_VERSIONS}, got {version!r}")
        accepted = SUPPORTED_VERSIONS[: SUPPORTED_VERSIONS.index(version) + 1]
        frame_headers = [
            ("accept-version", ",".join(accepted)),
            ("host", vhost if vhost is not None else host),
            ("heart-beat", f"{int(heartbeat[0])},{int(heartbeat[1])}"),
        ]
        if login is not None:
            frame_headers.append(("login", login))
        if passcode is not None:
            frame_headers.append(("passcode", passcode))
        frame_headers.extend(header_list(headers))
        self._transport.write(encode_frame(Frame("CONNECT", frame_headers), "1.2"))
        connected = await self._connected
        negotiated = connected.get("version", "1.0")
        if negotiated not in accepted:
            raise ClientError(f"broker chose STOMP {negotiated}, we offered {','.join(accepted)}")
        self._version = negotiated
        self._transport.version = negotiated
        self.server_headers = connected.header_dict()
        self._agreed_heartbeat = agree_with_broker(heartbeat, connected.get("heart-beat"))
        self._start_heartbeat()

    def _start_heartbeat(self) -> None:
        agreed = self._agreed_heartbeat
        if agreed.send_ms or agreed.receive_ms:
            self._heartbeat = HeartbeatTimers(self._transport, agreed)
            self._heartbeat.start()

    # -- resuming the session on a new socket (raftmq.client.resume) -----------------------------

    def _may_resume(self) -> bool:
        connected = self._connected
        return (self._replay is not None and self._dial is not None and not self._closing and connected.done()
                and not connected.cancelled() and connected.exception() is None)

    def _begin_resume(self, plan: ResumePlan, refused: ClientError) -> None:
        """Leave this connection for one to the leader, keeping everything written meanwhile."""
        old = self._transport
        old.silence()
        old.abort()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        new = StompTransport(self._on_frame, self._on_lost, self._limits)
        new.version = self._version
        new.replay = self._replay
        new.hold_output()
        self._transport = new
        self._resuming = self._loop.create_future()
        self._resume_task = self._loop.create_task(self._resume(plan, refused, old.read_holders))

    async def _resume(self, plan: ResumePlan, refused: ClientError, read_holders: set[object]) -> None:
        new, replay, resuming = self._transport, self._replay, self._resuming
        assert self._dial is not None and replay is not None and resuming is not None
        kept: bytes | None = None
        try:
            host, _, port = plan.leader.rpartition(":")
            async with asyncio.timeout(RESUME_SECONDS):
                await dial(new, host.strip("[]"), int(port), *self._dial)
                new.write_unkept(resume_connect(plan))
                await resuming
            kept = replay.since(plan.offset)
        except (ClientError, OSError, TimeoutError, ValueError):
            pass  # not resumed
        self._resuming = None
        if kept is None or new.is_lost:  # not resumed: the connection ends as the ERROR said
            new.silence()
            new.abort()
            self._finish(refused)
            return
        new.release_output(kept)
        self.replayed_bytes += len(kept)
        for holder in read_holders:
            new.hold_reading(holder)
        self._start_heartbeat()
        self.resumptions += 1
        if self.on_resumed is not None:
            self.on_resumed(plan.leader)


async def connect(
    host: str,
    port: int,
    *,
    login: str | None = None,
    passcode: str | None = None,
    vhost: str | None = None,
    version: str = "1.2",
    heartbeat: tuple[int, int] = (0, 0),
    headers: HeadersArg = None,
    timeout: float = 10.0,
    limits: Limits | None = None,
    ssl_context: ssl.SSLContext | None = None,
    ca_file: str | None = None,
    websocket_path: str | None = None,
    in_vm: bool = False,
    resume: bool = True,
) -> StompClient:
    """Open a TCP connection and complete the STOMP handshake (inside a WebSocket to
    `websocket_path` when given: raftmq.client.websocket; `in_vm`: no socket, raftmq.vm).

    `version` is the highest STOMP version offered (lower ones are offered too); `vhost` goes
    in the CONNECT `host` header (RabbitMQ wants `/`). `heartbeat` is (can send every ms,
    want to receive every ms). TLS: pass `ssl_context`, or `ca_file` (the PEM of the CA that
    signed the broker's certificate; its host name is checked against `host`). Raises
    `BrokerRefused` when the broker answers ERROR (`access refused`: bad login or passcode),
    `ClientError` on connection failure (TLS errors included) or timeout. `resume`: carry the
    session on at the leader when a raftmq node that goes asks to (raftmq.client.resume).
    """
    context = resolve_ssl_context(ssl_context, ca_file)
    client = StompClient(limits, resume)
    client._dial = (context, websocket_path)
    try:
        async with asyncio.timeout(timeout):
            await dial(client._transport, host, port, context, websocket_path, in_vm)
            await client._handshake(
                host,
                login=login,
                passcode=passcode,
                vhost=vhost,
                version=version,
                heartbeat=heartbeat,
                headers=headers,
            )
    except TimeoutError as exc:
        client._transport.abort(ClientError("handshake timed out"))
        raise ClientError(f"connecting to {host}:{port} timed out after {timeout} s") from exc
    except OSError as exc:
        raise ClientError(f"cannot connect to {host}:{port}: {exc}") from exc
    except BaseException:
        client._transport.abort(ClientError("handshake failed"))
        raise
    return client
