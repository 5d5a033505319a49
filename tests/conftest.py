"""Fixtures shared by every test package: a real single-node broker process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _keep_bytecode() -> None:
    """Where the environment says PYTHONDONTWRITEBYTECODE, each of the suite's processes (its
    workers and the hundreds of nodes and commands they start) would compile every module it
    imports anew, and each worker rewrite the asserts of every test module anew (7 s of CPU each
    here). The suite keeps that bytecode instead, outside the source folders (.pytest_cache/),
    for itself and for the processes it starts, which inherit the environment."""
    if not os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        return
    prefix = str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "bytecode")
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


_keep_bytecode()  # before the imports below, and before any test module is collected
# A single `raftmq node` opens its admin port on the fixed 127.0.0.1:8160 unless told otherwise:
# the suite's nodes (and the processes they start) open none unless a test asks for one.
os.environ.setdefault("RAFTMQ_ADMIN", "off")

from raftmq import processes  # noqa: E402
from raftmq.logs import log_through_stdlib_if_unconfigured  # noqa: E402
from tests.helpers.worker_groups import START_EARLY, worker_group  # noqa: E402

READY_PREFIX = "raftmq node listening on "


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Each group of WORKER_GROUPS is one scope (one worker, in order); every other test
        is a scope of its own, so they spread as with plain `load`. Scopes are handed out
        largest first (the groups, then the singles in collection order)."""

        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid) or nodeid

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (every worker collects the same order), START_EARLY's tests first;
    each module's tests stay together and in order."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        items.sort(key=lambda item: not item.nodeid.startswith(START_EARLY))


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker picks free ports (processes.free_ports) from a slice of the range of
    its own, so one worker never picks a port the other has just picked and released (seen as
    "address already in use" when a node restarted on its port). The slice goes to the
    processes a worker starts too, through the environment."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    index, count = int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    low, high = processes.split_port_range(*processes.port_range(), index, count)
    os.environ[processes.PORT_RANGE_ENV] = processes.format_port_range(low, high)


class UnmarkedIntegration(RuntimeError):
    """A test without the `integration` marker opened a network socket or started a process."""


class UngroupedNamespaces(RuntimeError):
    """A chaos test outside the `netns` group of WORKER_GROUPS created a namespace network."""


@pytest.fixture(autouse=True)
def _pure_tests_stay_pure(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked `integration` may not bind or connect a network socket nor start a
    process, so `pytest -m "not integration"` is truly the fast, pure part of the suite and the
    marker cannot silently go missing."""
    if request.node.get_closest_marker("integration") is not None:
        return
    where = request.node.nodeid

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise UnmarkedIntegration(f"{where}: {what} in a test not marked integration")

        return refused

    for method in ("bind", "connect", "connect_ex", "listen"):
        original = getattr(socket.socket, method)

        def guarded(self: socket.socket, *args: Any, _original: Any = original, _method: str = method) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                raise UnmarkedIntegration(f"{where}: socket.{_method} in a test not marked integration")
            return _original(self, *args)

        monkeypatch.setattr(socket.socket, method, guarded)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("starting a process"))


@pytest.fixture(autouse=True)
def _namespaces_only_in_their_group(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chaos test outside the `netns` group of WORKER_GROUPS may not create a namespace
    network: it would run beside the group's tests, on the same bridge subnets."""
    where = request.node.nodeid
    if not where.startswith("tests/chaos/") or worker_group(where) == "netns":
        return
    from chaos import netns

    def refused(self: Any) -> None:
        raise UngroupedNamespaces(f"{where}: creates a network namespace outside the netns group of WORKER_GROUPS")

    monkeypatch.setattr(netns.Network, "create", refused)


@pytest.fixture(autouse=True)
def _close_raw_clients() -> Iterator[None]:
    """Sockets a test's hand-written STOMP clients left open are closed when it ends (an unclosed
    socket is a ResourceWarning, and warnings are errors here)."""
    yield
    stomp_raw = sys.modules.get("tests.helpers.stomp_raw")
    if stomp_raw is not None:
        stomp_raw.RawClient.close_all()


@pytest.fixture(autouse=True)
def _in_process_nodes_log_through_logging() -> None:
    """In-process nodes (and a test that reset structlog) log through the logging module, which
    pytest captures per test, never with structlog's default print from a node's loop thread."""
    log_through_stdlib_if_unconfigured()
READY_TIMEOUT = 20.0


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(host, port) of a real raftmq node subprocess, killed by pid at teardown.

    RAFTMQ_TEST_STOMP=HOST:PORT points the tests at another broker instead (used to check the
    client against ActiveMQ by hand).
    """
    external = os.environ.get("RAFTMQ_TEST_STOMP")
    if external:
        host, _, port = external.rpartition(":")
        yield host, int(port)
        return
    port = processes.free_port()
    logs = tmp_path_factory.mktemp("node")
    stdout_path, stderr_path = logs / "stdout", logs / "stderr"
    # The default node is durable: its .raftmq/ lands in the test's temp dir (cwd).
    proc = processes.spawn([sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--listen", f"127.0.0.1:{port}"],
                           stdout_path, stderr_path, cwd=logs)
    try:
        processes.wait_for_line(proc, stdout_path, f"{READY_PREFIX}127.0.0.1:{port}", READY_TIMEOUT, errors=stderr_path)
        yield "127.0.0.1", port
    finally:
        processes.kill(proc)
