"""A fuzz of a real node's admin port (raftmq/server/admin/http.py, docs/operations.md "What the
admin port refuses"): request lines and headers (methods, content types, origins, fetch
metadata, hosts, tokens, oversized and malformed heads and bodies) sent over raw sockets, each
request built to carry at least one defect a forged or rebound request from a web page has, or
that no HTTP client sends. Every answer must be a well-formed HTTP/1.1 answer, never 5xx; every
request that asks for a change must get a 4xx, the one the oracle below expects; nothing may
change (queue depths, destinations, the open STOMP session); the node logs no traceback. A
positive control shows the same requests, repaired, do change state.

Two nodes: one without logins, one with an operator login the fuzzer sends on its requests (a
browser sends the operator's cached login with a forged request too) and `loopback` among
`admin_origins`. The generator is seeded (RAFTMQ_FUZZ_SEED overrides the seed): a failure
names the seed, the request's defects and its bytes.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import msgpack
import pytest

from raftmq import processes
from raftmq.passwords import hash_password
from tests.helpers.stomp_raw import connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
T = TypeVar("T")

READY = "raftmq node listening on "
READY_TIMEOUT = 20.0
IO_TIMEOUT = 5.0  # every socket: a request the port does not answer in time is a hang
SEED = int(os.environ.get("RAFTMQ_FUZZ_SEED", "20260512"))
REQUESTS = 600  # generated requests per node (besides the fixed attacks and the Host sweep)
PASS = "ops-fuzz-pass-7"

VICTIM, KEEP, CREATED, CONTROL = "/queue/victim", "/queue/keep", "/queue/created-by-fuzz", "/queue/control"
MAX_HEAD = 16 * 1024  # what the port reads of a request head
MAX_BODY = 4 * 2**20
SAFE = ("GET", "HEAD", "OPTIONS")
API_CHANGES = ("/api/destinations/purge", "/api/destinations/delete", "/api/destinations/create",
               "/api/messages/retry", "/api/messages/move", "/api/connections/close")
SIGNED = ("/membership", "/leadership")  # a group secret's signature, which a single node has none of
CHANGE_PATHS = (*API_CHANGES, *SIGNED, "/bodies")
PROBES = ("/health", "/ready", "/live")
READ_TARGETS = ("/status", "/status?verify=1", "/metrics", *PROBES, "/api/overview", "/api/session",
                "/api/destinations", "/api/connections", "/api/consumers",
                f"/api/messages?destination={VICTIM}&limit=5", "/", "/index.html", "/console.js", "/nowhere",
                "/api/nowhere", "*")
FOURXX = frozenset(range(400, 500))
READ_ANSWERS = frozenset(range(200, 500))  # a read the guard lets through: whatever the path answers, never 5xx


# -- the node ------------------------------------------------------------------------------------


@dataclass
class Node:
    client: int
    admin: int
    stderr: Path
    stdout: Path
    proc: Any
    logins: bool  # [[user]] configured: the fuzzer sends the operator's login
    loopback_listed: bool  # admin_origins holds "loopback"
    session: str = ""  # the open STOMP connection's session id

    @property
    def authorization(self) -> str | None:
        return basic("ops", PASS) if self.logins else None


def basic(login: str, passcode: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{passcode}".encode()).decode()


@pytest.fixture(params=["open", "logins"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    """A single in-memory node with an admin port, started as a process and killed by pid."""
    logins = request.param == "logins"
    client, admin = processes.free_ports(2)
    origins = '["loopback", "https://ops.example"]' if logins else '["https://ops.example"]'
    text = (f'[node]\nname = "fuzz"\nport = {client}\nadmin = "127.0.0.1:{admin}"\nin_memory = true\n'
            f'host_names = ["broker.example"]\nadmin_origins = {origins}\n\n')
    if logins:
        text += f'[[user]]\nname = "ops"\npassword_hash = "{hash_password(PASS)}"\ngroups = ["ops"]\n'
        text += '[[acl]]\nqueue = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
        text += '[[acl]]\ntopic = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    config = tmp_path / "node.toml"
    config.write_text(text)
    stdout, stderr = tmp_path / "node.out", tmp_path / "node.err"
    proc = processes.spawn([sys.executable, "-m", "raftmq", "node", "--config", str(config)], stdout, stderr,
                           cwd=tmp_path)
    try:
        processes.wait_for_line(proc, stdout, f"{READY}127.0.0.1:{client}", READY_TIMEOUT, errors=stderr)
        yield Node(client, admin, stderr, stdout, proc, logins, loopback_listed=logins)
    finally:
        processes.kill(proc)


# -- raw HTTP ------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def exchange(port: int, data: bytes) -> tuple[bytes, bool]:
    """Send `data` on a new connection, half-close, read to the end: (what came back, whether
    the connection was reset). A port that answers nothing within IO_TIMEOUT raises TimeoutError."""
    chunks: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the port answered and closed before it read everything (an oversized head)
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return b"".join(chunks), True
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)


ANSWER_HEAD = re.compile(rb"HTTP/1\.1 ([1-5]\d\d) [^\r\n]*\r\n((?:[^\r\n]+\r\n)*)\r\n", re.DOTALL)


def parse(raw: bytes) -> Answer:
    """A well-formed HTTP/1.1 answer, or AssertionError saying how it is not."""
    match = ANSWER_HEAD.match(raw)
    assert match is not None, f"not an HTTP/1.1 answer: {raw[:300]!r}"
    headers = {}
    for line in match.group(2).decode("latin-1").split("\r\n"):
        if line:
            name, sep, value = line.partition(":")
            assert sep, f"answer header without a colon: {line!r}"
            headers[name.strip().lower()] = value.strip()
    body = raw[match.end():]
    assert headers.get("content-length") == str(len(body)), f"Content-Length is not the body's: {raw[:300]!r}"
    return Answer(int(match.group(1)), headers, body)


def clean(node: Node, method: str, path: str, payload: Any = None, headers: dict[str, str] | None = None) -> Answer:
    """A well-formed request as a script sends it: Host 127.0.0.1:port, no Origin, JSON."""
    body = json.dumps(payload).encode() if payload is not None else b""
    fields = {"Host": f"127.0.0.1:{node.admin}", "Connection": "close"}
    if node.authorization:
        fields["Authorization"] = node.authorization
    if payload is not None:
        fields |= {"Content-Type": "application/json", "Content-Length": str(len(body))}
    fields |= headers or {}
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    raw, reset = exchange(node.admin, head.encode("latin-1") + body)
    assert not reset, f"{method} {path}: connection reset"
    return parse(raw)


def state(node: Node) -> tuple[dict[str, int], set[str]]:
    """(destination -> depth, the sessions listed), read with clean requests."""
    answer = clean(node, "GET", "/api/destinations")
    assert answer.status == 200, answer
    depths = {row["destination"]: row["depth"] for row in json.loads(answer.body)["destinations"]}
    answer = clean(node, "GET", "/api/connections")
    assert answer.status == 200, answer
    return depths, {row["session"] for row in json.loads(answer.body)["connections"]}


# -- what the fuzzer sends -------------------------------------------------------------------------


@dataclass
class Spec:
    """One request. `line`: a malformed first line sent instead of method, target and version.
    `host_ok`: the class of the last Host value (None: no Host header). `origin_class`: own,
    listed, loopback (listed where admin_origins holds "loopback"), foreign or broken."""

    method: str
    target: str
    version: str = "HTTP/1.1"
    line: bytes | None = None
    hosts: tuple[str, ...] = ()
    host_ok: bool | None = None
    origin: str | None = None
    origin_class: str | None = None
    site: str | None = None
    mode: str | None = None
    content_type: str | None = None
    json_type: bool = False
    token: str | None = None
    authorization: str | None = None
    auth_ok: bool = True
    body: bytes = b""
    length: str = "exact"  # exact, absent, or a defect: negative, text, superscript, too_big, truncated
    pad: str = "none"  # none, under (a head of exactly MAX_HEAD bytes), over (just past it), huge
    lf: bool = False  # lines ended by a bare LF (read as CRLF, RFC 9112 2.2)
    noise: tuple[bytes, ...] = ()
    shuffle: int = 0  # orders the header lines and picks their names' case
    notes: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def writes(self) -> bool:
        """Asks for something besides a read: any method but GET, HEAD, OPTIONS, or a body fetch."""
        return self.method not in SAFE or self.path == "/bodies"

    @property
    def browser(self) -> bool:
        return self.origin is not None or self.site is not None


CROSS_SITE_VALUES = ("cross-site", "same-site", "CROSS-SITE", "Same-Site")
FRAMING = {"negative": 400, "text": 400, "superscript": 400, "too_big": 413, "truncated": 400}


def verdict(spec: Spec, node: Node) -> tuple[list[str], frozenset[int]]:
    """The oracle: the request's defects and the statuses acceptable for it. The port reads the
    request (framing: its head's size, its request line, its length), then asks whether a page of
    another site may send it (Host 421, Origin and fetch metadata 403, a change's type 415), then
    answers its route (login 401, the console's token 403); the first refusal is the answer."""
    framing: list[tuple[str, set[int]]] = []
    if spec.pad == "over":
        framing.append(("head past 16 KiB", {431}))
    if spec.pad == "huge":  # a line past the reader's limit: 400
        framing.append(("head far past 16 KiB", {431, 400}))
    if spec.hosts[1:]:  # which Host counts would be a guess: none does
        framing.append(("Host sent twice", {400}))
    if spec.line is not None or not (spec.method.isascii() and spec.method.isalpha()):
        framing.append(("not an HTTP/1.x request line", {400}))
    if spec.length in FRAMING and spec.length != "truncated":
        framing.append((f"Content-Length {spec.length}", {FRAMING[spec.length]}))
    changes = spec.method not in SAFE and spec.path != "/bodies"
    guard: list[tuple[str, set[int]]] = []
    if spec.host_ok is False:
        guard.append(("Host not this port's", {421}))
    granted = spec.origin_class == "listed" or (spec.origin_class == "loopback" and node.loopback_listed)
    if spec.origin_class in ("foreign", "broken") or (spec.origin_class == "loopback" and not granted):
        guard.append(("foreign Origin", {403, 400} if spec.origin_class == "broken" else {403}))
    if spec.site is not None and spec.site.strip().lower() in ("cross-site", "same-site") and not granted:
        navigation = spec.method in ("GET", "HEAD") and spec.mode == "navigate"
        if changes or not navigation:
            guard.append(("cross-site fetch", {403}))
    if changes and not spec.json_type:
        guard.append(("a change not sent as JSON", {415}))
    refusals = framing + guard
    if spec.length == "truncated":  # the body is read once the head is let through
        refusals.append(("Content-Length truncated", {FRAMING["truncated"]}))
    if refusals:
        return [name for name, _ in refusals], frozenset(refusals[0][1])
    path, method = spec.path, spec.method
    logged_in = spec.auth_ok
    if method == "POST" and path in API_CHANGES and spec.browser:  # never a valid token
        return ["a browser's change without the console's token"], frozenset({403} if logged_in else {401})
    if method == "OPTIONS":
        return [], frozenset({204})
    if method == "GET" and path in PROBES:
        return [], frozenset({200, 503})
    if method == "POST" and path in SIGNED:
        return [], frozenset({403})  # no group secret: nobody may
    if not changes:
        return [], READ_ANSWERS
    if not logged_in and (path.startswith("/api/") or path in ("/status", "/metrics")):
        return [], frozenset({401})
    if method == "POST" and path in API_CHANGES:
        return [], frozenset({200, 400})  # served: a change
    return [], frozenset({404})


def render(spec: Spec) -> bytes:
    """The request's bytes. What the port refuses before it reads a body is sent without one
    (bytes left unread would reset the connection and drop the answer)."""
    shuffle = random.Random(spec.shuffle)
    first = spec.line if spec.line is not None else f"{spec.method} {spec.target} {spec.version}".encode("latin-1")
    fields: list[tuple[str, str]] = [("Host", h) for h in spec.hosts]
    for name, value in (("Origin", spec.origin), ("Sec-Fetch-Site", spec.site), ("Sec-Fetch-Mode", spec.mode),
                        ("Content-Type", spec.content_type), ("X-Raftmq-Token", spec.token),
                        ("Authorization", spec.authorization)):
        if value is not None:
            fields.append((name, value))
    body = spec.body
    length = {"exact": str(len(body)), "negative": f"-{len(body) or 1}", "superscript": "\xb2",
              "too_big": shuffle.choice([str(MAX_BODY + 1), "99999999999999999999"]),
              "truncated": str(len(body) + 64),
              "text": shuffle.choice(["twelve", "1e3", "0x10", "+5", "5, 5", "", "12 34", "1_0"])}.get(spec.length)
    if length is not None:
        fields.append(("Content-Length", length))
    cases: list[Callable[[str], str]] = [str.title, str.lower, str.upper]
    case = shuffle.choice(cases)
    lines = [f"{case(name)}: {value}".encode("latin-1") for name, value in fields]
    if spec.hosts[1:]:  # duplicated Host headers stay in their order
        hosts, others = lines[:len(spec.hosts)], lines[len(spec.hosts):]
        others += list(spec.noise)
        shuffle.shuffle(others)
        lines = hosts + others
    else:
        lines += list(spec.noise)
        shuffle.shuffle(lines)
    size = len(first) + 2 + sum(len(line) + 2 for line in lines)
    if spec.pad in ("under", "over"):  # the head: exactly MAX_HEAD bytes, or MAX_HEAD + 2 (its end crosses)
        lines += padding(MAX_HEAD - 2 - size + (2 if spec.pad == "over" else 0))
    elif spec.pad == "huge":
        lines += [b"X-Pad: " + b"a" * 70_000] if shuffle.random() < 0.5 else padding(40_000)
    end = b"\n" if spec.lf else b"\r\n"
    head = first + end + b"".join(line + end for line in lines) + end
    if refused_unread(spec) or spec.length == "absent":
        return head
    if spec.length == "truncated":
        return head + body[: len(body) // 2]
    return head + body


def refused_unread(spec: Spec) -> bool:
    """Whether the port refuses the request before it reads its body (a request its guard
    refuses has its body read and dropped: the body is sent)."""
    framing = spec.line is not None or spec.pad in ("over", "huge")
    return framing or spec.length in ("negative", "text", "superscript", "too_big")


def padding(total: int) -> list[bytes]:
    """Header lines of `total` bytes, their line ends counted."""
    lines: list[bytes] = []
    while total > 0:
        size = min(1000, total)
        if 0 < total - size < 40:
            size = total - 40
        prefix = f"X-Pad-{len(lines):04d}: ".encode()
        lines.append(prefix + b"a" * (size - len(prefix) - 2))
        total -= size
    return lines


class Fuzzer:
    def __init__(self, node: Node, rng: random.Random) -> None:
        self.node = node
        self.rng = rng
        port = node.admin
        self.good_hosts = (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "localhost", f"LocalHost:{port}",
                           f"[::1]:{port}", "[::1]", f"127.0.0.5:{port}", f"app.localhost:{port}", "broker.example",
                           f"broker.example:{port}", f"BROKER.EXAMPLE:{port}", "localhost.")
        self.bad_hosts = ("evil.example", f"evil.example:{port}", f"127.0.0.1.nip.io:{port}",
                          f"localhost.evil.example:{port}", "broker.example.evil.example", "", " ",
                          f"127.0.0.1 :{port}", f"127.0.0.1:{port} evil.example", f"evil.example@127.0.0.1:{port}",
                          f"127.0.0.1:{port}/evil", "127.0.0.1:abc", "127.0.0.1:99999", f"0.0.0.0:{port}",
                          f"10.0.0.1:{port}", "[::1", "127.1", "2130706433", "127.0.0.1\x00.evil.example",
                          "xn--80ak6aa92e.com", f"[::]:{port}", "localhost\\evil", "localhost#x", "localhost?x")
        self.loopback_origins = (f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}", "http://localhost:3000",
                                 "http://[::1]:8080", "http://evil.localhost", f"http://127.0.0.2:{port}",
                                 f"http://127.0.0.1:{port}:{port}")
        self.foreign_origins = ("https://evil.example", f"http://evil.example:{port}", "null", "https://ops.example/",
                                "https://ops.example:8443", "http://ops.example", "https://ops.example.evil.example",
                                "https://xops.example", f"http://127.0.0.1.nip.io:{port}", "file://",
                                "chrome-extension://abcdefgh", "HTTPS://OPS.EXAMPLE", "http://broker.example:1")
        self.broken_origins = ("http://[::1", "http://[evil", "", "http://", "://", "http://a b", "\x00null")

    def pick(self, options: Sequence[T]) -> T:
        return self.rng.choice(options)

    # -- the parts

    def hosts(self, spec: Spec) -> None:
        roll = self.rng.random()
        if roll < 0.08:
            return  # no Host: not a browser's (HTTP/1.0, a bare script)
        good = self.rng.random() < 0.65
        last = self.pick(self.good_hosts if good else self.bad_hosts)
        spec.hosts, spec.host_ok = (last,), good
        if roll > 0.93:  # duplicated: a bad request
            spec.hosts = (self.pick(self.good_hosts + self.bad_hosts), last)
            spec.notes.append("duplicated Host")

    def origin(self, spec: Spec, chance: float) -> None:
        if self.rng.random() >= chance:
            return
        kind = self.pick(["own", "own", "listed", "loopback", "foreign", "foreign", "broken"])
        if kind == "own" and spec.hosts:
            host = spec.hosts[-1]
            spec.origin = self.pick([f"http://{host}", f"http://{host}/", f"HTTP://{host}"])
        elif kind == "own":  # no Host to be the origin of: the console's usual address, from nowhere
            kind, spec.origin = "loopback", f"http://127.0.0.1:{self.node.admin}"
        elif kind == "listed":
            spec.origin = "https://ops.example"
        else:
            spec.origin = self.pick({"loopback": self.loopback_origins, "foreign": self.foreign_origins,
                                     "broken": self.broken_origins}[kind])
        spec.origin_class = kind

    def fetch_metadata(self, spec: Spec, chance: float) -> None:
        if self.rng.random() < chance:
            spec.site = self.pick([*CROSS_SITE_VALUES, "same-origin", "none", "garbage", ""])
        if self.rng.random() < chance / 2:
            spec.mode = self.pick(["navigate", "navigate", "cors", "no-cors", "same-origin"])

    def credentials(self, spec: Spec) -> None:
        if not self.node.logins:
            if self.rng.random() < 0.3:  # any login passes, or none; not one that is not base64
                spec.authorization = self.pick([basic("ops", "x"), "Basic !!!", "Bearer abc", ""])
                spec.auth_ok = spec.authorization != "Basic !!!"
            return
        roll = self.rng.random()
        if roll < 0.85:  # the operator's own login: a browser sends it with a forged request too
            spec.authorization = self.pick([basic("ops", PASS), "basic " + basic("ops", PASS)[6:]])
        elif roll < 0.89:
            spec.auth_ok = False
        elif roll < 0.92:
            spec.authorization, spec.auth_ok = basic("ops", "wrong"), False
        else:
            spec.authorization, spec.auth_ok = self.pick(["Basic !!!", "Bearer abc", "Basic " + "A" * 30]), False

    def token(self, spec: Spec) -> None:
        if self.rng.random() < 0.5:
            spec.token = self.pick(["", "garbage", "a.b.c", "x.99999999999.y", "AAAA.1.AAAA", "1.2",
                                    "Zm9v.4102444800.bm90LWEtbWFj", "." * 40, "\x00", "abc.4102444800.\xe9",
                                    "abc.\xb2.mac", "\xe9\xe9.1.x"])

    def content_type(self, spec: Spec) -> None:
        roll = self.rng.random()
        if roll < 0.15:
            return
        if roll < 0.55:
            spec.content_type = self.pick(["application/json", "application/json; charset=utf-8", "Application/JSON",
                                           "application/json;charset=UTF-8", "application/json ; x=1"])
            spec.json_type = True
        else:
            spec.content_type = self.pick([
                "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=fuzz", "application/json5", "application/jsonx",
                "application/json-seq", "application/x-json", "text/json", "json", "",
                "application/json, text/plain", "application/ json", "text/plain; application/json",
                "application/json\x00", "TEXT/PLAIN"])

    def body(self, spec: Spec) -> None:
        path = spec.path.rstrip("/") or spec.path
        payload: Any = {
            "/api/destinations/purge": {"destination": self.pick([VICTIM, KEEP])},
            "/api/destinations/delete": {"destination": self.pick([VICTIM, KEEP])},
            "/api/destinations/create": {"destination": CREATED},
            "/api/messages/retry": {"from": VICTIM, "all": True},
            "/api/messages/move": {"from": VICTIM, "to": CREATED, "all": True},
            "/api/connections/close": {"session": self.node.session},
            "/membership": {"op": "add", "node": "127.0.0.1:9"},
            "/leadership": {},
        }.get(path, {"destination": VICTIM})
        roll = self.rng.random()
        if path == "/bodies" and roll < 0.8:
            spec.body = msgpack.packb([1, 2, 3])
        elif roll < 0.86:  # what each path takes: accepted, it would change something
            spec.body = json.dumps(payload).encode()
        elif roll < 0.91:
            spec.body = urlencode({k: str(v) for k, v in payload.items()}).encode()
        elif roll < 0.96:
            spec.body = (b"--fuzz\r\nContent-Disposition: form-data; name=\"json\"\r\n\r\n"
                         + json.dumps(payload).encode() + b"\r\n--fuzz--\r\n")
        else:
            spec.body = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 64)))

    def framing(self, spec: Spec) -> None:
        roll = self.rng.random()
        if roll < 0.05:
            spec.line = self.bad_line(spec)
        elif roll < 0.08:
            spec.length = "absent"
            spec.body = b""
        elif roll < 0.16:
            spec.length = self.pick(["negative", "text", "superscript", "too_big", "truncated"])
        roll = self.rng.random()
        if roll < 0.03:
            spec.pad = "over"
        elif roll < 0.045:
            spec.pad = "huge"
        elif roll < 0.07:
            spec.pad = "under"
        elif roll < 0.09:
            spec.lf = True
        if self.rng.random() < 0.25:
            noise = [
                b"X-No-Colon-Here", b"\x00\x00\x00", b"X-Nul: a\x00b", b"X-Latin: \xff\xfe\xe9",
                b" folded continuation", b"\tfolded-too", b"X-Lf: a\nb", b"Expect: 100-continue",
                b"Connection: keep-alive, Upgrade",
                b"Upgrade: websocket", b"X-Forwarded-Host: evil.example", b"X-Forwarded-For: 203.0.113.7",
                b"Forwarded: host=evil.example", b"Referer: https://evil.example/attack.html",
                b"Access-Control-Request-Method: POST", b"Cookie: session=stolen"]
            spec.noise = tuple(self.pick(noise) for _ in range(self.rng.randrange(1, 4)))

    def bad_line(self, spec: Spec) -> bytes:
        target = spec.target
        octets = [b for b in range(256) if b not in (10, 13)]  # anything but a line's end
        garbage = bytes(self.rng.choice(octets) for _ in range(self.rng.randrange(1, 40)))
        return self.pick([
            garbage, f"{spec.method} {target}".encode(), f"{spec.method} {target} HTTP/2.0".encode(),
            f"{spec.method} {target} http/1.1".encode(), f"{spec.method} {target} HTTP/1".encode(),
            f" {target} HTTP/1.1".encode(), f"P0ST {target} HTTP/1.1".encode(), f"POST\x00 {target} HTTP/1.1".encode(),
            f"PO ST {target} HTTP/1.1".encode(), f"POST http://127.0.0.1:{self.node.admin}{target} HTTP/1.1".encode(),
            f"POST x{target} HTTP/1.1".encode(), b"POST  HTTP/1.1", b"CONNECT evil.example:443 HTTP/1.1",
            f"GET/{target} HTTP/1.1".encode(), f"{spec.method}\t{target}\tHTTP/1.1".encode(),
            b"\x16\x03\x01\x02\x00\x01", b"-", b"", f"POST-{target} HTTP/1.1".encode()])

    # -- whole requests

    def write(self) -> Spec:
        method = self.pick(["POST"] * 10 + ["PUT", "DELETE", "PATCH", "TRACE", "post", "Post", "CONNECT",
                                              "PROPFIND", "POST\xb5", "get"])
        path = self.pick(CHANGE_PATHS)
        target = self.pick([path] * 8 + [f"{path}?destination={VICTIM}", f"{path}/", f"/{path}", path.upper(),
                                          f"{path}#x"])
        spec = Spec(method, target, version=self.pick(["HTTP/1.1"] * 8 + ["HTTP/1.0", "HTTP/1.9"]))
        self.hosts(spec)
        self.origin(spec, 0.6)
        self.fetch_metadata(spec, 0.5)
        self.content_type(spec)
        self.token(spec)
        self.credentials(spec)
        self.body(spec)
        return spec

    def console_like(self) -> Spec:
        """A write as the console's page sends it, from its own or a listed origin, but without a
        token it read (a page of that origin that is not the console, or an old token)."""
        spec = Spec("POST", self.pick(API_CHANGES), content_type="application/json", json_type=True)
        host = self.pick(self.good_hosts)
        spec.hosts, spec.host_ok = (host,), True
        spec.origin, spec.origin_class = self.pick([(f"http://{host}", "own"), ("https://ops.example", "listed")])
        spec.site = self.pick(["same-origin", "same-origin", "cross-site", "none", None])
        spec.mode = self.pick(["cors", "same-origin", None])
        self.token(spec)
        self.credentials(spec)
        self.body(spec)
        return spec

    def read(self) -> Spec:
        method = self.pick(["GET"] * 8 + ["HEAD", "OPTIONS"])
        target = self.pick(READ_TARGETS + (self.pick(CHANGE_PATHS),))
        spec = Spec(method, target, version=self.pick(["HTTP/1.1"] * 8 + ["HTTP/1.0"]))
        self.hosts(spec)
        self.origin(spec, 0.4)
        self.fetch_metadata(spec, 0.4)
        if self.rng.random() < 0.2:
            self.content_type(spec)
        self.token(spec)
        self.credentials(spec)
        return spec

    def refusable(self, spec: Spec) -> Spec:
        """A write given one more defect until it has one (and is refused with a 4xx)."""
        while True:
            defects, codes = verdict(spec, self.node)
            if defects and codes <= FOURXX:
                return spec
            fix = self.pick(["host", "origin", "site", "type", "token"])
            if fix == "host":
                spec.hosts, spec.host_ok = (self.pick(self.bad_hosts),), False
            elif fix == "origin":
                spec.origin, spec.origin_class = self.pick(self.foreign_origins), "foreign"
            elif fix == "site":
                spec.site = self.pick(CROSS_SITE_VALUES)
            elif fix == "type" and spec.path != "/bodies":
                spec.content_type = self.pick(["text/plain", "application/x-www-form-urlencoded"])
                spec.json_type = False
            elif fix == "token" and spec.method == "POST" and spec.path in API_CHANGES:
                spec.site = self.pick(["same-origin", "none"])  # a browser's: it needs the token it lacks
            else:
                continue
            spec.notes.append(f"+{fix}")

    def spec(self) -> Spec:
        roll = self.rng.random()
        spec = self.console_like() if roll < 0.1 else self.write() if roll < 0.7 else self.read()
        self.framing(spec)
        spec.shuffle = self.rng.randrange(2**32)
        return self.refusable(spec) if spec.writes else spec


