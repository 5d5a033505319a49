"""A group member's admin port: a deliberately small HTTP/1.1 server on asyncio.

- `GET /status`: `Node.status()` as JSON (role, term, commit / applied index, counters,
  rates) plus `group` and `health`; `GET /status?verify=1` also reads back every body the
  core references (`Replica.verify_bodies`).
- `GET /metrics`: the same numbers for Prometheus (`raftmq.server.admin.metrics`), read at scrape time.
- `GET /health`: `{"status": "ok" | "unavailable" | "failed", ...}`, HTTP 200 when ok (the
  node leads, or follows a leader it knows, and has not failed), 503 otherwise: what a load
  balancer asks.
- `GET /ready`: 200 when the node is healthy, a member of its group's configuration and caught
  up (applied within `READY_MAX_LAG` entries of the commit index it knows), 503 with the reason
  otherwise: an orchestrator's readiness probe.
- `GET /live`: 200 while the node serves and has not failed (whatever its group's state: a
  node catching up, or in a group without quorum, is alive), 503 once it failed: a liveness probe.
- With `[tls]` the port speaks HTTPS only (the client port's certificate). With logins
  (`[[user]]`), everything but `/health`, `/ready`, `/live` and the members' signed requests
  needs one (HTTP Basic, a STOMP login): `/status`, `/metrics`, the API and the console.
- `POST /bodies`: what members use to fetch message bodies from each other (a member that
  installed a snapshot referencing bodies it never received). The request body is a msgpack
  list of Raft indexes; the answer is msgpack `[considered_through, [[index, [[term, kind,
  payload], ...]], ...]]`: every record of each index this member holds, ascending, up to about
  `MAX_ANSWER_BYTES`; indexes above `considered_through` were not looked at (ask again).
  With a group password the request carries `X-Raftmq-Signature`, the hex HMAC-SHA256 of its
  body under the password.
- `POST /membership`: one membership change of the group, on its leader (raftmq.replication.
  membership_change): JSON `{"op": "add" | "rem", "node": "<raft host:port>"}`, always signed
  like `/bodies` (a member without the group secret takes none). 200 `{"members": [...]}`
  once committed; 409 `{"leader": ...}` from a member that does not lead (a leader asked to
  remove itself hands over first and answers so); 400 for a change that makes no sense; 503
  when the outcome is unknown (read the members before asking again).
- `POST /leadership`: the member hands leadership to another one if it leads (`raftmq
  hand-over`, before a stop), signed like `/membership`: 200 `{"handed_over": bool, "leader": ...}`.
- `/api/...` and `/` (the web console): the management API (raftmq.server.admin.management,
  docs/management.md), with STOMP's logins and ACLs.
- A STOMP client (its first line CONNECT or STOMP) gets a STOMP ERROR saying this is the admin
  port, and the connection closes: it would otherwise wait for an answer to an HTTP request
  it never made.
- Every request passes `raftmq.web_guard.check_request` first: a `Host` the port is not known
  by gets 421 (DNS rebinding), a foreign `Origin` or a cross-site fetch 403, a change that is
  not `Content-Type: application/json` 415, each logged (`admin.refused`); `OPTIONS` grants
  CORS only to an origin in `admin_origins`. Every answer forbids framing (clickjacking) and
  sniffing; the API's are never cached.

`fetch_bodies` is the client side of `/bodies`; it blocks (it runs while a snapshot is
restored) and every wait in it is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import http.client
import json
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack
import structlog
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from raftmq.client.transport import PORT_HEADER
from raftmq.errors import CommitFailed, ConfigError, NotLeader
from raftmq.replication.membership import Change, decode_change
from raftmq.server.admin.metrics import HEALTH_OK, exposition, health, metrics_registry, readiness
from raftmq.server.replica.bodies import BodyStore, IndexRecords
from raftmq.tls import pinned
from raftmq.web_guard import PREFLIGHT_GRANT, SAFE_METHODS, HostNames, check_request, cors_headers, local_address

log = structlog.get_logger("raftmq.server.admin")

MAX_REQUEST_HEAD = 16 * 1024
MAX_REQUEST_BODY = 4 * 2**20
MAX_ANSWER_BYTES = 32 * 2**20
INDEXES_PER_REQUEST = 4096
DISCARD_TIMEOUT = 2.0  # a refused request's body, read to be dropped (closing on it unread resets the answer)
READ_TIMEOUT = 30.0  # a request, read and answered (a management change waits for its commit)
SIGNATURE_HEADER = "X-Raftmq-Signature"
HANDSHAKE_TIMEOUT = 10.0  # a TLS handshake on the admin port
STOMP_COMMANDS = (b"CONNECT", b"STOMP")  # a STOMP client's first line
# Headers a request carries once (RFC 9110): a second one is a bad request, not a choice.
SINGLE_HEADERS = frozenset({"host", "content-length", "origin", "content-type", "authorization"})
# A POST that reads (a member's body fetch, msgpack and signed): every other one changes something.
READING_POSTS = frozenset({"/bodies"})
# On every answer: no page may frame the console (clickjacking) or sniff a type into HTML.
ALWAYS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'",
          "X-Content-Type-Options": "nosniff"}
Answer = tuple[int, str, bytes]


class ApiHandler(Protocol):
    async def answer(self, method: str, path: str, query: str, headers: dict[str, str],
                     body: bytes) -> tuple[int, str, bytes] | None: ...


def sign(password: str, body: bytes) -> str:
    return hmac.new(password.encode(), body, hashlib.sha256).hexdigest()


def _signed_by(password: str | None, body: bytes, signature: str | None) -> bool:
    """Whether `signature` signs `body` with the group secret `password` (never, without a secret)."""
    return password is not None and signature is not None and hmac.compare_digest(signature, sign(password, body))


class AdminServer:
    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        bodies: BodyStore | None,
        verify: Callable[[], dict[str, int]] | None,
        host: str,
        port: int,
        password: str | None = None,
        *,
        group: str | None = None,
        change_members: Callable[[Change], Awaitable[tuple[str, ...]]] | None = None,
        api: ApiHandler | None = None,
        ssl: ssl_module.SSLContext | None = None,
        authenticate: Callable[[dict[str, str]], Awaitable[bool]] | None = None,
        hand_over: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        hosts: HostNames | None = None,
        origins: tuple[str, ...] = (),
    ) -> None:
        # Who may ask (raftmq.web_guard): the names this port is known by (its address and
        # loopback's always), and the origins of pages besides the console's own (admin_origins).
        self._hosts = hosts if hosts is not None else HostNames.of(host)
        self._origins = origins
        self._ssl = ssl  # HTTPS only, when given
        self._authenticate = authenticate  # None: /status and /metrics are open (no logins configured)
        self._hand_over = hand_over
        self._status = status
        self._api = api  # the management API and the console (raftmq.server.admin.management)
        self._change_members = change_members
        self.group = group or ""  # a single node (no group) is labelled by its node name
        self._bodies = bodies
        self._verify = verify
        self.host = host
        self.port = port
        self._password = password
        self._server: asyncio.base_events.Server | None = None
        self._registry = metrics_registry(self.status)

    def status(self) -> dict[str, Any]:
        """What `/status` answers (without `verify`)."""
        status = self._status()
        status["group"] = self.group or status.get("node")
        verdict, reason = health(status)
        status["health"] = verdict
        if reason is not None:
            status["health_reason"] = reason
        return status

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True, ssl=self._ssl,
                                                  ssl_handshake_timeout=HANDSHAKE_TIMEOUT if self._ssl else None)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = local_address(writer.get_extra_info("sockname"))
        try:
            reply = await asyncio.wait_for(self._reply(reader, local, writer.get_extra_info("peername")), READ_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            reply = _http(400, "text/plain", b"bad request\n")
        except Exception:
            log.exception("admin.internal_error")
            reply = _http(500, "text/plain", b"internal error\n")
        try:
            writer.write(reply)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _reply(self, reader: asyncio.StreamReader, local: str | None = None, peer: Any = None) -> bytes:
        """The answer's bytes: an HTTP response, or a STOMP ERROR to a STOMP client (it would
        otherwise wait for an HTTP head that never comes)."""
        first = await reader.readuntil(b"\n")
        if first.rstrip(b"\r\n") in STOMP_COMMANDS:
            log.info("admin.stomp_client")
            return stomp_error(f"{'group ' + self.group if self.group else 'a single node'}: /status, /metrics, /api/ "
                               "and the console here; STOMP clients connect to a member's client port")
        request = await _read_head(first, reader)
        if not isinstance(request, _Request):
            return _http(*request)
        scheme = "https" if self._ssl is not None else "http"
        headers = request.headers
        changes = request.method not in SAFE_METHODS and request.path not in READING_POSTS
        refusal = check_request(request.method, headers, scheme=scheme, hosts=self._hosts, origins=self._origins,
                                local_address=local, changes=changes)
        if refusal is not None:  # decided on the head: the body is read only to be dropped
            with contextlib.suppress(TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                await asyncio.wait_for(reader.readexactly(request.length), DISCARD_TIMEOUT)
            log.warning("admin.refused", status=refusal.status, reason=refusal.reason, method=request.method[:16],
                        path=request.path[:200], host=headers.get("host"), origin=headers.get("origin"),
                        fetch_site=headers.get("sec-fetch-site"), peer=peer)
            if request.path.startswith("/api/"):  # the API answers JSON, its refusals too
                return _http(*_json(refusal.status, {"error": refusal.reason}))
            return _http(refusal.status, "text/plain", refusal.reason.encode("utf-8", "replace") + b"\n")
        request.body = await reader.readexactly(request.length) if request.length else b""
        extra = cors_headers(headers, scheme, self._origins)
        if request.method == "OPTIONS":  # a preflight: granted only to a listed origin (above)
            preflight = {**extra, **PREFLIGHT_GRANT} if extra else {"Allow": "GET, POST, OPTIONS"}
            return _http(204, "text/plain", b"", preflight)
        code, content_type, body = await self._answer(request)
        if request.path.startswith("/api/"):
            extra["Cache-Control"] = "no-store"
        return _http(code, content_type, body, extra)

    async def _answer(self, request: _Request) -> Answer:
        """The answer to a request the guard let through."""
        method, path, query, headers, body = request.method, request.path, request.query, request.headers, request.body
        if method == "GET" and path in _PROBES:
            return _PROBES[path](self)
        if method == "POST" and path in ("/bodies", "/membership", "/leadership"):
            return await self._signed(path, body, headers.get(SIGNATURE_HEADER.lower()))
        if self._authenticate is not None and path in ("/status", "/metrics") and not await self._authenticate(headers):
            return 401, "text/plain", b"login required\n"
        if method == "GET" and path == "/status":
            status = self.status()
            if self._verify is not None and "verify=1" in query.split("&"):
                status["verify"] = self._verify()
            return 200, "application/json", json.dumps(status, default=str).encode() + b"\n"
        if method == "GET" and path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, exposition(self._registry)
        if self._api is not None:
            answer = await self._api.answer(method, path, query, headers, body)
            if answer is not None:
                return answer
        return 404, "text/plain", b"not found\n"

    async def _signed(self, path: str, body: bytes, signature: str | None) -> tuple[int, str, bytes]:
        if path == "/bodies":
            return self._bodies_answer(body, signature)
        if path == "/membership":
            return await self._membership_answer(body, signature)
        return await self._leadership_answer(body, signature)

    async def _leadership_answer(self, body: bytes, signature: str | None) -> tuple[int, str, bytes]:
        if not _signed_by(self._password, body, signature):
            return 403, "text/plain", b"bad or missing signature\n"
        if self._hand_over is None:
            return 404, "text/plain", b"no Raft group here\n"
        return _json(200, await self._hand_over())

    def _ready_answer(self) -> tuple[int, str, bytes]:
        status = self.status()
        verdict, reason = readiness(status)
        return _json(200 if verdict else 503, {"ready": verdict, "reason": reason, "node": status.get("node"),
                                               "group": status["group"], "role": status.get("role")})

    def _live_answer(self) -> tuple[int, str, bytes]:
        failure = self._status().get("failure")
        return _json(503 if failure else 200, {"live": not failure, "failure": failure})

    def _health_answer(self) -> tuple[int, str, bytes]:
        status = self.status()
        answer = {
            "status": status["health"],
            "reason": status.get("health_reason"),
            "group": status["group"],
            "node": status.get("node"),
            "role": status.get("role"),
            "leader": status.get("leader"),
            "term": status.get("term"),
            "failure": status.get("failure"),
        }
        code = 200 if status["health"] == HEALTH_OK else 503
        return code, "application/json", json.dumps(answer).encode() + b"\n"

    async def _membership_answer(self, body: bytes, signature: str | None) -> tuple[int, str, bytes]:
        """Commit one membership change (the leader only). Only a holder of the group secret
        may ask: without one (a single node) nobody may."""
        if not _signed_by(self._password, body, signature):
            return 403, "text/plain", b"bad or missing signature\n"
        if self._change_members is None:
            return 404, "text/plain", b"no membership changes here\n"
        try:
            request = json.loads(body)
            change = Change(request["op"], request["node"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return 400, "text/plain", b'expected JSON {"op": "add" | "rem", "node": "host:port"}\n'
        if decode_change(change.encode()) is None:
            return 400, "text/plain", b"op must be add or rem, node a Raft address host:port\n"
        try:
            members = await self._change_members(change)
        except NotLeader as exc:
            return _json(409, {"error": "not the leader", "leader": exc.leader})
        except ConfigError as exc:
            return _json(400, {"error": str(exc)})
        except CommitFailed as exc:
            return _json(503, {"error": str(exc)})
        return _json(200, {"members": list(members)})

    def _bodies_answer(self, body: bytes, signature: str | None) -> tuple[int, str, bytes]:
        if self._password is not None and not _signed_by(self._password, body, signature):
            return 403, "text/plain", b"bad or missing signature\n"
        if self._bodies is None:
            return 404, "text/plain", b"no body journal\n"
        wanted = msgpack.unpackb(body)
        if not isinstance(wanted, list) or not all(isinstance(i, int) for i in wanted):
            return 400, "text/plain", b"expected a msgpack list of raft indexes\n"
        considered, found = self._bodies.records_at(wanted, MAX_ANSWER_BYTES)
        rows = [[index, [[term, kind, payload] for term, kind, payload in records]] for index, records in found]
        return 200, "application/x-msgpack", msgpack.packb([considered, rows], use_bin_type=True)


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    length: int  # of the body, which is read once the head is let through
    body: bytes = b""


async def _read_head(head: bytes, reader: asyncio.StreamReader) -> _Request | Answer:
    """The request whose first line is `head`, its head read; or the 4xx answer to one that
    cannot be (too large, not HTTP)."""
    while not head.endswith((b"\r\n\r\n", b"\n\n", b"\n\r\n")) and len(head) <= MAX_REQUEST_HEAD:
        head += await reader.readuntil(b"\n")  # a bare LF ends a line too (RFC 9112, 2.2)
    if len(head) > MAX_REQUEST_HEAD:
        return 431, "text/plain", b"request head too large\n"
    lines = [line.removesuffix("\r") for line in head.decode("latin-1").split("\n")]
    method, _, rest = lines[0].partition(" ")
    target, _, version = rest.partition(" ")
    method_ok = method.isascii() and method.isalpha()
    if not method_ok or not target.startswith(("/", "*")) or not version.startswith("HTTP/1."):
        return 400, "text/plain", b"not an HTTP/1.x request line\n"
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            name = name.strip().lower()
            if name in SINGLE_HEADERS and name in headers:  # which one counts is a guess: none does
                return 400, "text/plain", f"{name} sent twice\n".encode()
            headers[name] = value.strip()
    length_text = headers.get("content-length", "0")
    if not (length_text.isascii() and length_text.isdigit()):
        return 400, "text/plain", b"Content-Length is not a number\n"
    length = int(length_text)
    if length > MAX_REQUEST_BODY:
        return 413, "text/plain", b"request body too large\n"
    return _Request(method, path, query, headers, length)


def _json(code: int, answer: dict[str, Any]) -> Answer:
    return code, "application/json", json.dumps(answer).encode() + b"\n"


def _http(status: int, content_type: str, body: bytes, extra: dict[str, str] | None = None) -> bytes:
    fields = {**ALWAYS, **(extra or {})}
    if status == 401:
        fields["WWW-Authenticate"] = 'Basic realm="raftmq"'
    lines = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    head = (f"HTTP/1.1 {status} {http.client.responses.get(status, '')}\r\n{lines}"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1", "replace") + body


def stomp_error(text: str) -> bytes:
    """The STOMP ERROR frame a STOMP client gets here, `text` its body (raftmq's client reads
    `raftmq-port` and fails with NotStompPort at once: raftmq.client.transport)."""
    body = text.encode() + b"\n"
    head = (f"ERROR\ncontent-type:text/plain\ncontent-length:{len(body)}\n"
            "message:this is a raftmq admin (HTTP) port, not a STOMP port\n")
    return f"{head}{PORT_HEADER}:admin\n\n".encode() + body + b"\0"


# The probes: open without a login (they say nothing but the node's state).
_PROBES: dict[str, Callable[[AdminServer], tuple[int, str, bytes]]] = {
    "/health": AdminServer._health_answer,
    "/ready": AdminServer._ready_answer,
    "/live": AdminServer._live_answer,
}


MemberTls = tuple[ssl_module.SSLContext, bytes] | None  # raftmq.tls.member_client_tls, or plain HTTP


def post_membership(host: str, port: int, change: Change, password: str, timeout: float = 15.0,
                    tls: MemberTls = None) -> tuple[int, dict[str, Any]]:
    """Ask a member's admin port for a membership change: (HTTP status, JSON answer)."""
    body = json.dumps({"op": change.op, "node": change.address}).encode()
    status, data = _post(host, port, "/membership", body, "application/json", password, timeout, tls)
    try:
        answer = json.loads(data)
    except ValueError:
        answer = {"error": data.decode("utf-8", "replace").strip()}
    return status, answer if isinstance(answer, dict) else {"error": str(answer)}


