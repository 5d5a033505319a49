"""The admin port's management API (`/api/...`, JSON) and the web console's files (`/`).

docs/management.md is the contract. Reads come from this member's replica; every change is a
`Manage` command committed through the group's log (`Node.manage`) by the leader: a follower
passes a change on to the leader's admin API (over HTTPS when the group has [tls], with the
caller's own login) and answers with the leader's answer, or 409 naming the leader's admin
address when it cannot. Who may ask is decided here, in the shell, with the STOMP logins and
ACLs (`raftmq.security`): HTTP Basic with a STOMP login; reads list what the user may read; a
change needs `admin` on its destination(s) and never touches the cluster's internal queues
(`$.raftmq.`); connections (listing and closing) need `admin` on every queue and topic.
A browser's change (one carrying `Origin` or fetch metadata: the console's) must also carry the
anti-forgery token the console's page gets from `GET /api/session` (raftmq.web_guard.TokenMint);
the admin port has refused what a page of another site may not send before it gets here.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from raftmq.config import split_address
from raftmq.core.browse import browse_store
from raftmq.core.commands import Manage
from raftmq.core.selector import compile_selector
from raftmq.errors import CommitFailed, NotLeader, SelectorError
from raftmq.protocol.header_block import first as first_header
from raftmq.protocol.header_block import header_dict, pairs_of
from raftmq.routing.route import INTERNAL_PREFIXES
from raftmq.security import ADMIN, READ, Principal
from raftmq.server.admin import console
from raftmq.server.admin.http import member_connection
from raftmq.server.mqtt.connection import MqttConnection
from raftmq.server.node import Node
from raftmq.server.stomp.connection import Connection
from raftmq.tls import member_client_tls
from raftmq.web_guard import TOKEN_HEADER, TokenMint, is_browser

Answer = tuple[int, str, bytes]
Headers = dict[str, str]

MESSAGES_LIMIT = 1_000
BODY_PREVIEW = 256
HEALTH_TIMEOUT = 0.5
EVERYTHING = ("/queue/>", "/topic/>")
JSON = "application/json"
# On a change a follower passes on to the leader: the leader answers it itself, never passes it
# on again (a leader that has just lost its leadership answers 409).
FORWARDED_HEADER = "X-Raftmq-Forwarded"
FORWARD_TIMEOUT = 20.0  # within the admin port's READ_TIMEOUT: the follower answers before it gives up


def _json(code: int, answer: dict[str, Any], extra: str = "") -> Answer:
    return code, JSON + extra, json.dumps(answer, default=str).encode() + b"\n"


class ManagementApi:
    """`members()` lists the group's members as `{"node", "client", "admin"}` (the group file
    as last read), for the overview and for passing changes on to the leader. `group`: the
    group's name (its file's [group] name); without it, the one the members' /health gives."""

    def __init__(self, node: Node, members: Callable[[], list[dict[str, str | None]]],
                 group: str | None = None) -> None:
        self.node = node
        self.members = members
        self.group = group
        self._member_tls: tuple[ssl.SSLContext, bytes] | None = None
        self.tokens = TokenMint()  # the console's anti-forgery tokens

    async def answer(self, method: str, path: str, query: str, headers: Headers, body: bytes) -> Answer | None:
        """The answer to a request for the API or the console, or None for another path."""
        if method == "GET" and not path.startswith("/api/"):
            asset = console.asset(path)
            if asset is None:
                return None
            principal = await self._principal(headers)
            if principal is None:
                return 401, "text/plain", b"login required\n"
            return 200, asset[0], asset[1]
        if not path.startswith("/api/"):
            return None
        principal = await self._principal(headers)
        if principal is None:
            return 401, "application/json", b'{"error": "login required"}\n'
        params = {key: values[-1] for key, values in parse_qs(query).items()}
        route = (method, path)
        if route == ("GET", "/api/session"):  # the console's page asks first: its token for its writes
            return _json(200, {"login": principal.name, "token": self.tokens.issue(principal.name),
                               "token_header": TOKEN_HEADER})
        if route == ("GET", "/api/overview"):
            return _json(200, await self.overview(principal))
        if route == ("GET", "/api/destinations"):
            return _json(200, {"destinations": self.destinations(principal)})
        if route == ("GET", "/api/consumers"):
            return _json(200, {"consumers": self.consumers(principal)})
        if route == ("GET", "/api/connections"):
            return self._operator(principal) or _json(200, {"connections": self.connections()})
        if route == ("GET", "/api/messages"):
            return self.messages(principal, params.get("destination", ""), params.get("limit", "100"),
                                 params.get("selector"))
        if method == "POST" and path in _CHANGES:
            if is_browser(headers) and not self.tokens.valid(headers.get(TOKEN_HEADER.lower()), principal.name):
                return _json(403, {"error": f"a change from a browser carries the console's {TOKEN_HEADER} "
                                            "(GET /api/session); this one's is missing, expired or not this login's",
                                   "token": "invalid"})
            try:
                request = json.loads(body or b"{}")
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                return _json(400, {"error": "the request body must be a JSON object"})
            if not isinstance(request, dict):
                return _json(400, {"error": "the request body must be a JSON object"})
            passed_on = headers.get(FORWARDED_HEADER.lower()) is not None
            return await self.change(principal, _CHANGES[path], request,
                                     forward=None if passed_on else (path, headers.get("authorization")))
        return _json(404, {"error": f"no {method} {path}"})

    # -- who asks ------------------------------------------------------------------------------

    async def authenticated(self, headers: Headers) -> bool:
        """Whether the request carries a valid login (always, without logins configured): what
        `/status` and `/metrics` ask of a request."""
        return not self.node.security.config.authentication or await self._principal(headers) is not None

    async def _principal(self, headers: Headers) -> Principal | None:
        security = self.node.security
        login = passcode = None
        authorization = headers.get("authorization", "")
        if authorization[:6].lower() == "basic ":
            try:
                login, _, passcode = base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
            except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8 (UnicodeDecodeError)
                return None
        quick = security.quick_login(login, passcode)
        if quick is not True:
            return quick if isinstance(quick, Principal) else None
        return await asyncio.to_thread(security.login, login, passcode)

    def _may(self, principal: Principal, operation: str, destination: str) -> str | None:
        return self.node.security.refusal(principal, operation, destination, True)

    def _operator(self, principal: Principal) -> Answer | None:
        for everything in EVERYTHING:
            refusal = self._may(principal, ADMIN, everything)
            if refusal is not None:
                return _json(403, {"error": f"connections are an operator's: {refusal}"})
        return None

    # -- reads ---------------------------------------------------------------------------------

    async def overview(self, principal: Principal) -> dict[str, Any]:
        status = self.node.status()
        members = self.members()
        tls = self.node.security.config.tls is not None
        healths = await asyncio.gather(*(_health(m.get("admin"), tls) for m in members))
        cluster = status.get("cluster") or {}
        peers = self.node.config.cluster_peers
        peer_healths = await asyncio.gather(*(_health(admin, tls) for peer in peers for admin in peer.admins))
        answers = iter(peer_healths)
        others = {
            peer.name: [{"admin": admin, **_member_view(next(answers))} for admin in peer.admins] for peer in peers
        }
        # A lone group has no cluster section: its name is the group file's (every member's
        # admin port labels its /health with it), never this node's.
        named = next((h["group"] for h in healths if isinstance(h.get("group"), str) and h["group"]), None)
        return {
            "group": cluster.get("group") or self.group or named or self.node.name,
            "node": status["node"],
            "role": status["role"],
            "leader": status.get("leader") or (self._own_client() if status["role"] == "leader" else None),
            "term": status.get("term"),
            "members": [{**member, "role": health.get("role"), "health": health.get("status")}
                        for member, health in zip(members, healths, strict=True)],
            "links": cluster.get("links", []),
            "peers": others,  # the other groups' members as their admin ports answer /health
            "groups": cluster.get("reachable", {}),
            "drain": _drain(status),
            "dead_letter_queue": self.node.config.core.dead_letter_queue,
            "expiry_queue": self.node.config.core.expiry_queue,
            "destinations": len(self.destinations(principal)),
            "connections": len(self.node.sessions),
            # MQTT's: this node's connections, what the group keeps (retained messages, kept sessions, wills)
            "mqtt": {"connections": status.get("mqtt_connections", 0), **(status["broker"].get("mqtt") or {})},
        }

    def destinations(self, principal: Principal) -> list[dict[str, Any]]:
        status = self.node.status()
        stats = status["broker"]["destinations"]  # with what this leader forwarded first
        rates = status["rates"]["destinations"]
        rows = []
        for name, counters in stats.items():
            if self._may(principal, READ, name) is not None:
                continue
            rate = rates.get(name, {})
            rows.append({"destination": name, "kind": name.split("/")[1], **counters,
                         # the cluster's own (store-and-forward, control): no change may touch it
                         "internal": name.startswith(INTERNAL_PREFIXES),
                         "rate_in": rate.get("enqueue_rate"), "rate_out": rate.get("dequeue_rate"),
                         # in a cluster of groups: sent on to other groups, come from them (msg/s)
                         "rate_forward": rate.get("forward_rate"), "rate_arrive": rate.get("arrive_rate")})
        return rows

    def consumers(self, principal: Principal) -> list[dict[str, Any]]:
        rows = []
        for sub in self.node.broker.state.subscriptions():
            if self._may(principal, READ, sub.destination) is not None:
                continue
            rows.append({
                "session": sub.session.session_id if sub.session is not None else None,
                "sub_id": sub.sub_id,
                "destination": sub.destination,
                "selector": sub.selector.text if sub.selector is not None else None,
                "ack": sub.ack,
                "prefetch": sub.prefetch,
                "in_flight": len(sub.in_flight),
                "durable_name": sub.durable_name,
                "active": sub.session is not None,
                "last_activity": sub.last_activity or None,
            })
        return rows

    def connections(self) -> list[dict[str, Any]]:
        sessions = self.node.broker.state.sessions
        rows = []
        for session_id, connection in self.node.sessions.items():
            core = sessions.get(session_id)
            rows.append({
                "session": session_id,
                "kind": "client" if isinstance(connection, (Connection, MqttConnection)) else "link",
                "peer": connection.peer,
                "login": core.login if core is not None else None,
                "client_id": core.client_id if core is not None else None,
                "version": connection.version,
                # tcp, tls, ws, wss or vm (a follower's relayed client: how it reached the follower)
                "transport": getattr(connection, "transport_kind", "internal"),
                "since": getattr(connection, "connected_at", None),
                "subscriptions": len(core.subs) if core is not None else 0,
            })
        return rows

    def messages(self, principal: Principal, destination: str, limit: str, selector_text: str | None) -> Answer:
        refusal = self._may(principal, READ, destination) if destination.startswith("/queue/") else "not a queue"
        if refusal is not None:
            return _json(403 if destination.startswith("/queue/") else 400, {"error": refusal})
        try:
            count = max(1, min(int(limit), MESSAGES_LIMIT))
            selector = compile_selector(selector_text) if selector_text else None
        except (ValueError, SelectorError) as exc:
            return _json(400, {"error": str(exc)})
        broker = self.node.broker
        found, truncated = browse_store(broker.state.queues.get(destination), count, selector, self.node.clock.now_ms())
        bodies = self.node.replica.bodies
        rows = []
        for message in found:
            try:
                stored = message.body
                body = stored if isinstance(stored, (bytes, bytearray)) or bodies is None else bodies.body(stored)
                raw = bytes(body)
            except Exception as exc:  # a body this member cannot read: say so, list the rest
                raw = f"<unreadable here: {exc}>".encode()
            pairs = pairs_of(message.headers)
            headers = [[name, value] for name, value in pairs]
            first = header_dict(message.headers)  # first occurrence wins
            deliveries = first.get("dead_letter_deliveries", "")
            rows.append({
                "message_id": message.message_id,
                "destination": message.destination,
                "original_destination": first.get("original-destination"),
                "headers": headers,
                "body": raw[:BODY_PREVIEW].decode("utf-8", "replace"),
                "size": len(raw),
                "delivery_count": message.delivery_count,
                # A dead letter's: why it died and after how many deliveries (raftmq.core.dead_letter).
                "dead_letter_reason": first.get("dead_letter_reason"),
                "dead_letter_deliveries": int(deliveries) if deliveries.isdigit() else None,
                "dead_letter_cause": first.get("dead_letter_cause"),
                "priority": message.priority,
                "timestamp": message.timestamp,
            })
        return _json(200, {"messages": rows, "truncated": truncated})

    # -- changes -------------------------------------------------------------------------------

    async def change(self, principal: Principal, op: str, request: dict[str, Any],
                     forward: tuple[str, str | None] | None = None) -> Answer:
        """Commit one change through the group's log. `forward`: (the request's path, its
        Authorization header) to pass it on to the leader with when this member does not lead;
        None: answer 409 naming the leader instead."""
        try:
            command = self._command(op, request)
        except (KeyError, TypeError, ValueError) as exc:
            return _json(400, {"error": f"bad request: {exc}"})
        targets = [command.destination] if op != "close" else list(EVERYTHING)
        if command.target is not None:
            targets.append(command.target)
        for destination in targets:
            if not destination.startswith(("/queue/", "/topic/")):
                return _json(400, {"error": f"not a destination: {destination!r}"})
            refusal = self._may(principal, ADMIN, destination)
            if refusal is not None:
                return _json(403, {"error": refusal})
        if op == "retry":  # each message goes back where it came from: the user administers those too
            refusal = self._retry_refusal(principal, command)
            if refusal is not None:
                return _json(403, {"error": refusal})
        total: dict[str, int] = {}
        try:
            while True:
                done = await self.node.manage(command)
                if done.error is not None:
                    return _json(400, {"error": done.error})
                counts = dict(done.counts)
                for key, value in counts.items():
                    if key != "more":
                        total[key] = total.get(key, 0) + value
                if not counts.get("more") or not counts.get("moved"):
                    break
                command = Manage(self._request_id(), command.op, self.node.clock.now_ms(), command.destination,
                                 command.target, command.ids, command.selector, command.every, command.closing)
        except NotLeader as exc:
            leader_admin = self._admin_of(exc.leader)
            conflict = {"error": "not the leader", "leader": exc.leader, "leader_admin": leader_admin}
            if forward is None or leader_admin is None:
                return _json(409, conflict)
            return await self._forward(leader_admin, forward[0], request, forward[1], total, conflict)
        except CommitFailed as exc:
            return _json(503, {"error": str(exc)})
        return _json(200, {"ok": True, **total})

    def _command(self, op: str, request: dict[str, Any]) -> Manage:
        ids = request.get("ids") or ()
        if not isinstance(ids, list | tuple) or not all(isinstance(i, str) for i in ids):
            raise ValueError("ids must be a list of message ids")
        source = request.get("from") if op in ("retry", "move") else request.get("destination", "")
        closing = request.get("session") if op == "close" else None
        if op == "close" and not isinstance(closing, str):
            raise ValueError("close names a session")
        destination = "/queue/>" if op == "close" else source
        if not isinstance(destination, str):
            raise ValueError("name the destination")
        target = request.get("to")
        selector = request.get("selector")
        if any(value is not None and not isinstance(value, str) for value in (target, selector)):
            raise ValueError("to and selector are strings")
        return Manage(self._request_id(), op, self.node.clock.now_ms(), "" if op == "close" else destination,
                      target, tuple(ids), selector, bool(request.get("all")), closing)

    def _request_id(self) -> str:
        return self.node.new_session_id("admin")

    def _retry_refusal(self, principal: Principal, command: Manage) -> str | None:
        store = self.node.broker.state.queues.get(command.destination)
        if store is None:
            return None  # the core answers "no such destination"
        found = (first_header(m.headers, "original-destination") for m in store.ready.values())
        origins = {origin for origin in found if origin is not None}
        for origin in sorted(origins):
            if origin.startswith(("/queue/", "/topic/")):
                refusal = self._may(principal, ADMIN, origin)
                if refusal is not None:
                    return refusal
        return None

    async def _forward(self, leader_admin: str, path: str, request: dict[str, Any], authorization: str | None,
                       done: dict[str, int], conflict: dict[str, Any]) -> Answer:
        """The leader's answer to `request` (its admin API, the caller's login), with what this
        member did before it lost the leadership (`done`) added; 409 `conflict` when the leader
        does not answer."""
        tls = self.node.config.security.tls
        if tls is not None and self._member_tls is None:
            self._member_tls = member_client_tls(tls)
        try:
            code, content_type, data = await asyncio.to_thread(
                _post_change, leader_admin, path, json.dumps(request).encode(), authorization,
                self._member_tls if tls is not None else None)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            error = f"not the leader, and the leader's admin port did not answer ({exc})"
            return _json(409, {**conflict, "error": error})
        if code == 200 and done:
            try:
                answer = json.loads(data)
                for key, value in done.items():
                    answer[key] = int(answer.get(key, 0)) + value
                return _json(200, answer)
            except (ValueError, TypeError, AttributeError):
                pass
        return code, content_type, data

    def _own_client(self) -> str | None:
        return next((m.get("client") for m in self.members() if m.get("node") == self.node.name), None)

    def _admin_of(self, client: str | None) -> str | None:
        for member in self.members():
            if client is not None and member.get("client") == client:
                return member.get("admin")
        return None