def attacks(node: Node) -> list[tuple[Spec, int]]:
    """What a page of another site sends, each with the one status it must get."""
    port, auth = node.admin, node.authorization
    own = f"127.0.0.1:{port}"
    purge = json.dumps({"destination": VICTIM}).encode()

    def spec(**kw: Any) -> Spec:
        base = Spec("POST", "/api/destinations/purge", hosts=(own,), host_ok=True, authorization=auth, body=purge)
        return replace(base, **kw)

    return [
        # a form or a no-cors fetch: a simple request, sent with the operator's login
        (spec(origin="https://evil.example", origin_class="foreign", content_type="text/plain", site="cross-site",
              mode="no-cors"), 403),
        (spec(content_type="text/plain"), 415),  # no Origin (an old browser, a stripped header): still no form post
        (spec(content_type="application/x-www-form-urlencoded", body=b"destination=%2Fqueue%2Fvictim"), 415),
        # DNS rebinding: evil.example resolves to 127.0.0.1, same-origin with itself
        (spec(hosts=("evil.example",), host_ok=False, origin="http://evil.example", origin_class="own",
              content_type="application/json", json_type=True, site="same-origin"), 421),
        (spec(hosts=(f"evil.example:{port}",), host_ok=False, content_type="application/json", json_type=True), 421),
        # a page of another site with a preflight it was never granted
        (spec(origin="https://evil.example", origin_class="foreign", content_type="application/json", json_type=True,
              site="cross-site", mode="cors"), 403),
        (spec(origin="null", origin_class="foreign", content_type="application/json", json_type=True), 403),
        # the console's own origin, or a listed one, without the token the console's page reads
        (spec(origin=f"http://{own}", origin_class="own", content_type="application/json", json_type=True,
              site="same-origin"), 403),
        (spec(origin="https://ops.example", origin_class="listed", content_type="application/json", json_type=True,
              site="cross-site", token="garbage"), 403),
        (spec(target="/api/connections/close", site="same-origin", content_type="application/json", json_type=True,
              body=json.dumps({"session": node.session}).encode()), 403),
        (spec(method="OPTIONS", origin="https://evil.example", origin_class="foreign", body=b""), 403),
        # a script's change whose body ends early (the head was let through; its body never comes)
        (spec(content_type="application/json", json_type=True, length="truncated"), 400),
    ]