def post_hand_over(host: str, port: int, password: str, timeout: float = 15.0,
                   tls: MemberTls = None) -> tuple[int, dict[str, Any]]:
    """Ask a member's admin port to hand its leadership over: (HTTP status, JSON answer)."""
    status, data = _post(host, port, "/leadership", b"{}", "application/json", password, timeout, tls)
    try:
        answer = json.loads(data)
    except ValueError:
        answer = {"error": data.decode("utf-8", "replace").strip()}
    return status, answer if isinstance(answer, dict) else {"error": str(answer)}


def fetch_bodies(
    peers: Sequence[tuple[str, int]],
    indexes: Sequence[int],
    password: str | None = None,
    *,
    timeout: float = 2.0,
    budget: float = 5.0,
    max_bytes: int | None = None,
    tls: MemberTls = None,
) -> list[IndexRecords]:
    """Records of `indexes` from the first peers that have them (admin addresses, in order).
    Blocking; gives up after `budget` seconds, or once it holds `max_bytes` of payload (the
    caller stores them and asks for the rest: a member catching up with gigabytes must not
    hold them all in memory). Returns what was found."""
    deadline = time.monotonic() + budget
    remaining = sorted(set(indexes))
    fetched: list[IndexRecords] = []
    size = 0
    for host, port in peers:
        lacking: list[int] = []
        while remaining and time.monotonic() < deadline and (max_bytes is None or size < max_bytes):
            chunk = remaining[:INDEXES_PER_REQUEST]
            try:
                wait = min(timeout, max(0.1, deadline - time.monotonic()))
                considered, rows = _post_bodies(host, port, chunk, password, wait, tls)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                log.warning("admin.fetch_failed", peer=f"{host}:{port}", error=str(exc))
                break
            got = {index for index, _records in rows}
            fetched.extend(rows)
            size += sum(len(payload) for _index, records in rows for _term, _kind, payload in records)
            lacking.extend(i for i in chunk if i <= considered and i not in got)
            remaining = [i for i in remaining if i > considered]
        remaining = sorted(set(remaining) | set(lacking))
        if not remaining or time.monotonic() >= deadline or (max_bytes is not None and size >= max_bytes):
            break
    return fetched


