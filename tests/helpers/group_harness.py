"""Real group members for the fault tests: `python -m raftmq node --config <group toml> --node ID`
on free 127.0.0.1 ports, observed through their admin `/status`, killed by pid."""

from __future__ import annotations

import asyncio
import json
import queue
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import stomp

from raftmq import processes
from raftmq.client import StompClient, connect
from raftmq.client.admin import AdminAccess, with_scheme
from raftmq.errors import BrokerRefused, ClientError
from raftmq.processes import free_ports
from raftmq.protocol.frame import REDIRECT_HEADER
from tests.helpers.stomp_raw import stomp_connection

# A bound, not a wait: a node is ready in a second or two; under a full suite on two cores one
# group member once printed nothing for 20 s (its stderr empty), so the bound is wider.
READY_TIMEOUT = 40.0
REDIRECT = [(REDIRECT_HEADER, "true")]  # CONNECT headers: a follower redirects instead of relaying
READY_LINE = "raftmq node listening on "


class Member:
    def __init__(self, node_id: str, client: int, raft: int, admin: int, log_dir: Path, host: str = "127.0.0.1",
                 group: str = "test") -> None:
        self.id = node_id
        self.host = host
        self.client_port, self.raft_port, self.admin_port = client, raft, admin
        self.mqtt_port: int | None = None  # with Group(mqtt=True)
        prefix = "" if group == "test" else f"{group}-"
        self.stdout_path = log_dir / f"{prefix}{node_id}.stdout"
        self.stderr_path = log_dir / f"{prefix}{node_id}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def client(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""


