"""Failover URLs and reconnect options (pure: no sockets, no clock, no randomness).

Accepted forms::

    failover:(stomp://h1:61613,stomp://h2:61613)?initialReconnectDelay=10&randomize=false
    failover:stomp://h1:61613,stomp://h2:61613
    failover:((stomp://a1:1,stomp://a2:2,stomp://a3:3),(stomp://b1:1,stomp://b2:2))?...
    stomp://h1:61613,h2:61613          (a plain host list; `tcp://` and bare HOST:PORT work too)
    failover:(stomp+ssl://h1:61614,stomp+ssl://h2:61614)   (TLS; `ssl://` works too)
    vm://svc                           (in-VM: the broker `EmbeddedBroker(name="svc")` runs in this process)

TLS is a property of the whole URL (`FailoverTarget.tls`): every member of a group shares its
`[tls]` table, and a leader named in a redirect is reached the same way. Addresses without a
scheme follow the others; mixing `stomp://` and `stomp+ssl://` is an error.

A flat list is one group: the nodes of one Raft group, of which the client finds the leader
(following `not the leader` redirects). Nested parentheses list several groups, tried in
turn when a whole group is unreachable; a bare address next to parenthesised groups is a group
of one. The query options keep ActiveMQ's failover-transport names and meanings
(https://activemq.apache.org/failover-transport-reference): delays are in milliseconds,
`maxReconnectAttempts=-1` retries forever, `0` never reconnects after a break (a first
connect still makes one attempt). raftmq adds `connectionLoadBalancingPolicy` (Artemis names:
round-robin, random, random-sticky, first-element), `maxRedirects` and `connectTimeout`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote

from raftmq.client.policies import canonical_policy_name
from raftmq.client.tls import TLS_SCHEMES
from raftmq.errors import InvalidFailoverUrl

DEFAULT_STOMP_PORT = 61613
ADDRESS_SCHEMES = ("stomp", "tcp")
WEBSOCKET_SCHEMES = ("ws", "wss")  # STOMP over WebSocket (wss: with TLS); the address has a path
VM_SCHEME = "vm"  # an in-VM broker (raftmq.vm): the address is its name, with no port


class Address(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class FailoverOptions:
    """Reconnect behaviour; field names are the ActiveMQ options in snake case."""

    initial_reconnect_delay_ms: float = 10
    max_reconnect_delay_ms: float = 30_000
    use_exponential_backoff: bool = True
    backoff_multiplier: float = 2.0
    max_reconnect_attempts: int = -1
    startup_max_reconnect_attempts: int = -1  # -1: the first connect uses max_reconnect_attempts
    randomize: bool = True  # ActiveMQ's switch: random when true, first-element when false
    policy: str | None = None  # an Artemis policy name; overrides `randomize`
    timeout_ms: float = -1  # a send without a receipt after this long fails (-1: never)
    max_redirects: int = 5  # `not the leader` hops followed in a row before giving up on a group
    connect_timeout_ms: float = 5_000  # TCP connect plus STOMP handshake, per address

    def __post_init__(self) -> None:
        _require(self.initial_reconnect_delay_ms >= 0, "initialReconnectDelay", "must be >= 0")
        _require(self.max_reconnect_delay_ms >= 0, "maxReconnectDelay", "must be >= 0")
        _require(self.backoff_multiplier >= 1, "backOffMultiplier", "must be >= 1")
        _require(self.max_reconnect_attempts >= -1, "maxReconnectAttempts", "must be -1 (forever) or >= 0")
        _require(
            self.startup_max_reconnect_attempts >= -1,
            "startupMaxReconnectAttempts",
            "must be -1 (use maxReconnectAttempts) or >= 0",
        )
        _require(self.timeout_ms == -1 or self.timeout_ms > 0, "timeout", "must be -1 (none) or > 0")
        _require(self.max_redirects >= 0, "maxRedirects", "must be >= 0")
        _require(self.connect_timeout_ms > 0, "connectTimeout", "must be > 0")
        if self.policy is not None:
            try:
                object.__setattr__(self, "policy", canonical_policy_name(self.policy))
            except ValueError as exc:
                raise InvalidFailoverUrl(f"connectionLoadBalancingPolicy: {exc}") from None

    @property
    def effective_policy(self) -> str:
        if self.policy is not None:
            return self.policy
        return "random" if self.randomize else "first-element"

    def replace(self, **changes: Any) -> FailoverOptions:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class FailoverTarget:
    """What a URL names: groups of node addresses, and the reconnect options."""

    groups: tuple[tuple[Address, ...], ...]
    options: FailoverOptions
    tls: bool = False  # a stomp+ssl:// (or ssl://, wss://) URL
    websocket_path: str | None = None  # ws:// or wss:// addresses: STOMP over WebSocket to this path
    in_vm: bool = False  # vm:// addresses: brokers in this process (raftmq.vm), by name


def _parse_ms(value: str) -> float:
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError("not a finite number")
    return number


def _parse_int(value: str) -> int:
    return int(value)


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("expected true or false")


# URL option name -> (FailoverOptions field, parser).
URL_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "initialReconnectDelay": ("initial_reconnect_delay_ms", _parse_ms),
    "maxReconnectDelay": ("max_reconnect_delay_ms", _parse_ms),
    "useExponentialBackOff": ("use_exponential_backoff", _parse_bool),
    "backOffMultiplier": ("backoff_multiplier", float),
    "maxReconnectAttempts": ("max_reconnect_attempts", _parse_int),
    "startupMaxReconnectAttempts": ("startup_max_reconnect_attempts", _parse_int),
    "randomize": ("randomize", _parse_bool),
    "timeout": ("timeout_ms", _parse_ms),
    "connectionLoadBalancingPolicy": ("policy", str),
    "connectionLoadBalancingPolicyClassName": ("policy", str),  # Artemis's spelling
    "maxRedirects": ("max_redirects", _parse_int),
    "connectTimeout": ("connect_timeout_ms", _parse_ms),
}

# ActiveMQ failover options this client does not implement: refused rather than ignored.
UNSUPPORTED_ACTIVEMQ_OPTIONS = frozenset(
    {
        "backup",
        "backupPoolSize",
        "maxCacheSize",
        "trackMessages",
        "trackTransactionProducers",
        "priorityBackup",
        "priorityURIs",
        "updateURIsSupported",
        "updateURIsURL",
        "rebalanceUpdateURIs",
        "reconnectSupported",
        "reconnectDelayExponent",
        "warnAfterReconnectAttempts",
    }
)


def parse_failover_url(url: str) -> FailoverTarget:
    """Parse any accepted form; raises `InvalidFailoverUrl` naming the part at fault."""
    text = url.strip()
    if not text:
        raise InvalidFailoverUrl("empty broker URL")
    if text.lower().startswith("failover:"):
        body = text[len("failover:") :]
        if body.startswith("//"):
            body = body[2:]
        if body.startswith("("):
            close = _matching_paren(body, 0, url)
            inner, rest = body[1:close], body[close + 1 :]
            if rest and not rest.startswith("?"):
                raise InvalidFailoverUrl(f"unexpected {rest!r} after the address list in {url!r}")
            options = _parse_query(rest[1:], url) if rest else FailoverOptions()
            return FailoverTarget(_parse_groups(inner, url), options, _uses_tls(inner, url),
                                  _websocket_path(inner, url), _in_vm(inner, url))
        if "?" in body:
            raise InvalidFailoverUrl(f"put the addresses in parentheses to give options: failover:(...)?... in {url!r}")
        return FailoverTarget(_parse_groups(body, url), FailoverOptions(), _uses_tls(body, url),
                              _websocket_path(body, url), _in_vm(body, url))
    if "?" in text:
        raise InvalidFailoverUrl(f"options need the failover:(...)?... form, in {url!r}")
    if "(" in text or ")" in text:
        raise InvalidFailoverUrl(f"parenthesised groups need the failover: prefix, in {url!r}")
    return FailoverTarget(_parse_groups(text, url), FailoverOptions(), _uses_tls(text, url), _websocket_path(text, url),
                          _in_vm(text, url))


def _uses_tls(addresses: str, url: str) -> bool:
    """Whether the (already validated) address list asks for TLS; refuses a mix."""
    schemes = {
        item.split("://", 1)[0].strip("( ").lower()
        for item in addresses.split(",")
        if "://" in item
    }
    tls = {scheme in (*TLS_SCHEMES, "wss") for scheme in schemes}
    if len(tls) > 1:
        raise InvalidFailoverUrl(f"mixes TLS (stomp+ssl://) and plain (stomp://) addresses: {url!r}")
    return tls == {True}


def _in_vm(addresses: str, url: str) -> bool:
    """Whether the (already validated) addresses are in-VM ones; refuses a mix with others."""
    kinds = {item.strip("( ").partition("://")[0].lower() == VM_SCHEME
             for item in addresses.split(",") if "://" in item}
    if len(kinds) > 1:
        raise InvalidFailoverUrl(f"mixes in-VM (vm://) and network addresses: {url!r}")
    return kinds == {True}


def _websocket_path(addresses: str, url: str) -> str | None:
    """The path of the (already validated) ws:// or wss:// addresses (None: plain STOMP);
    refuses a mix of WebSocket and plain addresses, or of paths."""
    kinds: set[str | None] = set()
    for item in addresses.split(","):
        item = item.strip("( )")
        if not item:
            continue
        scheme, sep, rest = item.partition("://")
        if not sep:
            continue  # an address without a scheme follows the others
        if scheme.lower() in WEBSOCKET_SCHEMES:
            slash = rest.find("/")
            kinds.add(rest[slash:] if slash >= 0 else "/")
        else:
            kinds.add(None)
    if len(kinds) > 1:
        raise InvalidFailoverUrl(f"every address must be ws:// (or wss://) with the same path, or none: {url!r}")
    return kinds.pop() if kinds else None


def parse_address(text: str) -> Address:
    """`stomp://HOST:PORT`, `tcp://HOST:PORT`, `stomp+ssl://HOST:PORT`, `ssl://HOST:PORT`,
    `HOST:PORT`, `HOST` or `[IPv6]:PORT` (whether it is TLS: `FailoverTarget.tls`)."""
    raw = text.strip()
    if not raw:
        raise InvalidFailoverUrl("empty address")
    rest = raw
    if "://" in raw:
        scheme, rest = raw.split("://", 1)
        if scheme.lower() == VM_SCHEME:
            return _vm_address(rest, raw)
        if scheme.lower() not in (*ADDRESS_SCHEMES, *TLS_SCHEMES, *WEBSOCKET_SCHEMES):
            raise InvalidFailoverUrl(
                f"unsupported scheme {scheme!r} in {raw!r}; use stomp:// or tcp://, stomp+ssl:// or ssl:// for TLS, "
                "ws:// or wss:// for WebSocket, vm:// for a broker in this process"
            )
        if scheme.lower() in WEBSOCKET_SCHEMES and "/" in rest:
            rest = rest[:rest.find("/")]  # the path is the URL's (FailoverTarget.websocket_path)
    if "?" in rest:
        raise InvalidFailoverUrl(f"per-address options are not supported: {raw!r}")
    rest = rest.rstrip("/")
    if "/" in rest:
        raise InvalidFailoverUrl(f"an address has no path: {raw!r}")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise InvalidFailoverUrl(f"unclosed '[' in {raw!r}")
        host, after = rest[1:end], rest[end + 1 :]
        if after and not after.startswith(":"):
            raise InvalidFailoverUrl(f"unexpected {after!r} after the IPv6 host in {raw!r}")
        port_text = after[1:] if after else ""
    else:
        if rest.count(":") > 1:
            raise InvalidFailoverUrl(f"write an IPv6 host in brackets: {raw!r}")
        host, _, port_text = rest.partition(":")
    if not host:
        raise InvalidFailoverUrl(f"missing host in {raw!r}")
    if port_text == "":
        return Address(host, DEFAULT_STOMP_PORT)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidFailoverUrl(f"bad port {port_text!r} in {raw!r}")
    return Address(host, int(port_text))


def _vm_address(name: str, raw: str) -> Address:
    """`vm://NAME`: the in-VM broker's name as the host, port 0."""
    name = name.rstrip("/")
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise InvalidFailoverUrl(f"an in-VM broker's name is letters, digits, '.', '-' or '_': {raw!r}")
    return Address(name, 0)


