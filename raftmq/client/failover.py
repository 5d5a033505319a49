"""`FailoverClient`: a STOMP client that finds a group's leader and survives node failures.

    client = await connect_failover("failover:(stomp://h1:61613,stomp://h2:61613)?randomize=false")
    await client.send("/queue/a", b"hello")             # returns the RECEIPT frame
    async for message in client.subscribe("/queue/a", ack="client-individual"):
        await client.ack(message)

It wraps one `StompClient` at a time. A follower refuses CONNECT with `not the leader` and a
`leader` header; the client connects there next (at most `maxRedirects` hops in a row). When
the connection breaks it reconnects with ActiveMQ's back-off (see `failover_url`): the group it
was on first, its other nodes before the one that broke, then the other groups in turn.

A raftmq node that goes (stopped, or removed from its group) asks the client to resume its
session at the leader: the connection moves there without a break (raftmq.client.resume; the
`resumed` event), and nothing below applies. What survives a reconnect:
- SENDs. Each carries an `_AMQ_DUPL_ID` (ours unless the caller set one). A SEND whose RECEIPT
  had not arrived when the connection broke is written again on the next connection with the
  same id, in the original order and before any newer SEND, so the broker's duplicate
  detection stores it once. Only a RECEIPT completes a send: if the client gives up, closes or
  the `timeout` option runs out first, the send fails with `ClientError` (outcome unknown).
  Duplicate detection is per group: a SEND retried on another group may be stored by both.
- Not what the broker refused. An ERROR that is a verdict on a frame (too large, malformed,
  access denied, an invalid destination: anything but the transient ones in
  `failover_connector.TRANSIENT_ERRORS`) fails that SEND, or ends that subscription, with
  `BrokerRefused` carrying the broker's message; it is not written again, and the rest goes on
  over a new connection. The ERROR names the frame by `receipt-id` when the broker could read
  it. One that could not be parsed (over a size limit) is named by nothing: the node answers
  every frame before it first, so it is pinned on the oldest frame of that connection still
  waiting for its RECEIPT once the same ERROR came back for it `UNNAMED_REFUSALS_TO_BLAME`
  times in a row (had the culprit no receipt, it is not written again and the run breaks).
- Subscriptions: subscribed again with the same destination, id, ack mode and headers.
  Messages a broken connection delivered are never ACKed on another one; `ack` on them returns
  False and the broker redelivers them.
- Not transactions: the broker aborts them with the connection; `commit` then raises
  `TransactionRolledBack`, and their unconfirmed SENDs fail.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from raftmq.client.browse import BrowseResult, browse_failover
from raftmq.client.failover_bound import ConnectionBound
from raftmq.client.failover_connector import (
    Connector,
    EventListener,
    FailoverEvent,
    Whereabouts,
    hinted_leader,
    leader_address,
    notify,
    verdict_of,
)
from raftmq.client.failover_outbox import Outbox, PendingSend, new_dupl_id
from raftmq.client.failover_sends import SendFuture, Sends
from raftmq.client.failover_subscription import DeliveryCallback, FailoverSubscription, FailoverSubscriptions
from raftmq.client.failover_url import Address, FailoverOptions, normalize_groups, parse_failover_url, with_overrides
from raftmq.client.headers import HeadersArg, header_pairs
from raftmq.client.stomp_client import StompClient
from raftmq.client.subscription import DEFAULT_QUEUE_SIZE
from raftmq.client.terms import TermFloor
from raftmq.client.tls import resolve_ssl_context
from raftmq.core.commands import ACK_MODES
from raftmq.errors import BrokerRefused, ClientError, TransactionRolledBack
from raftmq.protocol.frame import Frame
from raftmq.protocol.limits import Limits

# Heart-beats on by default: without them a leader that hangs (SIGSTOP, a partition) is never
# noticed and nothing fails over. 10 s matches the node's default; the client gives up on a
# silent broker after twice its interval.
DEFAULT_HEARTBEAT = (10_000, 10_000)
GroupsArg = Sequence[Sequence[Address | tuple[str, int] | str]]


class FailoverClient:
    """Build with `connect_failover()` (or construct in a running loop, then `await start()`)."""

    def __init__(
        self,
        groups: GroupsArg,
        options: FailoverOptions | None = None,
        *,
        login: str | None = None,
        passcode: str | None = None,
        vhost: str | None = None,
        version: str = "1.2",
        heartbeat: tuple[int, int] = DEFAULT_HEARTBEAT,
        connect_headers: HeadersArg = None,
        limits: Limits | None = None,
        rng: random.Random | None = None,
        dupl_id_factory: Callable[[], str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        ca_file: str | None = None,
        tls: bool = False,
        websocket_path: str | None = None,
        in_vm: bool = False,
        resume: bool = True,
    ) -> None:
        """TLS: `ssl_context`, or `ca_file` (the CA that signed the brokers' certificates), or
        `tls` (a stomp+ssl:// URL; the system's CAs unless one of the other two is given).
        `resume`: carry a session on when its node goes and asks to (raftmq.client.resume);
        without, that connection breaks and the client reconnects."""
        self._loop = asyncio.get_running_loop()
        self.groups = normalize_groups(groups)
        self.options = options or FailoverOptions()
        connect_kwargs: dict[str, Any] = {
            "ssl_context": resolve_ssl_context(ssl_context, ca_file, tls),
            "login": login,
            "passcode": passcode,
            "vhost": vhost,
            "version": version,
            "heartbeat": (0, 0) if in_vm else heartbeat,  # in-VM: no wire whose silence could mean a loss
            "headers": header_pairs(connect_headers),
            "limits": limits,
            "timeout": self.options.connect_timeout_ms / 1000,
            "websocket_path": websocket_path,  # ws:// addresses: STOMP inside a WebSocket
            "in_vm": in_vm,  # vm:// addresses: brokers in this process, by name (raftmq.vm)
            "resume": resume,
        }
        self._connector = Connector(
            self.groups,
            self.options,
            connect_kwargs,
            rng if rng is not None else random.Random(),
            self._emit,
            lambda: self._state in ("closing", "closed"),
        )
        self._new_dupl_id = dupl_id_factory or new_dupl_id
        self.events: list[EventListener] = []
        self._state = "new"  # new, connecting, connected, reconnecting, closing, closed, failed
        self._client: StompClient | None = None
        self._generation = 0
        self.terms = TermFloor()  # the highest leader term any of its connections saw (raftmq.client.terms)
        self.address: Address | None = None
        self.group: int | None = None
        self._broken_address: Address | None = None
        self._leader_hint: Address | None = None  # named by the ERROR that ended the last connection
        self._outbox: Outbox[SendFuture] = Outbox()  # SENDs without their outcome, what each receipt confirms
        self._sends = Sends(self._loop, self._outbox, self.options.timeout_ms, self._new_dupl_id)
        self._subscriptions = FailoverSubscriptions()
        self._bound = ConnectionBound(lambda: (self._client, self._generation))  # ACKs and transactions
        self._state_change: asyncio.Future[None] = self._loop.create_future()
        self._supervisor: asyncio.Task[None] | None = None
        self.closed: asyncio.Future[BaseException | None] = self._loop.create_future()
        """`None` after `close()`, the `ClientError` if the client gave up reconnecting."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> FailoverClient:
        """Keyword arguments named like `FailoverOptions` fields override the URL's options;
        the rest go to the constructor."""
        target = parse_failover_url(url)
        kwargs.setdefault("tls", target.tls)
        kwargs.setdefault("websocket_path", target.websocket_path)
        kwargs.setdefault("in_vm", target.in_vm)
        return cls(target.groups, with_overrides(target.options, kwargs), **kwargs)

    # -- state ----------------------------------------------------------------------------------
    @property
    def is_connected(self) -> bool:
        return self._state == "connected"

    @property
    def connection_number(self) -> int:
        """Counts connections made; a `Delivery` carries the number of the one that made it."""
        return self._generation

    @property
    def pending_sends(self) -> int:
        """SENDs without their RECEIPT yet (in flight or waiting for a connection)."""
        return len(self._outbox)

    @property
    def stomp_client(self) -> StompClient | None:
        """The current connection, if any."""
        return self._client

    async def wait_connected(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            while self._state != "connected":
                self._check_usable()
                await asyncio.shield(self._state_change)

    # -- connecting -----------------------------------------------------------------------------
    def retry_now(self) -> None:
        """While reconnecting: end the back-off wait and attempt at once (the caller knows the
        brokers are back, as a cluster bridge does when the neighbour's leader speaks again).
        The attempts after it follow the back-off as before; no effect while connected."""
        self._connector.wake()

    async def start(self) -> None:
        """Connect (within `startupMaxReconnectAttempts`); raises `ClientError` on failure."""
        if self._state != "new":
            raise ClientError(f"start() on a client that is {self._state}")
        self._set_state("connecting")
        try:
            client, group, address = await self._connector.establish(startup=True, known=Whereabouts())
        except BaseException as exc:
            if self._state == "connecting":
                error = exc if isinstance(exc, ClientError) else ClientError(f"connect interrupted: {exc!r}")
                self._give_up(error)
            raise
        if self._state != "connecting":  # closed while connecting
            await client.disconnect()
            raise ClientError("client closed while connecting")
        self._on_connected(client, group, address)
        self._supervisor = self._loop.create_task(self._supervise())

    async def _supervise(self) -> None:
        while True:
            client = self._client
            assert client is not None
            await asyncio.wait([client.closed])
            if self._state != "connected":
                return  # closing
            self._on_break(client)
            try:
                known = Whereabouts(self.group, self._broken_address, self._leader_hint)
                client, group, address = await self._connector.establish(startup=False, known=known)
            except ClientError as exc:
                self._give_up(exc)
                return
            self._on_connected(client, group, address)

    def _on_connected(self, client: StompClient, group: int, address: Address) -> None:
        self.terms.see(client.terms.highest)  # its CONNECTED's
        client.terms = self.terms  # older connections' frames are judged by what this one saw
        self._generation += 1
        self._client = client
        client.on_resumed = lambda leader: self._on_resumed(client, leader)
        self.group = group
        self.address = address
        self._broken_address = None
        self._leader_hint = None
        self._outbox.new_connection()
        self._set_state("connected")
        self._subscriptions.attach_all(client, self._generation, self._outbox.written)
        resent = self._outbox.resent_ids()
        self._sends.write_all(self._client)
        self._emit(FailoverEvent("connected", address=address, group=group, resent=resent))

    def _on_resumed(self, client: StompClient, leader: str) -> None:
        if client is not self._client:
            return
        left, self.address = self.address, leader_address(leader) or self.address
        self._emit(FailoverEvent("resumed", address=left, group=self.group, target=self.address))

    def _on_break(self, client: StompClient) -> None:
        cause = client.closed.result()
        self._client = None
        self._broken_address = self.address
        self._set_state("reconnecting")
        if isinstance(cause, BrokerRefused):
            self._leader_hint = hinted_leader(cause)
        culprit = self._outbox.connection_lost(verdict_of(cause))
        if culprit is not None:
            assert isinstance(cause, BrokerRefused)
            # A copy each: the same exception raised in several awaits would pile up tracebacks.
            refusal = BrokerRefused(str(cause), dict(cause.headers), cause.body)
            if isinstance(culprit, FailoverSubscription):
                self._subscriptions.forget(culprit)
                culprit.end(refusal)
            elif isinstance(culprit, PendingSend):
                self._sends.settle(culprit, error=refusal)
        self._bound.connection_lost()
        self._sends.fail_all(lambda pending: None if pending.transaction is None else TransactionRolledBack(
            f"connection lost; transaction {pending.transaction!r} was rolled back"))
        self._subscriptions.detach_all()
        self._emit(FailoverEvent("disconnected", address=self.address, group=self.group, error=cause))
        if culprit is not None:
            dupl_id = culprit.dupl_id if isinstance(culprit, PendingSend) else None
            self._emit(FailoverEvent("refused", address=self.address, group=self.group, error=cause, dupl_id=dupl_id))
        if self._leader_hint is not None:
            self._emit(FailoverEvent("redirected", address=self.address, group=self.group, target=self._leader_hint))

    def _give_up(self, error: ClientError) -> None:
        self._set_state("failed")
        self._client = None
        self._sends.fail_all(lambda _: ClientError(f"send not confirmed, the client gave up: {error}"))
        self._subscriptions.end_all(error)
        if not self.closed.done():
            self.closed.set_result(error)
        self._emit(FailoverEvent("failed", error=error))

    # -- sending --------------------------------------------------------------------------------
    def send_nowait(self, destination: str, body: bytes, headers: HeadersArg = None, receipt: bool = True, *,
                    transaction: str | None = None) -> SendFuture:
        """Queue a SEND; the future gets the RECEIPT (or None once written, without `receipt`)."""
        self._check_usable()
        if transaction is not None:
            self._bound.check(transaction)
        pending = self._sends.make(destination, body, headers, receipt, transaction)
        if self._state == "connected":
            self._sends.write(self._client, pending)
        return pending.future

    async def send(self, destination: str, body: bytes, headers: HeadersArg = None, receipt: bool = True, *,
                   transaction: str | None = None) -> Frame | None:
        """`send_nowait` and wait: with `receipt`, for the RECEIPT, else while the socket's buffer
        is full. Raises `ClientError` when the outcome is unknown and `BrokerRefused` when the
        broker refused this SEND."""
        result = await self.send_nowait(destination, body, headers, receipt, transaction=transaction)
        client = self._client
        if not receipt and client is not None and not client.is_closed:
            try:
                await client.drain()  # flow control for sends nobody waits for
            except ClientError:
                pass  # the SEND was written; a break now is the supervisor's to handle
        return result

    # -- subscriptions ----------------------------------------------------------------------------
    def subscribe(
        self,
        destination: str,
        *,
        id: str | None = None,  # noqa: A002 - the STOMP header is called id
        ack: str = "auto",
        headers: HeadersArg = None,
        prefetch: int | None = None,
        callback: DeliveryCallback | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> FailoverSubscription:
        """Subscribe now (or on the next connection); every reconnect subscribes again."""
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
        self._check_usable()
        sub_id = self._subscriptions.new_id(id)
        subscription = FailoverSubscription(
            self, sub_id, destination, ack, header_pairs(headers), prefetch, callback, queue_size
        )
        self._subscriptions.add(subscription)
        if self._state == "connected":
            self._subscriptions.attach(subscription, self._client, self._generation, self._outbox.written)
        return subscription

    async def browse(
        self, destination: str, *, limit: int | None = None, selector: str | None = None, timeout: float = 10.0
    ) -> BrowseResult:
        """Copies of the messages waiting in the queue `destination`, in queue order, without
        consuming them; a browse cut short by a failover starts again (see raftmq.client.browse)."""
        self._check_usable()
        return await browse_failover(self, destination, limit=limit, selector=selector, timeout=timeout)

    def forget_subscription(self, subscription: FailoverSubscription) -> None:
        """The subscription unsubscribed: it is not subscribed again on the next connection."""
        self._subscriptions.forget(subscription)

    # -- acknowledgement --------------------------------------------------------------------------
    def ack_nowait(self, frame: Frame, *, transaction: str | None = None) -> bool:
        """ACK on the connection that delivered `frame`; False if that connection is gone
        (the broker redelivers the message)."""
        self._check_usable()
        return self._bound.acknowledge_nowait("ack", frame, transaction)

    def nack_nowait(self, frame: Frame, *, transaction: str | None = None) -> bool:
        self._check_usable()
        return self._bound.acknowledge_nowait("nack", frame, transaction)

    async def ack(self, frame: Frame, *, receipt: bool = False, transaction: str | None = None) -> bool:
        """Like `ack_nowait`; with `receipt`, returns after the RECEIPT (a break while waiting
        raises `ClientError`: the outcome is unknown)."""
        self._check_usable()
        return await self._bound.acknowledge("ack", frame, receipt, transaction)

    async def nack(self, frame: Frame, *, receipt: bool = False, transaction: str | None = None) -> bool:
        self._check_usable()
        return await self._bound.acknowledge("nack", frame, receipt, transaction)

    # -- transactions -----------------------------------------------------------------------------
    async def begin(self, txid: str, *, receipt: bool = True) -> None:
        """BEGIN on the current connection (waiting for one if reconnecting)."""
        await self.wait_connected()
        client = self._client
        assert client is not None
        self._bound.begun(txid)
        await client.begin(txid, receipt=receipt)

    async def commit(self, txid: str, *, receipt: bool = True) -> None:
        """COMMIT; `TransactionRolledBack` if its connection broke since BEGIN."""
        self._check_usable()
        client = self._bound.take(txid)
        await client.commit(txid, receipt=receipt)

    async def abort(self, txid: str, *, receipt: bool = False) -> None:
        self._check_usable()
        try:
            client = self._bound.take(txid)
        except TransactionRolledBack:
            return  # already rolled back by the broker
        await client.abort(txid, receipt=receipt)

    # -- closing ----------------------------------------------------------------------------------
    async def close(self, timeout: float = 10.0) -> None:
        """DISCONNECT (everything written before it is processed), then fail what is left."""
        if self._state in ("closing", "closed", "failed"):
            await asyncio.shield(self.closed)
            return
        self._set_state("closing")
        supervisor = self._supervisor
        if supervisor is not None and not supervisor.done():
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        client, self._client = self._client, None
        if client is not None and not client.is_closed:
            await client.disconnect(timeout)
            await asyncio.sleep(0)  # let the RECEIPT callbacks that arrived before it run
        self._sends.fail_all(lambda pending: ClientError(
            f"client closed before the RECEIPT; {'outcome unknown' if pending.writes else 'it was never sent'}"))
        self._subscriptions.end_all(None)
        self._set_state("closed")
        if not self.closed.done():
            self.closed.set_result(None)
        self._emit(FailoverEvent("closed", address=self.address, group=self.group))

    disconnect = close

    async def __aenter__(self) -> FailoverClient:
        if self._state == "new":
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals --------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._state in ("connected", "connecting", "reconnecting"):
            return
        if self._state == "failed":
            cause = self.closed.result() if self.closed.done() else None
            raise ClientError(f"client failed: {cause}") from cause
        raise ClientError(f"client is {self._state}")

    def _set_state(self, state: str) -> None:
        self._state = state
        change, self._state_change = self._state_change, self._loop.create_future()
        if not change.done():
            change.set_result(None)

    def _emit(self, event: FailoverEvent) -> None:
        notify(self.events, event, self._loop)


async def connect_failover(target: str | GroupsArg, **kwargs: Any) -> FailoverClient:
    """Build a `FailoverClient` from a URL (or a list of groups) and connect it.

    Keyword arguments named like `FailoverOptions` fields override the URL's options."""
    if isinstance(target, str):
        client = FailoverClient.from_url(target, **kwargs)
    else:
        options = with_overrides(kwargs.pop("options", None) or FailoverOptions(), kwargs)
        client = FailoverClient(target, options, **kwargs)
    await client.start()
    return client
