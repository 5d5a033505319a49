"""A raftmq group of real `raftmq node` processes on free loopback ports, for the bench scripts.

    with NodeGroup.create(size=3) as group:       # temp dir, config, three processes
        group.start_all()
        leader = group.find_leader()              # by STOMP CONNECT, as a client would
        group.kill9(leader); group.restart(leader); group.wait_live()

The group file is the repository's `configs/group.toml` (so the benchmarks run the shipped,
tuned defaults) with the data directory and every address replaced. Processes are tracked by
pid and stopped by pid when the `with` block ends, however it ends (exception, Ctrl-C, SIGTERM
turned into `Interrupted` by `install_signal_handlers`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from raftmq import processes
from raftmq.client import connect
from raftmq.errors import BrokerRefused, ClientError
from raftmq.processes import free_ports
from raftmq.protocol.frame import REDIRECT_HEADER

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = REPO_ROOT / "configs" / "group.toml"
STOP_GRACE_SECONDS = 10.0
PROBE_TIMEOUT_SECONDS = 2.0
STATUS_TIMEOUT_SECONDS = 1.0


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) arrived: unwind like Ctrl-C, so `finally` blocks stop what we started."""


def install_signal_handlers() -> None:
    """Make SIGTERM / SIGHUP raise `Interrupted` in the main thread (Ctrl-C already raises
    KeyboardInterrupt), so cleanup code runs on every way out."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(f"stopped by signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
    # A shell starts background jobs with SIGINT ignored; we still want Ctrl-C / kill -INT.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def rss_kib(pid: int) -> int | None:
    """VmRSS of a live process in KiB (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def toml_dumps(document: dict[str, Any]) -> str:
    """Enough TOML for a group file: scalars, tables, arrays of tables (one level deep)."""
    lines: list[str] = []
    for key, value in document.items():
        if not isinstance(value, (dict, list)):
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in document.items():
        if isinstance(value, dict):
            lines.append(f"\n[{key}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in value.items())
        elif isinstance(value, list):
            for item in value:
                lines.append(f"\n[[{key}]]")
                lines.extend(f"{k} = {_toml_value(v)}" for k, v in item.items())
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"  # websocket_origins, host_names, ...
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


@dataclass
class MemberProcess:
    id: str
    client: tuple[str, int]
    raft: tuple[str, int]
    admin: tuple[str, int]
    mqtt: tuple[str, int] | None = None
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def client_url(self) -> str:
        return f"stomp://{self.client[0]}:{self.client[1]}"


class NodeGroup:
    def __init__(self, root: Path, members: list[MemberProcess], config_path: Path, owns_root: bool) -> None:
        self.root = root
        self.members = {m.id: m for m in members}
        self.config_path = config_path
        self._owns_root = owns_root
        self.keep_files = not owns_root  # a temp dir we made is deleted on close unless set

    @classmethod
    def create(
        cls,
        size: int = 3,
        root: Path | None = None,
        template: Path = TEMPLATE,
        overrides: dict[str, dict[str, Any]] | None = None,
        mqtt: bool = False,
    ) -> NodeGroup:
        """Write a group file for `size` members on free ports under `root` (a new temp dir
        by default, deleted on close); `overrides` patch tables, e.g. {"raft": {...}}; `mqtt`:
        each member listens for MQTT too."""
        owns_root = root is None
        root = Path(tempfile.mkdtemp(prefix="raftmq-bench-")) if root is None else root
        root.mkdir(parents=True, exist_ok=True)
        document = tomllib.loads(template.read_text(encoding="utf-8"))
        ports = free_ports(4 * size)
        members = [
            MemberProcess(f"n{i + 1}", ("127.0.0.1", ports[4 * i]), ("127.0.0.1", ports[4 * i + 1]),
                          ("127.0.0.1", ports[4 * i + 2]), ("127.0.0.1", ports[4 * i + 3]) if mqtt else None)
            for i in range(size)
        ]
        document["group"] = {**document.get("group", {}), "data_dir": str(root / "data")}
        for table, values in (overrides or {}).items():
            document[table] = {**document.get(table, {}), **values}
        document["node"] = [
            {"id": m.id, "client": _addr(m.client), "raft": _addr(m.raft), "admin": _addr(m.admin),
             **({"mqtt": _addr(m.mqtt)} if m.mqtt else {})} for m in members
        ]
        config_path = root / "group.toml"
        config_path.write_text(toml_dumps(document), encoding="utf-8")
        return cls(root, members, config_path, owns_root)

    # -- processes --------------------------------------------------------------------------
    def start(self, node_id: str) -> None:
        member = self.members[node_id]
        if member.alive:
            raise RuntimeError(f"{node_id} is already running (pid {member.pid})")
        member.starts += 1
        # Own session: a Ctrl-C in the terminal reaches only this script, which then measures
        # what it needs and stops the nodes itself.
        member.process = processes.spawn(
            [sys.executable, "-m", "raftmq", "node", "--config", str(self.config_path), "--node", node_id],
            self.root / f"{node_id}.log", append=True, cwd=self.root, new_session=True,
        )

    def start_all(self, timeout: float = 30.0) -> str:
        """Start every member; return the leader's id once one serves clients."""
        for node_id in self.members:
            self.start(node_id)
        return self.find_leader(timeout)

    def kill9(self, node_id: str) -> None:
        member = self.members[node_id]
        if member.process is not None:
            processes.kill(member.process, STOP_GRACE_SECONDS)

    def restart(self, node_id: str) -> None:
        member = self.members[node_id]
        if member.alive:
            self.kill9(node_id)
        self.start(node_id)

    def stop(self, node_id: str) -> None:
        """SIGTERM, then SIGKILL after a grace period; by pid, never by name."""
        member = self.members[node_id]
        process = member.process
        if process is not None:
            processes.terminate(process, STOP_GRACE_SECONDS)

    def stop_all(self) -> None:
        for member in self.members.values():
            if member.alive:
                member.process.terminate()  # type: ignore[union-attr]
        for node_id in self.members:
            self.stop(node_id)

    def close(self) -> None:
        self.stop_all()
        if not self.keep_files:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> NodeGroup:
        return self

    def __exit__(self, exc_type: object, *_rest: object) -> None:
        # Keep logs and data when something went wrong (not on Ctrl-C): they explain it.
        if isinstance(exc_type, type) and not issubclass(exc_type, KeyboardInterrupt):
            self.keep_files = True
        self.close()

    def rss(self) -> dict[str, int | None]:
        return {node_id: (rss_kib(m.pid) if m.alive and m.pid else None) for node_id, m in self.members.items()}

    def check_alive(self) -> None:
        """Raise with the log tail when a member that should run has exited."""
        for node_id, member in self.members.items():
            if member.process is not None and member.process.poll() is not None:
                raise RuntimeError(
                    f"node {node_id} exited with code {member.process.returncode}; log tail:\n{self.log_tail(node_id)}"
                )

    def log_tail(self, node_id: str, lines: int = 20) -> str:
        path = self.root / f"{node_id}.log"
        try:
            return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- finding the leader -----------------------------------------------------------------
    def find_leader(self, timeout: float = 30.0, exclude: tuple[str, ...] = ()) -> str:
        """The member that accepts a STOMP CONNECT that asks followers for the redirect (they
        refuse it with `not the leader`)."""
        deadline = time.monotonic() + timeout
        while True:
            live = [m for m in self.members.values() if m.alive and m.id not in exclude]
            accepting = [m.id for m in live if asyncio.run(_accepts_connect(m.client))]
            if len(accepting) == 1:  # two during a hand-over: ask again
                return accepting[0]
            self.check_alive()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no member accepted a CONNECT within {timeout:g} s")
            time.sleep(0.05)

    def status(self, node_id: str) -> dict[str, Any] | None:
        """The member's admin `/status`, or None when it does not answer."""
        host, port = self.members[node_id].admin
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=STATUS_TIMEOUT_SECONDS) as answer:
                return json.loads(answer.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def wait_live(self, timeout: float = 60.0) -> dict[str, Any]:
        """Until every member answers, they agree on one leader, and each has applied what
        the leader had committed when the wait began (a restarted member has caught up)."""
        deadline = time.monotonic() + timeout
        target: int | None = None
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self.check_alive()
            statuses = {node_id: self.status(node_id) for node_id in self.members}
            last = statuses
            if all(s is not None and "raft" in s for s in statuses.values()):
                leaders = [s for s in statuses.values() if s["raft"]["is_leader"]]  # type: ignore[index]
                if len(leaders) == 1:
                    leader_raft = leaders[0]["raft"]["node"]
                    if target is None:
                        target = leaders[0]["raft"]["commit_index"]
                    if all(
                        s["raft"]["leader"] == leader_raft  # type: ignore[index]
                        and s["raft"]["last_applied"] >= target  # type: ignore[index]
                        for s in statuses.values()
                    ):
                        return {"leader": leaders[0]["node"], "term": leaders[0]["raft"]["term"],
                                "caught_up_to": target}
            time.sleep(0.05)
        summary = {k: (None if s is None else {"role": s.get("role"), "raft": s.get("raft")}) for k, s in last.items()}
        raise TimeoutError(f"group not live with {len(self.members)} members within {timeout:g} s: {summary}")

    def failover_url(self, options: str = "") -> str:
        hosts = ",".join(m.client_url for m in self.members.values())
        return f"failover:({hosts})" + (f"?{options}" if options else "")


def _addr(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


async def _accepts_connect(address: tuple[str, int]) -> bool:
    try:
        # Asking for the redirect: a follower would otherwise relay the probe to the leader.
        client = await connect(address[0], address[1], timeout=PROBE_TIMEOUT_SECONDS,
                               headers=[(REDIRECT_HEADER, "true")])
    except BrokerRefused:
        return False  # `not the leader` (or not ready): a follower
    except (ClientError, OSError, TimeoutError):
        return False
    try:
        await client.disconnect(timeout=PROBE_TIMEOUT_SECONDS)
    except (ClientError, OSError, TimeoutError):
        pass
    return True


def write_loopback_group(checkout: Path, target: Path) -> str:
    """`target`: CHECKOUT's configs/group.toml with its data_dir beside `target` and every member
    on free loopback ports; returns the group's failover URL (bench/send_path.sh, idle_cpu.sh)."""
    document = tomllib.loads((checkout / "configs" / "group.toml").read_text())
    ports = free_ports(9)
    document["group"] = {**document["group"], "data_dir": str(target.parent.resolve() / "g1")}
    document["node"] = [{"id": f"n{i + 1}", "client": f"127.0.0.1:{ports[3 * i]}",
                         "raft": f"127.0.0.1:{ports[3 * i + 1]}", "admin": f"127.0.0.1:{ports[3 * i + 2]}"}
                        for i in range(3)]
    target.write_text(toml_dumps(document))
    return "failover:(" + ",".join(f"stomp://127.0.0.1:{ports[3 * i]}" for i in range(3)) + ")"


if __name__ == "__main__":  # python bench/node_group.py CHECKOUT: writes ./g1.toml, prints the URL
    print(write_loopback_group(Path(sys.argv[1]), Path("g1.toml")))