def _matching_paren(text: str, start: int, url: str) -> int:
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
    raise InvalidFailoverUrl(f"unbalanced parentheses in {url!r}")


def _split_top_level(text: str, url: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
            if depth > 1:
                raise InvalidFailoverUrl(f"groups cannot nest deeper than one level in {url!r}")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise InvalidFailoverUrl(f"unbalanced parentheses in {url!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise InvalidFailoverUrl(f"unbalanced parentheses in {url!r}")
    parts.append("".join(current))
    return [part.strip() for part in parts]


def _parse_groups(text: str, url: str) -> tuple[tuple[Address, ...], ...]:
    items = _split_top_level(text, url)
    if any(not item for item in items):
        raise InvalidFailoverUrl(f"empty entry in the address list of {url!r}")
    nested = any(item.startswith("(") for item in items)
    groups: list[tuple[Address, ...]] = []
    if nested:
        for item in items:
            if item.startswith("("):
                if not item.endswith(")"):
                    raise InvalidFailoverUrl(f"unexpected text after group {item!r} in {url!r}")
                members = _split_top_level(item[1:-1], url)
                if any(not member or "(" in member or ")" in member for member in members):
                    raise InvalidFailoverUrl(f"bad group {item!r} in {url!r}")
                groups.append(tuple(parse_address(member) for member in members))
            else:
                groups.append((parse_address(item),))
    else:
        if any("(" in item or ")" in item for item in items):
            raise InvalidFailoverUrl(f"misplaced parenthesis in {url!r}")
        groups.append(tuple(parse_address(item) for item in items))
    seen: set[Address] = set()
    for address in itertools.chain.from_iterable(groups):
        if address in seen:
            raise InvalidFailoverUrl(f"address {address} is listed twice in {url!r}")
        seen.add(address)
    return tuple(groups)


def _parse_query(query: str, url: str) -> FailoverOptions:
    if not query:
        return FailoverOptions()
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in query.split("&"):
        if not pair:
            continue
        name, sep, raw_value = pair.partition("=")
        name, value = unquote(name.strip()), unquote(raw_value.strip())
        if not sep or not value:
            raise InvalidFailoverUrl(f"option {name!r} has no value in {url!r}")
        if name in UNSUPPORTED_ACTIVEMQ_OPTIONS or name.startswith("nested."):
            raise InvalidFailoverUrl(f"failover option {name!r} is not supported by raftmq's client")
        if name not in URL_OPTIONS:
            hint = next((known for known in URL_OPTIONS if known.lower() == name.lower()), None)
            suggestion = f" (did you mean {hint!r}?)" if hint else f"; known options: {', '.join(URL_OPTIONS)}"
            raise InvalidFailoverUrl(f"unknown failover option {name!r}{suggestion}")
        field, parse = URL_OPTIONS[name]
        if field in values:
            raise InvalidFailoverUrl(f"failover option {name!r} given twice (as {given[field]!r} and {name!r})")
        try:
            values[field] = parse(value)
        except ValueError as exc:
            raise InvalidFailoverUrl(f"failover option {name}={value!r}: {exc}") from None
        given[field] = name
    if "policy" in values and "randomize" in values:
        raise InvalidFailoverUrl(
            f"give either randomize or {given['policy']}, not both (randomize=true is random, false is first-element)"
        )
    return FailoverOptions(**values)


def _require(condition: bool, option: str, message: str) -> None:
    if not condition:
        raise InvalidFailoverUrl(f"failover option {option} {message}")


# -- the reconnect schedule ------------------------------------------------------------------


def reconnect_delays_ms(options: FailoverOptions) -> Iterator[float]:
    """The waits between reconnect attempts of one outage: initialReconnectDelay, then
    multiplied by backOffMultiplier after each failed attempt up to maxReconnectDelay
    (constant when useExponentialBackOff is false). Infinite."""
    delay = options.initial_reconnect_delay_ms
    if not options.use_exponential_backoff:
        while True:
            yield delay
    cap = options.max_reconnect_delay_ms
    delay = min(delay, cap)
    while True:
        yield delay
        delay = min(delay * options.backoff_multiplier, cap)


def attempt_limit(options: FailoverOptions, *, startup: bool) -> int | None:
    """How many attempts (passes over every address) an outage gets; None means no limit."""
    limit = options.max_reconnect_attempts
    if startup and options.startup_max_reconnect_attempts != -1:
        limit = options.startup_max_reconnect_attempts
    if limit == -1:
        return None
    # ActiveMQ: 0 means "do not reconnect", yet the very first connect is still tried once.
    return max(limit, 1) if startup else limit


def attempt_plan_ms(options: FailoverOptions, *, startup: bool) -> Iterator[float]:
    """The wait before each attempt of one outage, ending when the attempts are used up.

    The first connect tries at once and waits only between attempts; after a break every
    attempt, the first included, is preceded by the back-off delay (except the first attempt
    after a deposed leader named its successor: the connector goes there at once).
    """
    delays = reconnect_delays_ms(options)
    waits: Iterator[float] = itertools.chain([0.0], delays) if startup else delays
    limit = attempt_limit(options, startup=startup)
    return waits if limit is None else itertools.islice(waits, limit)


def normalize_groups(groups: Sequence[Sequence[Address | tuple[str, int] | str]]) -> tuple[tuple[Address, ...], ...]:
    """Groups given in code: each address an `Address`, a (host, port) pair or a string."""
    normalized: list[tuple[Address, ...]] = []
    for group in groups:
        if isinstance(group, (str, Address)) or (
            isinstance(group, tuple) and len(group) == 2 and isinstance(group[1], int)
        ):
            raise InvalidFailoverUrl("groups must be a list of lists of addresses")
        members = tuple(
            parse_address(member) if isinstance(member, str) else Address(str(member[0]), int(member[1]))
            for member in group
        )
        if not members:
            raise InvalidFailoverUrl("a group needs at least one address")
        normalized.append(members)
    if not normalized:
        raise InvalidFailoverUrl("no broker addresses given")
    return tuple(normalized)


def with_overrides(options: FailoverOptions, kwargs: dict[str, Any]) -> FailoverOptions:
    """`options` with the keyword arguments named like its fields taken out of `kwargs` and
    applied (the rest stay in `kwargs` for the client's constructor)."""
    names = {field.name for field in dataclasses.fields(FailoverOptions)}
    overrides = {name: kwargs.pop(name) for name in list(kwargs) if name in names}
    return options.replace(**overrides) if overrides else options
