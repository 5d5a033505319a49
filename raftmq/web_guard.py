"""What a web page may make a node do: the pure checks of an HTTP request's `Host`, `Origin`
and fetch metadata, for the admin port (raftmq.server.admin) and the STOMP WebSocket handshake
(raftmq.server.websocket). No I/O: the shells pass a request's headers in and get a verdict.

Three attacks are closed here (docs/operations.md, "What the admin port refuses"):

- **Cross-site request forgery.** A page of any site the operator visits can make the
  browser send a "simple" POST (a form, or `fetch` in `no-cors` mode with a text body) to
  the admin port, with the operator's cached login. A request that changes anything is
  served only with `Content-Type: application/json` (a type no form and no `no-cors` fetch
  can send: the browser must ask first, and `preflight` grants nothing to a stranger), only
  from the console's own origin or one listed in `admin_origins`, and only without
  `Sec-Fetch-Site: cross-site` / `same-site` unless its origin is listed. A browser's write
  (one with `Origin` or `Sec-Fetch-Site`) must also carry the console's anti-forgery token
  (`TokenMint`), which a page of another origin cannot read.
- **DNS rebinding.** A page of `evil.example` whose name is made to resolve to 127.0.0.1 is
  same-origin with whatever listens there, but its requests carry `Host: evil.example`. A
  request is served only when its `Host` is a name the port is known by (`HostNames`):
  an IP address the connection came in on, a loopback name or address, or a configured one.
- **Cross-site WebSocket hijacking** (the client port): `origin_allowed` with
  `websocket_origins`, and the same `Host` rule.

Requests with neither `Origin` nor `Sec-Fetch-Site` (the CLI, scripts, curl, probes,
Prometheus, the members themselves) are not a browser's and keep working: they cannot be
forged by a page, and the `Content-Type` rule still stands.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_ORIGINS = "loopback"  # an allow-list entry: pages served from this machine (any port)
ANY_ORIGIN = "*"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # never change anything here
JSON_TYPE = "application/json"
TOKEN_HEADER = "X-Raftmq-Token"  # the console's anti-forgery token, on each of its writes
TOKEN_LIFETIME_S = 12 * 3600  # a console open longer asks for a new one (on the 403 that says so)
CROSS_SITES = frozenset({"cross-site", "same-site"})  # another port of this machine is same-site
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request not served: the HTTP status and why (the answer's text and the log's)."""

    status: int
    reason: str


# -- origins ---------------------------------------------------------------------------------------