class Group:
    """A group of `size` members described by a TOML file in `tmp_path`. `raft` and `journal`
    override keys of those tables."""

    def __init__(self, tmp_path: Path, size: int = 3, raft: dict[str, Any] | None = None,
                 journal: dict[str, Any] | None = None, server: dict[str, Any] | None = None,
                 hosts: list[str] | None = None, name: str = "test", core: dict[str, Any] | None = None,
                 mqtt: bool = False) -> None:
        self.dir = tmp_path
        self.name = name
        self.data_dir = tmp_path / ("data" if name == "test" else f"data-{name}")
        self.extra_args: list[str] = []  # appended to every member's command line (a cluster's --topology)
        # How status() reaches the admin ports: the CA and login a test with [tls] / [[user]]s sets.
        self.admin_access = AdminAccess()
        ports = free_ports(3 * size)
        hosts = hosts or ["127.0.0.1"] * size  # one loopback address per member lets a test cut one off
        self.members = {
            f"n{i + 1}": Member(f"n{i + 1}", ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], tmp_path, hosts[i], name)
            for i in range(size)
        }
        lines = ["[group]", f'name = "{name}"', f'data_dir = "{self.data_dir}"']
        for table, values in (("raft", raft), ("journal", journal), ("server", server), ("core", core)):
            if values:
                lines.append(f"[{table}]")
                lines.extend(f"{key} = {_toml(value)}" for key, value in values.items())
        mqtt_ports = free_ports(size) if mqtt else []
        for i, member in enumerate(self.members.values()):
            lines += ["[[node]]", f'id = "{member.id}"', f'client = "{member.client}"',
                      f'raft = "{member.host}:{member.raft_port}"', f'admin = "{member.host}:{member.admin_port}"']
            if mqtt:
                member.mqtt_port = mqtt_ports[i]
                lines.append(f'mqtt = "{member.host}:{member.mqtt_port}"')
        self.config_path = tmp_path / ("group.toml" if name == "test" else f"{name}.toml")
        self.config_path.write_text("\n".join(lines) + "\n")

    # -- processes ---------------------------------------------------------------------------

    def start(self, *node_ids: str, wait: bool = True) -> None:
        ids = node_ids or tuple(self.members)
        for node_id in ids:
            member = self.members[node_id]
            assert not member.alive, f"{node_id} is running"
            member.proc = processes.spawn(
                [sys.executable, "-m", "raftmq", "node", "--config", str(self.config_path), "--node", node_id,
                 *self.extra_args],
                member.stdout_path, member.stderr_path,
            )
        if wait:
            for node_id in ids:
                self.wait_ready(node_id)

    def wait_ready(self, node_id: str) -> None:
        member = self.members[node_id]
        assert member.proc is not None
        processes.wait_for_line(member.proc, member.stdout_path, READY_LINE, READY_TIMEOUT, errors=member.stderr_path)

    def signal(self, node_id: str, sig: int) -> None:
        member = self.members[node_id]
        assert member.proc is not None
        processes.send_signal(member.proc.pid, signal.Signals(sig))

    def kill(self, node_id: str) -> None:
        member = self.members[node_id]
        if member.proc is not None:
            processes.kill(member.proc)

    def wait_exit(self, node_id: str, timeout: float = 15.0) -> int:
        member = self.members[node_id]
        assert member.proc is not None
        return member.proc.wait(timeout=timeout)

    def close(self) -> None:
        for node_id in self.members:
            self.kill(node_id)  # SIGCONT first: a paused member dies at once

    # -- observation -----------------------------------------------------------------------

    def status(self, node_id: str, verify: bool = False, timeout: float = 2.0) -> dict[str, Any] | None:
        member = self.members[node_id]
        tls = "\n[tls]" in self.config_path.read_text()  # its admin ports speak HTTPS only
        admin = with_scheme(f"{member.host}:{member.admin_port}", tls)
        try:
            code, data = self.admin_access.request(admin, "/status" + ("?verify=1" if verify else ""), timeout)
            answer = json.loads(data) if code == 200 else None
        except (OSError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    def leader(self, among: tuple[str, ...] | None = None, timeout: float = 10.0) -> str:
        """The member every live member (of `among`) agrees leads, in one term."""
        ids = among or tuple(i for i, m in self.members.items() if m.alive)
        deadline = time.monotonic() + timeout
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline:
            seen = {node_id: self.status(node_id, timeout=0.5) for node_id in ids}
            leaders = [i for i, s in seen.items() if s and s["role"] == "leader"]
            if len(leaders) == 1 and all(s is not None for s in seen.values()):
                leader = self.members[leaders[0]].client
                terms = {s["term"] for s in seen.values() if s}
                if len(terms) == 1 and all(s["leader"] == leader for i, s in seen.items() if i != leaders[0] and s):
                    return leaders[0]
            time.sleep(0.05)
        raise AssertionError(f"no single leader among {ids} within {timeout}s: {seen}")

    def wait_applied(self, node_id: str, index: int, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = self.status(node_id)
            if status and status["applied_index"] >= index:
                return status
            time.sleep(0.05)
        raise AssertionError(f"{node_id} did not apply index {index} within {timeout}s: {status}")

    def client_addresses(self) -> list[tuple[str, int]]:
        return [(m.host, m.client_port) for m in self.members.values()]


async def connect_leader(addresses: list[tuple[str, int]], timeout: float = 15.0, resume: bool = True) -> StompClient:
    """Connect to whichever member leads: follow a refusal's `leader` header, else try the next.
    Followers are asked for the redirect (they would relay the session to the leader). `resume`:
    the client carries its session on when its node goes (raftmq.client.resume)."""
    deadline = time.monotonic() + timeout
    candidates = list(addresses)
    turn = 0
    last: Exception | None = None
    while time.monotonic() < deadline:
        host, port = candidates[turn % len(candidates)]
        turn += 1
        try:
            return await connect(host, port, timeout=2.0, headers=REDIRECT, resume=resume)
        except BrokerRefused as exc:
            last = exc
            leader = exc.headers.get("leader")
            if leader:
                lhost, _, lport = leader.rpartition(":")
                try:
                    return await connect(lhost, int(lport), timeout=2.0, headers=REDIRECT, resume=resume)
                except ClientError as again:
                    last = again
        except ClientError as exc:
            last = exc
        await asyncio.sleep(0.05)
    raise AssertionError(f"no leader accepted a connection within {timeout}s: {last!r}")


async def drain_queue(addresses: list[tuple[str, int]], destination: str, idle: float = 1.5,
                      timeout: float = 30.0) -> list[tuple[str, bytes, dict[str, str]]]:
    """Consume (client-individual, each acked) until nothing arrives for `idle` s.
    Returns (dupl id, body, headers) per MESSAGE."""
    client = await connect_leader(addresses)
    got: list[tuple[str, bytes, dict[str, str]]] = []

    last_arrival = time.monotonic()

    def on_message(frame: Any) -> None:
        nonlocal last_arrival
        last_arrival = time.monotonic()
        headers = frame.header_dict()
        got.append((headers.get("_AMQ_DUPL_ID", ""), frame.body, headers))
        client.ack_nowait(frame)

    deadline = time.monotonic() + timeout
    try:
        subscription = client.subscribe(destination, ack="client-individual", prefetch=500, callback=on_message,
                                        receipt=True)
        assert subscription.receipt is not None
        await asyncio.wait_for(subscription.receipt, 5)
        last_arrival = time.monotonic()
        while time.monotonic() - last_arrival < idle and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await client.disconnect(timeout=5)  # its RECEIPT: every ACK before it was applied
    finally:
        if not client.is_closed:
            client._transport.abort(ClientError("drain done"))
    return got


def body_for(message_id: str, size: int = 256) -> bytes:
    """A body that names its message, then pseudo-random bytes lz4 cannot shrink."""
    head = f"{message_id}:".encode()
    return head + random.Random(message_id).randbytes(max(0, size - len(head)))


class Producer:
    """Streams `count` messages stamped with `_AMQ_DUPL_ID`, `window` receipts in flight, with
    our asyncio client. When the connection fails it connects to the (new) leader and resends
    every message without a receipt, in order. `receipted` holds what the broker confirmed."""

    def __init__(self, addresses: list[tuple[str, int]], destination: str, prefix: str, count: int,
                 window: int = 20, size: int = 256) -> None:
        self.addresses, self.destination, self.size, self.window = addresses, destination, size, window
        self.ids = [f"{prefix}-{i}" for i in range(count)]
        self.receipted: set[str] = set()
        self.reconnects = 0
        self.errors: list[str] = []
        self.stopped = False

    async def run(self, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.stopped and len(self.receipted) < len(self.ids) and time.monotonic() < deadline:
            try:
                client = await connect_leader(self.addresses, timeout=max(1.0, deadline - time.monotonic()))
            except AssertionError as exc:
                self.errors.append(str(exc))
                continue
            try:
                await self._stream(client, deadline)
            except (ClientError, BrokerRefused) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.reconnects += 1
            finally:
                if not client.is_closed:
                    client._transport.abort(ClientError("producer done"))

    async def _stream(self, client: StompClient, deadline: float) -> None:
        waiting = [i for i in self.ids if i not in self.receipted]
        in_flight: dict[str, asyncio.Future[Any]] = {}
        position = 0
        while (position < len(waiting) or in_flight) and not self.stopped and time.monotonic() < deadline:
            while position < len(waiting) and len(in_flight) < self.window:
                message_id = waiting[position]
                position += 1
                headers = [("_AMQ_DUPL_ID", message_id), ("persistent", "true")]
                future = client.send_nowait(self.destination, body_for(message_id, self.size), headers, receipt=True)
                assert future is not None
                in_flight[message_id] = future
            await asyncio.wait(list(in_flight.values()), timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            for message_id, future in list(in_flight.items()):
                if future.done():
                    del in_flight[message_id]
                    error = future.exception()
                    if error is not None:
                        raise error  # this connection is done: reconnect and resend the rest
                    self.receipted.add(message_id)


class StompPyProducer:
    """The same contract with stomp-py (an independent client), one receipt at a time, in a thread."""

    def __init__(self, addresses: list[tuple[str, int]], destination: str, prefix: str, count: int, size: int = 256,
                 headers: dict[str, str] | None = None) -> None:
        self.addresses, self.destination, self.size = addresses, destination, size
        self.headers = headers or {}
        self.ids = [f"{prefix}-{i}" for i in range(count)]
        self.receipted: set[str] = set()
        self.reconnects = 0
        self.errors: list[str] = []
        self.stopped = False

    def run(self, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        position = 0
        while position < len(self.ids) and not self.stopped and time.monotonic() < deadline:
            conn, listener = self._connect_leader(deadline)
            if conn is None:
                continue
            try:
                while position < len(self.ids) and not self.stopped and time.monotonic() < deadline:
                    message_id = self.ids[position]
                    conn.send(self.destination, body_for(message_id, self.size),
                              headers={**self.headers, "_AMQ_DUPL_ID": message_id, "persistent": "true"},
                              receipt=message_id)
                    if not self._await_receipt(listener, message_id, deadline):
                        self.reconnects += 1
                        break
                    self.receipted.add(message_id)
                    position += 1
            except stomp.exception.StompException as exc:
                self.errors.append(repr(exc))
                self.reconnects += 1
            finally:
                try:
                    conn.disconnect()
                except Exception:
                    pass

    def _await_receipt(self, listener: Any, message_id: str, deadline: float) -> bool:
        limit = min(deadline, time.monotonic() + 6.0)
        while time.monotonic() < limit:
            try:
                if listener.receipts.get(timeout=0.05) == message_id:
                    return True
            except queue.Empty:
                pass
            if not listener.errors.empty() or listener.disconnected.is_set():
                return False
        return False

    def _connect_leader(self, deadline: float) -> tuple[Any, Any]:
        turn = 0
        target: tuple[str, int] | None = None
        while time.monotonic() < deadline and not self.stopped:
            address = target or self.addresses[turn % len(self.addresses)]
            turn += 1
            target = None
            conn, listener = stomp_connection(address)
            try:
                conn.connect(wait=False)
            except stomp.exception.StompException:
                time.sleep(0.05)
                continue
            limit = time.monotonic() + 3.0
            while time.monotonic() < limit and not listener.connected.is_set() and listener.errors.empty():
                time.sleep(0.01)
            if listener.connected.is_set():
                return conn, listener
            if not listener.errors.empty():
                leader = listener.errors.get().headers.get("leader")
                if leader:
                    host, _, port = leader.rpartition(":")
                    target = (host, int(port))
            try:
                conn.disconnect()
            except Exception:
                pass
            time.sleep(0.05)
        return None, None


def _toml(value: Any) -> str:
    """A TOML value: Python's repr for scalars, inline tables for dicts ([[core.address]] as a list)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return repr(value)


def secured_group(tmp_path: Path, password: str, *, mqtt: bool = False) -> tuple[Group, str]:
    """A group with [tls] and one operator login, `ops` with `password`, allowed everything;
    returns it and its CA file."""
    from raftmq.passwords import hash_password
    from tests.helpers.tls_certs import make_certificates

    server, _client = make_certificates(tmp_path / "certs")
    group = Group(tmp_path, mqtt=mqtt)
    text = group.config_path.read_text()
    text += f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\n'
    text += f'[[user]]\nname = "ops"\npassword_hash = "{hash_password(password)}"\ngroups = ["ops"]\n'
    text += '[[acl]]\nqueue = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    text += '[[acl]]\ntopic = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    group.config_path.write_text(text)
    group.admin_access = AdminAccess(ca_file=str(server.ca), login="ops", passcode=password)
    return group, str(server.ca)