# -- the test ------------------------------------------------------------------------------------


def check(node: Node, spec: Spec, counts: Counter[str]) -> None:
    data = render(spec)
    defects, codes = verdict(spec, node)
    where = (f"seed {SEED}: {spec.method!r} {spec.target!r} defects {defects} notes {spec.notes}, acceptable "
             f"{sorted(codes) if len(codes) < 20 else 'any but 5xx'}; request {data[:600]!r}")
    try:
        raw, reset = exchange(node.admin, data)
    except TimeoutError:
        pytest.fail(f"no answer within {IO_TIMEOUT}s (a hang): {where}")
    if reset and spec.pad == "huge" and not ANSWER_HEAD.match(raw):
        counts["reset (head far past the limit)"] += 1  # closed with the head unread: the answer may be lost
        return
    assert not reset, f"connection reset (answer {raw[:300]!r}): {where}"
    try:
        answer = parse(raw)
    except AssertionError as exc:
        pytest.fail(f"{exc}: {where}")
    counts[str(answer.status)] += 1
    if defects:
        counts[f"decided by: {defects[0]}"] += 1
    assert answer.status < 500, f"{answer.status} {answer.body[:300]!r}: {where}"
    assert answer.status in codes, f"got {answer.status} {answer.body[:300]!r}: {where}"
    assert answer.headers.get("x-frame-options") == "DENY", f"framing not forbidden: {where}"
    granted = spec.origin_class == "listed" or (spec.origin_class == "loopback" and node.loopback_listed)
    assert "access-control-allow-origin" not in answer.headers or granted, f"CORS granted: {answer.headers} {where}"
    if spec.writes:
        assert answer.status in FOURXX, f"a change answered {answer.status}: {where}"