def origin_allowed(origin: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a request with this `Origin` header may be served by a page of that origin. No
    header: not a browser's request (a browser sends one on every upgrade and every write),
    allowed. `allowed` holds exact origins (`https://app.example`), `*` (any), or `loopback`
    (an origin whose host is localhost or a loopback address)."""
    if origin is None:
        return True
    return listed(origin, allowed)


def listed(origin: str, allowed: tuple[str, ...]) -> bool:
    """Whether `origin` (a header's value) is one `allowed` names."""
    origin = origin.strip()
    for entry in allowed:
        if entry == ANY_ORIGIN or entry == origin:
            return True
        if entry == LOOPBACK_ORIGINS and is_loopback_name(urlsplit(origin).hostname):
            return True
    return False


def same_origin(origin: str, scheme: str, host: str | None) -> bool:
    """Whether `origin` is the origin of the page this request's `host` serves over `scheme`
    ("http" or "https"): the console's own origin."""
    if host is None:
        return False
    try:
        theirs = urlsplit(origin.strip())
        ours = urlsplit(f"{scheme}://{host.strip()}")
        their_port = theirs.port or DEFAULT_PORTS.get(theirs.scheme)
        our_port = ours.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is not a number
        return False
    return (theirs.scheme == scheme and theirs.hostname is not None
            and theirs.hostname == ours.hostname and their_port == our_port)


# -- host names ------------------------------------------------------------------------------------


def is_loopback_name(name: str | None) -> bool:
    """localhost, a name under .localhost, or a loopback address (127.0.0.0/8, ::1)."""
    if not name:
        return False
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str | None:
    """The name or address of a `Host` header's value ("name:port", "[::1]:port", "name"),
    lower case, without a trailing dot; None when it is not one."""
    value = header.strip()
    if not value or any(c.isspace() or c in "/@?#\\" for c in value):
        return None
    try:
        parts = urlsplit(f"http://{value}")
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        return None
    name = parts.hostname
    if not name:
        return None
    return name.rstrip(".")


def _configured_name(value: str) -> str | None:
    """The host of a configured name, address or "host:port" ("https://" and the like dropped)."""
    value = value.strip().lower().split("://", 1)[-1].rstrip(".")
    if _address(value) is not None:  # an address alone, "::1" and "[::1]" too
        return value.strip("[]")
    return host_of(value)


def local_address(sockname: object) -> str | None:
    """The address a connection came in on, from its socket's name (a transport's "sockname")."""
    return str(sockname[0]) if isinstance(sockname, tuple) and sockname else None


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `name` is, if it is one (an IPv4 address mapped into IPv6 as itself: what a
    dual-stack listener sees)."""
    try:
        address = ipaddress.ip_address(name.strip("[]").partition("%")[0])
    except ValueError:
        return None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address


@dataclass(frozen=True, slots=True)
class HostNames:
    """The names a port answers to: `names` (its configured hosts and `host_names`, lower
    case), loopback names, and the address a connection came in on."""

    names: frozenset[str]

    @classmethod
    def of(cls, *names: str | None) -> HostNames:
        """From configured names, addresses or "host:port" addresses (a scheme before them,
        None and wildcards skipped)."""
        kept: set[str] = set()
        for value in names:
            name = _configured_name(value) if value else None
            if name and name not in ("0.0.0.0", "::"):
                kept.add(name)
        return cls(frozenset(kept))

    def with_names(self, *names: str | None) -> HostNames:
        """These names and `names` (in `of`'s forms)."""
        return HostNames(self.names | HostNames.of(*names).names)

    def allows(self, header: str | None, local_address: str | None = None) -> bool:
        """Whether a request with this `Host` header is for this port. No header (HTTP/1.0, a
        bare script) is not a browser's: allowed. `local_address`: the address the connection
        came in on (an IP literal naming it cannot be a rebound name)."""
        if header is None:
            return True
        name = host_of(header)
        if name is None:
            return False
        if name.strip("[]") in self.names or is_loopback_name(name):
            return True
        address = _address(name)
        if address is not None and local_address is not None:
            return address == _address(local_address)
        return False


# -- the admin port's rule -------------------------------------------------------------------------


def media_type(content_type: str | None) -> str:
    """`application/json` of `application/json; charset=utf-8`, lower case ("" for none)."""
    return (content_type or "").partition(";")[0].strip().lower()


def is_browser(headers: dict[str, str]) -> bool:
    """Whether a browser sent the request: it carries `Origin` or fetch metadata (a browser
    sends `Origin` on every write; a script sends neither unless it means to)."""
    return "origin" in headers or "sec-fetch-site" in headers


def check_request(method: str, headers: dict[str, str], *, scheme: str, hosts: HostNames,
                  origins: tuple[str, ...], local_address: str | None = None,
                  changes: bool = False) -> Refusal | None:
    """None when the admin port may serve this request, else why not. `headers`: lower-case
    names. `scheme`: "http" or "https" (how the port was reached). `origins`: the
    `admin_origins` setting. `changes`: the request would change something (a POST to the
    API or to a member's endpoint): it must be JSON, and a browser's must be same-origin or
    listed. The anti-forgery token is checked apart (`TokenMint.valid`), where the login is
    known."""
    host = headers.get("host")
    if not hosts.allows(host, local_address):
        return Refusal(421, f"this port is not known by the name {host!r}: a page of another site "
                            "(DNS rebinding) or a name to add to host_names")
    origin = headers.get("origin")
    own = origin is not None and same_origin(origin, scheme, host)
    granted = origin is not None and not own and listed(origin, origins)
    if origin is not None and not own and not granted:
        return Refusal(403, f"origin {origin.strip()!r} may not use this port (admin_origins)")
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site in CROSS_SITES and not granted:
        navigation = method in ("GET", "HEAD") and headers.get("sec-fetch-mode", "").strip().lower() == "navigate"
        if changes or not navigation:
            return Refusal(403, f"a {site} request from a page of another origin (Sec-Fetch-Site: {site})")
    if changes and method not in SAFE_METHODS and media_type(headers.get("content-type")) != JSON_TYPE:
        return Refusal(415, f"a change is sent as Content-Type: {JSON_TYPE}, "
                            f"not {headers.get('content-type', 'none')!r}")
    return None


def cors_headers(headers: dict[str, str], scheme: str, origins: tuple[str, ...]) -> dict[str, str]:
    """What grants a listed page of another origin the answer: CORS headers for a request
    whose `Origin` is in `origins` (and is not this port's own); {} otherwise."""
    origin = headers.get("origin")
    if origin is None or same_origin(origin, scheme, headers.get("host")) or not listed(origin, origins):
        return {}
    return {"Access-Control-Allow-Origin": origin.strip(), "Access-Control-Allow-Credentials": "true",
            "Vary": "Origin"}


PREFLIGHT_GRANT = {
    "Access-Control-Allow-Methods": "GET, POST",
    "Access-Control-Allow-Headers": f"Authorization, Content-Type, {TOKEN_HEADER}",
    "Access-Control-Max-Age": "600",
}


# -- the anti-forgery token ------------------------------------------------------------------------


class TokenMint:
    """The console's anti-forgery tokens: `issue(login)` when its page asks
    (`GET /api/session`), `valid(token, login)` on each browser write. A token is a random
    session id, its expiry and an HMAC of both and the login under this process's key: a
    page of another origin can neither read one nor make one, and one user's token is worth
    nothing with another's login. A restart makes new keys: the console asks again."""

    def __init__(self, key: bytes | None = None, clock: Callable[[], float] = time.time) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self._clock = clock

    def _now(self) -> int:
        return int(self._clock())

    def _mac(self, session: str, expiry: int, login: str) -> str:
        message = f"{session}.{expiry}.{login}".encode()
        return base64.urlsafe_b64encode(hmac.new(self._key, message, hashlib.sha256).digest()).decode().rstrip("=")

    def issue(self, login: str | None) -> str:
        session = secrets.token_urlsafe(16)
        expiry = self._now() + TOKEN_LIFETIME_S
        return f"{session}.{expiry}.{self._mac(session, expiry, login or '')}"

    def valid(self, token: str | None, login: str | None) -> bool:
        if not token or not token.isascii():  # a header's latin-1 bytes: never one we issued
            return False
        session, _, rest = token.strip().partition(".")
        expiry_text, _, mac = rest.partition(".")
        if not session or not expiry_text.isdigit() or not mac or len(expiry_text) > 12:
            return False
        expiry = int(expiry_text)
        if expiry < self._now():
            return False
        return hmac.compare_digest(mac.encode(), self._mac(session, expiry, login or "").encode())