_CHANGES = {
    "/api/destinations/create": "create",
    "/api/destinations/purge": "purge",
    "/api/destinations/delete": "delete",
    "/api/messages/retry": "retry",
    "/api/messages/move": "move",
    "/api/connections/close": "close",
}


def _drain(status: dict[str, Any]) -> dict[str, Any] | None:
    """None unless the group drains (`raftmq group drain`, `cluster.draining`, replicated):
    `to` (the groups it moves to; [] for every group it reaches), `moved` (`cluster.drained`),
    `left` (what it still holds, ready and in flight, internal queues included, in this
    member's replica) and `state`: "drained" once it holds nothing, else "draining". Either
    way the group turns every client away."""
    cluster = status.get("cluster") or {}
    if cluster.get("draining") is None:
        return None
    destinations = status.get("broker", {}).get("destinations", {})
    left = sum(int(d.get("depth") or 0) + int(d.get("in_flight") or 0) for d in destinations.values())
    return {"state": "drained" if left == 0 else "draining", "to": [str(g) for g in cluster["draining"]],
            "moved": int(cluster.get("drained") or 0), "left": left}


def _post_change(admin: str, path: str, body: bytes, authorization: str | None,
                 tls: tuple[ssl.SSLContext, bytes] | None) -> Answer:
    """One POST of a change to the leader's admin API: (status, content type, body). Over TLS
    the leader must present the group's certificate (a pin: every member has it)."""
    host, port = split_address(admin)  # "[::1]:8161" too
    headers = {"Content-Type": JSON, FORWARDED_HEADER: "1"}
    if authorization:
        headers["Authorization"] = authorization
    connection = member_connection(host, port, FORWARD_TIMEOUT, tls)
    try:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or JSON, response.read()
    finally:
        connection.close()


def _member_view(health: dict[str, Any]) -> dict[str, Any]:
    return {"node": health.get("node"), "role": health.get("role"), "health": health.get("status")}


async def _health(admin: str | None, tls: bool) -> dict[str, Any]:
    """A member's /health answer, or {} when it does not answer in time. `tls`: this node's
    admin port speaks TLS, and so do the cluster's others (no certificate is checked: /health
    is what any prober may read)."""
    if not admin:
        return {}
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        host, port = split_address(admin)  # "[::1]:8161" too
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), HEALTH_TIMEOUT)
    except (OSError, TimeoutError, ValueError):
        return {"status": "unreachable"}
    try:
        # Host: the name it is configured by (its admin port answers only the names it is known by)
        writer.write(f"GET /health HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n".encode("latin-1", "replace"))
        data = await asyncio.wait_for(reader.read(65536), HEALTH_TIMEOUT)
        answer = json.loads(data.partition(b"\r\n\r\n")[2] or b"{}")
        return answer if isinstance(answer, dict) else {}
    except (OSError, TimeoutError, ValueError):
        return {"status": "unreachable"}
    finally:
        writer.close()