def test_the_admin_port_refuses_what_it_should_not_do_and_changes_nothing(node: Node) -> None:
    started = time.monotonic()
    stomp_headers = {"login": "ops", "passcode": PASS} if node.logins else {}
    conn, listener = connect(("127.0.0.1", node.client), headers=stomp_headers)
    try:
        for n, destination in enumerate([VICTIM] * 3 + [KEEP] * 2):
            conn.send(destination, f"message {n}", receipt=f"r{n}")
            listener.receipt(f"r{n}")
        depths, sessions = state(node)
        assert depths == {VICTIM: 3, KEEP: 2}, depths
        assert len(sessions) == 1, sessions
        node.session = next(iter(sessions))

        counts: Counter[str] = Counter()
        for spec, status in attacks(node):
            defects, codes = verdict(spec, node)
            assert codes == {status}, (spec, defects, codes)  # the oracle agrees with the fixed cases
            check(node, spec, counts)
        # DNS rebinding: every path, every method, otherwise well-formed: 421
        for target in READ_TARGETS + CHANGE_PATHS:
            for method in ("GET", "HEAD", "OPTIONS", "POST"):
                rebound = Spec(method, target, hosts=(f"evil.example:{node.admin}",), host_ok=False,
                               content_type="application/json", json_type=True, authorization=node.authorization,
                               body=b"{}" if method == "POST" else b"")
                assert verdict(rebound, node)[1] == {421}
                check(node, rebound, counts)
        for first in (b"CONNECT\n", b"STOMP\r\n"):  # a STOMP client's first line: a STOMP ERROR, not HTTP
            raw, _ = exchange(node.admin, first)
            assert raw.startswith(b"ERROR\n") and b"admin" in raw, raw[:300]

        fuzzer = Fuzzer(node, random.Random(f"{SEED}-{node.logins}"))
        writes = 0
        repairable: Spec | None = None
        for _ in range(REQUESTS):
            spec = fuzzer.spec()
            check(node, spec, counts)
            if spec.writes:
                writes += 1
                now = state(node)
                assert now == (depths, sessions), (f"state changed (seed {SEED}): {now} after {spec.method!r} "
                                                   f"{spec.target!r}: {render(spec)[:600]!r}")
            if repairable is None and spec.method == "POST" and spec.path == "/api/destinations/create":
                repairable = spec
        assert writes > REQUESTS // 2, writes
        for code in ("400", "403", "413", "415", "421", "431"):  # the fuzz reached every refusal
            assert counts[code] > 0, (code, counts)
        for defect in ("Host not this port's", "foreign Origin", "cross-site fetch", "a change not sent as JSON",
                       "a browser's change without the console's token", "not an HTTP/1.x request line",
                       "head past 16 KiB", "head far past 16 KiB", "Content-Length too_big",
                       "Host sent twice"):
            assert counts[f"decided by: {defect}"] > 0, (defect, counts)
        if node.logins:
            assert counts["401"] > 0, counts

        # Nothing changed, the session is listed and works, the node is whole.
        assert state(node) == ({VICTIM: 3, KEEP: 2}, sessions)
        assert node.proc.poll() is None
        conn.send("/queue/after", "still here", receipt="after")
        listener.receipt("after")
        assert listener.errors.empty() and not listener.disconnected.is_set()

        # Positive control: one of the fuzzer's refused changes, repaired, is served and changes state.
        assert repairable is not None
        repaired = replace(repairable, line=None, lf=False, version="HTTP/1.1", hosts=(f"127.0.0.1:{node.admin}",),
                           host_ok=True, origin=None, origin_class=None, site=None, mode=None,
                           content_type="application/json", json_type=True, token=None,
                           authorization=node.authorization, auth_ok=True, length="exact", pad="none",
                           body=json.dumps({"destination": CONTROL}).encode())
        assert verdict(repaired, node) == ([], frozenset({200, 400}))
        answer = parse(exchange(node.admin, render(repaired))[0])
        assert answer.status == 200 and json.loads(answer.body) == {"ok": True, "created": 1}, (answer, repaired)
        # ... and the console's own way: its origin, its token
        origin = {"Origin": f"http://127.0.0.1:{node.admin}", "Sec-Fetch-Site": "same-origin"}
        session = clean(node, "GET", "/api/session", headers={**origin, "Sec-Fetch-Mode": "cors"})
        assert session.status == 200, session
        token = json.loads(session.body)["token"]
        purged = clean(node, "POST", "/api/destinations/purge", {"destination": CONTROL},
                       headers={**origin, "X-Raftmq-Token": token})
        assert purged.status == 200 and json.loads(purged.body) == {"ok": True, "purged": 0}, purged
        assert state(node) == ({VICTIM: 3, KEEP: 2, CONTROL: 0, "/queue/after": 1}, sessions)
    finally:
        conn.disconnect()

    logs = node.stderr.read_text(errors="replace") + node.stdout.read_text(errors="replace")
    assert "Traceback" not in logs and "admin.internal_error" not in logs, logs[-5000:]
    assert "admin.refused" in logs
    assert node.proc.poll() is None
    mode = "logins" if node.logins else "open"
    print(f"fuzz ({mode}): {sorted(counts.items())} in {time.monotonic() - started:.1f}s")
    assert time.monotonic() - started < 60, f"the fuzz took {time.monotonic() - started:.1f}s"


