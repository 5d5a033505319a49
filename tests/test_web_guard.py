"""What a web page may make a node do (raftmq.web_guard), pure: the admin port's verdict on a
request's Host, Origin, fetch metadata and Content-Type, the CORS grant, and the console's
anti-forgery tokens. The admin port and the WebSocket handshake are held to it over real
sockets in tests/server/test_admin_guard.py; a browser in tests/server/test_admin_csrf_browser.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.web_guard import (
    PREFLIGHT_GRANT,
    HostNames,
    TokenMint,
    check_request,
    cors_headers,
    host_of,
    is_browser,
    same_origin,
)

HOSTS = HostNames.of("127.0.0.1", "broker.example")
OWN = "http://127.0.0.1:8161"
JSON = {"content-type": "application/json"}


def verdict(method: str = "POST", headers: dict[str, str] | None = None, *, origins: tuple[str, ...] = (),
            scheme: str = "http", local: str | None = "127.0.0.1", changes: bool | None = None) -> int | None:
    refusal = check_request(method, {"host": "127.0.0.1:8161", **(headers or {})}, scheme=scheme, hosts=HOSTS,
                            origins=origins, local_address=local,
                            changes=method == "POST" if changes is None else changes)
    return None if refusal is None else refusal.status


@pytest.mark.parametrize(("headers", "expected"), [
    # The issue's request: a "simple" cross-site POST any page can make the browser send.
    ({"content-type": "text/plain", "origin": "https://evil.example", "sec-fetch-site": "cross-site"}, 403),
    # The same with JSON (a page must preflight it; were it sent, its origin still gives it away).
    ({**JSON, "origin": "https://evil.example"}, 403),
    ({**JSON, "origin": "null"}, 403),  # a sandboxed frame, a file:// page
    ({**JSON, "origin": "http://127.0.0.1:9999"}, 403),  # another port of this machine is another origin
    ({**JSON, "origin": "https://127.0.0.1:8161"}, 403),  # another scheme too
    ({**JSON, "sec-fetch-site": "cross-site"}, 403),  # no Origin, but the browser says where it came from
    ({**JSON, "sec-fetch-site": "same-site"}, 403),
    ({"content-type": "text/plain"}, 415),  # a script's change that is not JSON
    ({"content-type": "application/x-www-form-urlencoded"}, 415),
    ({"content-type": "multipart/form-data; boundary=x"}, 415),
    ({}, 415),
    ({"content-type": "application/json5"}, 415),
    (JSON, None),  # the CLI, curl, scripts
    ({"content-type": "Application/JSON; charset=utf-8"}, None),
    ({**JSON, "origin": OWN, "sec-fetch-site": "same-origin"}, None),  # the console's own page
    ({**JSON, "origin": "http://127.0.0.1:8161/"}, None),  # (an origin with a slash: the same one)
    ({**JSON, "host": "evil.example:8161", "origin": "http://evil.example:8161"}, 421),  # DNS rebinding
    ({**JSON, "host": "evil.example"}, 421),
    ({**JSON, "host": "127.0.0.1.nip.io:8161"}, 421),
])
def test_a_change(headers: dict[str, str], expected: int | None) -> None:
    assert verdict("POST", headers) == expected


@pytest.mark.parametrize(("headers", "origins", "expected"), [
    ({**JSON, "origin": "https://admin.example", "sec-fetch-site": "cross-site"}, ("https://admin.example",), None),
    ({**JSON, "origin": "https://admin.example"}, ("https://other.example",), 403),
    ({**JSON, "origin": "http://localhost:3000", "sec-fetch-site": "same-site"}, ("loopback",), None),
    ({**JSON, "origin": "https://evil.example", "sec-fetch-site": "cross-site"}, ("loopback",), 403),
    ({"content-type": "text/plain", "origin": "https://admin.example"}, ("https://admin.example",), 415),
])
def test_admin_origins_let_a_listed_page_in(headers: dict[str, str], origins: tuple[str, ...],
                                            expected: int | None) -> None:
    assert verdict("POST", headers, origins=origins) == expected


@pytest.mark.parametrize(("method", "headers", "expected"), [
    ("GET", {}, None),  # curl, Prometheus, the probes
    ("GET", {"sec-fetch-site": "none", "sec-fetch-mode": "navigate"}, None),  # typed in the address bar
    ("GET", {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}, None),  # a link from another site
    ("GET", {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"}, 403),  # <img src>, <script src>
    ("GET", {"sec-fetch-site": "same-site", "sec-fetch-mode": "cors"}, 403),
    ("GET", {"origin": "https://evil.example", "sec-fetch-mode": "cors"}, 403),
    ("GET", {"host": "evil.example"}, 421),  # a rebound page reading /status or the console
    ("GET", {"host": ""}, 421),
    ("GET", {"host": "a b"}, 421),
    ("GET", {"host": "127.0.0.1:x"}, 421),
    ("OPTIONS", {"origin": "https://evil.example"}, 403),  # a preflight from a stranger
    ("OPTIONS", {}, None),
])
def test_a_read(method: str, headers: dict[str, str], expected: int | None) -> None:
    assert verdict(method, headers, changes=False) == expected


@pytest.mark.parametrize(("header", "local", "allowed"), [
    (None, None, True),  # HTTP/1.0 without Host: not a browser
    ("localhost", None, True),
    ("LOCALHOST.:8161", None, True),
    ("console.localhost", None, True),
    ("127.0.0.1:8161", None, True),
    ("127.9.9.9", None, True),
    ("[::1]:8161", None, True),
    ("broker.example", None, True),
    ("Broker.Example:443", None, True),
    ("10.1.2.3:8161", "10.1.2.3", True),  # a probe of the pod's address
    ("10.1.2.3:8161", "::ffff:10.1.2.3", True),  # a dual-stack listener's view of it
    ("10.1.2.3:8161", "::ffff:10.1.2.4", False),
    ("10.1.2.3:8161", None, False),
    ("evil.example", "127.0.0.1", False),
    ("localhost.evil.example", None, False),
    ("user@localhost", None, False),
    ("", None, False),
])
def test_host_names(header: str | None, local: str | None, allowed: bool) -> None:
    assert HOSTS.allows(header, local) is allowed


def test_wildcards_and_empty_names_are_not_names() -> None:
    assert HostNames.of("0.0.0.0", "::", None, "", "[::1]", "Name.").names == frozenset({"::1", "name"})


def test_configured_addresses_give_their_hosts() -> None:
    names = HostNames.of("broker.example:8161", "[fd00::5]:61613", "https://Admin.Example:8161", "0.0.0.0:8161", "::1")
    assert names.names == frozenset({"broker.example", "fd00::5", "admin.example", "::1"})
    assert names.with_names("g1-0.g1.svc:8161", None).names == names.names | {"g1-0.g1.svc"}
    assert names.allows("[fd00::5]:61613") and names.allows("admin.example") and not names.allows("g1-0.g1.svc")


@given(st.text(max_size=40))
def test_any_host_header_is_judged_never_raises(header: str) -> None:
    HOSTS.allows(header, "127.0.0.1")
    host_of(header)


def test_same_origin_takes_default_ports_into_account() -> None:
    assert same_origin("http://broker.example", "http", "broker.example:80")
    assert same_origin("https://broker.example:443", "https", "broker.example")
    assert not same_origin("http://broker.example", "https", "broker.example")
    assert not same_origin("http://broker.example:x", "http", "broker.example")
    assert not same_origin("http://broker.example", "http", None)


def test_cors_is_granted_only_to_a_listed_origin_never_to_the_own_or_a_stranger() -> None:
    listed = {"host": "127.0.0.1:8161", "origin": "https://admin.example"}
    assert cors_headers(listed, "http", ("https://admin.example",)) == {
        "Access-Control-Allow-Origin": "https://admin.example", "Access-Control-Allow-Credentials": "true",
        "Vary": "Origin"}
    assert cors_headers(listed, "http", ()) == {}
    assert cors_headers({"host": "127.0.0.1:8161", "origin": OWN}, "http", ("*",)) == {}
    assert cors_headers({"host": "127.0.0.1:8161"}, "http", ("*",)) == {}
    assert "X-Raftmq-Token" in PREFLIGHT_GRANT["Access-Control-Allow-Headers"]


def test_a_browser_is_told_by_its_origin_or_fetch_metadata() -> None:
    assert is_browser({"origin": OWN}) and is_browser({"sec-fetch-site": "same-origin"})
    assert not is_browser({"content-type": "application/json", "authorization": "Basic x"})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_is_worth_something_only_for_its_login_its_mint_and_its_lifetime() -> None:
    clock = Clock()
    mint = TokenMint(b"k" * 32, clock)
    token = mint.issue("ops")
    assert mint.valid(token, "ops")
    assert mint.issue("ops") != token  # one per page (session)
    assert not mint.valid(token, "app")  # another login's
    assert not mint.valid(token, None)
    assert not TokenMint(b"j" * 32, clock).valid(token, "ops")  # another process's (a restart)
    session, expiry, mac = token.split(".")
    assert not mint.valid(f"{session}.{int(expiry) + 10**6}.{mac}", "ops")  # a longer life forged
    assert not mint.valid(f"x{session}.{expiry}.{mac}", "ops")
    for junk in (None, "", "a", "a.b.c", "..", f"{session}.{expiry}", f"{session}.-1.{mac}",
                 f"{session}.{expiry}.\xe9", f"{session}.\xb2.{mac}", f"\xe9.{expiry}.{mac}"):  # (latin-1 header bytes)
        assert not mint.valid(junk, "ops")
    clock.now += 12 * 3600 + 1
    assert not mint.valid(token, "ops")  # expired
    anonymous = mint.issue(None)
    assert mint.valid(anonymous, None) and not mint.valid(anonymous, "ops")