def _post_bodies(host: str, port: int, indexes: list[int], password: str | None, timeout: float,
                 tls: MemberTls) -> tuple[int, list[IndexRecords]]:
    status, data = _post(host, port, "/bodies", msgpack.packb(indexes), "application/x-msgpack", password, timeout, tls)
    if status != 200:
        raise ValueError(f"HTTP {status}: {data[:200]!r}")
    considered, rows = msgpack.unpackb(data, raw=False)
    return int(considered), [
        (int(index), [(int(t), int(k), bytes(p)) for t, k, p in records]) for index, records in rows
    ]


def _post(host: str, port: int, path: str, body: bytes, content_type: str, password: str | None, timeout: float,
          tls: MemberTls = None) -> tuple[int, bytes]:
    """One POST to a member's admin port, signed with the group secret when there is one; over
    TLS to a port presenting the group's certificate when `tls` is given."""
    headers = {"Content-Type": content_type}
    if password is not None:
        headers[SIGNATURE_HEADER] = sign(password, body)
    connection = member_connection(host, port, timeout, tls)
    try:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def member_connection(host: str, port: int, timeout: float, tls: MemberTls) -> http.client.HTTPConnection:
    """An HTTP connection to another member's admin port; with `tls`, connected already and
    checked to present the group's certificate (a pin: every member has it)."""
    if tls is None:
        return http.client.HTTPConnection(host, port, timeout=timeout)
    connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls[0])
    try:
        connection.connect()
        peer = connection.sock.getpeercert(binary_form=True)
        if not pinned(peer, tls[1]):
            raise ssl_module.SSLError(f"{host}:{port} does not present the group's certificate ([tls] cert_file)")
    except BaseException:
        connection.close()
        raise
    return connection