# What the fuzz found: each request below is one the port should refuse with a 4xx, and it
# answered 500 with a traceback in the log before the fix that these pin.
FOUND = [
    pytest.param(  # web_guard.TokenMint.valid: hmac.compare_digest of a str that is not ASCII raises TypeError
        "POST /api/destinations/create HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Origin: http://127.0.0.1:{port}\r\nSec-Fetch-Site: same-origin\r\nX-Raftmq-Token: abc.4102444800.\xe9\r\n"
        "Content-Length: {length}\r\n\r\n", json.dumps({"destination": CREATED}).encode(), {403},
        id="token-mac-not-ascii"),
    pytest.param(  # management.ManagementApi.answer: json.loads of a deeply nested body raises RecursionError
        "POST /api/destinations/create HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: {length}\r\n\r\n", b"[" * 100_000, {400},
        id="json-nested-too-deep"),
]


@pytest.mark.parametrize("node", ["open"], indirect=True)
@pytest.mark.parametrize(("head", "body", "statuses"), FOUND)
def test_what_the_fuzz_found_is_refused_without_a_traceback(node: Node, head: str, body: bytes,
                                                            statuses: set[int]) -> None:
    request = head.format(port=node.admin, length=len(body)).encode("latin-1") + body
    raw, reset = exchange(node.admin, request)
    assert not reset
    answer = parse(raw)
    logs = node.stderr.read_text(errors="replace")
    assert answer.status in statuses and "Traceback" not in logs, (answer.status, answer.body[:300], logs[-3000:])
    assert CREATED not in state(node)[0]
