"""Finding a leader: which address to try, leader redirects, back-off between attempts.

`Connector.establish()` runs one outage's attempts (see `failover_url.attempt_plan_ms`); each
attempt is one pass over the groups and their nodes, in the order the load-balancing policy
and what the client last saw suggest, following `not the leader` redirects on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftmq.client.failover_outbox import Verdict
from raftmq.client.failover_url import Address, FailoverOptions, attempt_plan_ms, parse_address
from raftmq.client.policies import make_policy, rotated
from raftmq.client.stomp_client import StompClient, connect
from raftmq.errors import (
    BrokerRefused,
    ClientError,
    FailoverExhausted,
    InvalidFailoverUrl,
    NotStompPort,
    NoVmBroker,
    RedirectLimitExceeded,
)
from raftmq.protocol.frame import REDIRECT_HEADER

NOT_LEADER = "not the leader"
ACCESS_REFUSED = "access refused"  # CONNECT refused for its login/passcode: retrying cannot help
# ERRORs that pass no verdict on what the client sent: the node is not (or no longer) the one to
# talk to, is stopping, or lost commands to a leader change. Resending elsewhere is the cure.
# Any other ERROR answers a frame of the client's, and that frame would be refused again.
TRANSIENT_ERRORS = frozenset({
    NOT_LEADER,
    "broker shutting down",
    "command not committed",  # the append failed (leader change, timeout): outcome unknown
    "not connected",  # the replicated state no longer knows the session: a new leader swept it
    "heart-beat timeout",
    "slow consumer",
    "message body unavailable",  # a body this node cannot read: another member may have it
})


def is_access_refused(error: BaseException) -> bool:
    return isinstance(error, BrokerRefused) and error.headers.get("message") == ACCESS_REFUSED


def is_verdict(error: BaseException | None) -> bool:
    """Whether a connection ended with an ERROR that refused one of the client's frames
    (too large, malformed, access denied, an invalid destination...): resending cannot help."""
    return isinstance(error, BrokerRefused) and error.headers.get("message") not in TRANSIENT_ERRORS


def verdict_of(error: BaseException | None) -> Verdict | None:
    """What the outbox needs of an ERROR that ended a connection, if it was a verdict on a frame."""
    if not isinstance(error, BrokerRefused) or not is_verdict(error):
        return None
    return Verdict(error.headers.get("receipt-id"), error.headers.get("message") or str(error))


@dataclass(frozen=True)
class FailoverEvent:
    """What a listener in `FailoverClient.events` is told.

    kind: `connected` (address, group, resent: the `_AMQ_DUPL_ID`s written again),
    `disconnected` (address, error), `refused` (error: an ERROR that failed a SEND, then not
    retried, or ended a subscription; dupl_id: that SEND's `_AMQ_DUPL_ID`),
    `redirected` (address that refused or was deposed,
    target: the leader it named), `resumed` (address: the node that went, target: the leader
    where the session carried on, on a new socket, without a break: raftmq.client.resume),
    `attempt_failed` (attempt number, error), `failed` (error: the client gave up), `closed`.
    """

    kind: str
    address: Address | None = None
    group: int | None = None
    target: Address | None = None
    error: BaseException | None = None
    attempt: int = 0
    resent: tuple[str, ...] = ()
    dupl_id: str | None = None


EventListener = Callable[[FailoverEvent], None]


def notify(listeners: list[EventListener], event: FailoverEvent, loop: asyncio.AbstractEventLoop) -> None:
    """Tell every listener; one that raises is reported to the loop and the rest still hear it."""
    for listener in list(listeners):
        try:
            listener(event)
        except Exception as exc:  # a listener's bug must not break failover
            loop.call_exception_handler({"message": "failover event listener raised", "exception": exc, "event": event})


@dataclass(frozen=True)
class Whereabouts:
    """What the client knows when an outage starts."""

    group: int | None = None  # the group it was connected to (tried first)
    broken: Address | None = None  # the node whose connection broke (tried last in its group)
    leader_hint: Address | None = None  # the leader a deposed node named (tried first)


def hinted_leader(refusal: BrokerRefused) -> Address | None:
    """The `leader` address of a `not the leader` ERROR, if it names a usable one."""
    hint = refusal.headers.get("leader")
    if refusal.headers.get("message") != NOT_LEADER or not hint:
        return None
    return leader_address(hint)


def leader_address(hint: str) -> Address | None:
    """The address a `leader` header names, if usable."""
    try:
        return parse_address(hint)
    except InvalidFailoverUrl:
        return None


class Connector:
    def __init__(
        self,
        groups: tuple[tuple[Address, ...], ...],
        options: FailoverOptions,
        connect_kwargs: dict[str, Any],
        rng: random.Random,
        emit: EventListener,
        cancelled: Callable[[], bool],
    ) -> None:
        self.groups = groups
        self.options = options
        # Followers relay a client to the leader unless it asks to be redirected; this client
        # follows redirects, so it asks, and its session runs on the leader without a hop.
        headers = list(connect_kwargs.get("headers") or [])
        if not any(name == REDIRECT_HEADER for name, _value in headers):
            headers.append((REDIRECT_HEADER, "true"))
        self._connect_kwargs = {**connect_kwargs, "headers": headers}
        policy = options.effective_policy
        self._group_policy = make_policy(policy, rng)
        self._node_policies = [make_policy(policy, rng) for _ in groups]
        self._emit = emit
        self._cancelled = cancelled
        # Set by `wake`: the wait before the next attempt ends at once (the caller learned that
        # the other side is back).
        self._woken = asyncio.Event()

    def wake(self) -> None:
        """Cut the current (or next) back-off wait short: attempt now."""
        self._woken.set()

    async def _wait(self, wait_ms: float) -> None:
        if wait_ms > 0 and not self._woken.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), wait_ms / 1000)
        else:
            await asyncio.sleep(0)
        self._woken.clear()

    async def establish(self, *, startup: bool, known: Whereabouts) -> tuple[StompClient, int, Address]:
        """Attempts with back-off between them; `FailoverExhausted` when none is left."""
        errors: list[BaseException] = []
        attempt = 0
        self._woken.clear()  # a wake counts during an outage only
        for wait_ms in attempt_plan_ms(self.options, startup=startup):
            if attempt == 0 and known.leader_hint is not None:
                wait_ms = 0  # a deposed leader named its successor (a hand-over): no failure to back off from
            await self._wait(wait_ms)
            if self._cancelled():
                raise ClientError("client closed while connecting")
            attempt += 1
            try:
                return await self._attempt(known)
            except ClientError as exc:
                if is_access_refused(exc) or isinstance(exc, NotStompPort):
                    raise  # every node shares the users: wrong credentials stay wrong; so do wrong ports
                if startup and isinstance(exc, NoVmBroker):
                    raise  # a name no broker of this process serves (later, one stopped: it may be back)
                errors.append(exc)
                self._emit(FailoverEvent("attempt_failed", error=exc, attempt=attempt))
        if not errors:
            raise FailoverExhausted("connection lost and reconnecting is off (maxReconnectAttempts=0)")
        raise FailoverExhausted(f"gave up after {attempt} connect attempt(s); last: {errors[-1]}") from errors[-1]

    def node_order(self, group: int, known: Whereabouts) -> list[Address]:
        nodes = self.groups[group]
        order = rotated(nodes, self._node_policies[group].select(len(nodes)))
        if known.broken in order:
            # The node whose connection just broke is the least likely to be the leader now.
            order.remove(known.broken)
            order.append(known.broken)
        if known.leader_hint is not None and group == known.group:
            # A deposed leader named its successor: go there first.
            order = [known.leader_hint, *(address for address in order if address != known.leader_hint)]
        return order

    async def _attempt(self, known: Whereabouts) -> tuple[StompClient, int, Address]:
        """One pass: the groups in policy order (the current group first), each group's nodes."""
        count = len(self.groups)
        start = known.group if known.group is not None else self._group_policy.select(count)
        failures: list[str] = []
        wrong_ports = 0  # addresses that answered as no STOMP port does (an admin or Raft port)
        unserved = 0  # vm:// names no broker of this process serves
        for group in rotated(range(count), start):
            for address in self.node_order(group, known):
                try:
                    client, landed = await self._connect_following_redirects(group, address)
                except RedirectLimitExceeded as exc:
                    failures.append(str(exc))
                    break  # the group is mid-election or misconfigured: try the next group
                except ClientError as exc:
                    if is_access_refused(exc):
                        raise
                    failures.append(f"{address}: {exc}")
                    wrong_ports += isinstance(exc, NotStompPort)
                    unserved += isinstance(exc, NoVmBroker)
                    continue
                return client, group, landed
        if failures and wrong_ports == len(failures):
            raise NotStompPort("no STOMP port among the addresses: " + "; ".join(failures))
        if failures and unserved == len(failures):
            raise NoVmBroker("; ".join(failures))
        raise ClientError("no leader reachable: " + "; ".join(failures))

    async def _connect_following_redirects(self, group: int, address: Address) -> tuple[StompClient, Address]:
        target = address
        path = [address]
        while True:
            try:
                kwargs = self._connect_kwargs
                if target.port and kwargs.get("in_vm"):  # an in-VM broker's redirect names a TCP address
                    kwargs = {**kwargs, "in_vm": False}
                client = await connect(target.host, target.port, **kwargs)
            except BrokerRefused as exc:
                leader = hinted_leader(exc)
                if leader is None:
                    raise
                if len(path) > self.options.max_redirects:
                    hops = " -> ".join(str(a) for a in [*path, leader])
                    raise RedirectLimitExceeded(
                        f"more than {self.options.max_redirects} leader redirect(s) in group {group}: {hops}"
                    ) from exc
                self._emit(FailoverEvent("redirected", address=target, group=group, target=leader))
                path.append(leader)
                target = leader
                continue
            return client, target


async def connect_to_leader(
    groups: tuple[tuple[Address, ...], ...], options: FailoverOptions, **connect_kwargs: Any
) -> tuple[StompClient, Address]:
    """One plain connection to a leader of `groups`, found as `FailoverClient` finds it (policy,
    redirects, the startup attempts of `options`), and nothing more: no reconnecting, no
    resending. For callers that account for a broken connection themselves (`raftmq bench`).
    `connect_kwargs` are `connect()`'s (login, timeout, ssl_context, ...)."""
    connector = Connector(groups, options, connect_kwargs, random.Random(), lambda _event: None, lambda: False)
    client, _group, address = await connector.establish(startup=True, known=Whereabouts())
    return client, address
