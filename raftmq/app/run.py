"""Running one node in the foreground: the event loop, logging, descriptor limits, the
readiness line and the signals that stop it. `serve(config)` is what `raftmq node` runs for an
in-memory node; raftmq.app.group runs the members of a group.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
from collections.abc import Callable
from typing import Any

import structlog

from raftmq import compiled
from raftmq.config import NodeConfig
from raftmq.logs import configure_logging
from raftmq.server.gc_tuning import watch_gc_pauses
from raftmq.server.node import Node

log = structlog.get_logger("raftmq.app.run")

ReadyCallback = Callable[[str, int], None]  # (host, port), once the node serves clients


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one: every client costs a descriptor, and a
    1024 soft limit (the usual default) locks new clients out long before max_connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("node.fd_limit_unchanged", soft=soft, hard=hard, error=str(exc))
            return soft, hard
        log.info("node.fd_limit_raised", soft=soft, to=hard)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def setup_logging(who: str, log_file: str | os.PathLike[str] | None, log_level: str | None) -> None:
    """`configure_logging`, with a bad level or an unwritable log file a one-line error."""
    try:
        configure_logging(json_path=log_file, level=log_level)
    except ValueError as exc:
        raise SystemExit(f"{who}: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"{who}: cannot write the log file {log_file}: {exc.strerror or exc}") from None


def unbound(node: Node, client: str, mqtt: str | None, admin: str | None) -> str:
    """Which of a node's addresses it could not listen on, once its start raised OSError."""
    if node._server is None:
        return client
    if mqtt is not None and node.mqtt.server is None:
        return f"{mqtt} (MQTT: a single node takes --mqtt HOST:PORT or --mqtt off; a member its [[node]] mqtt)"
    return f"{admin} (admin)"


def announce_ready(node: Node, on_ready: ReadyCallback | None) -> None:
    """The node serves clients: log it and tell the caller (the CLI prints the readiness line
    `raftmq node listening on HOST:PORT` that scripts and `raftmq up` wait for)."""
    host, port = node.address
    log.info("node.listening", node=node.name, host=host, port=port, pid=os.getpid(), hot_modules=compiled.mode())
    if on_ready is not None:
        on_ready(host, port)


async def run_until_stopped(node: Node, on_ready: ReadyCallback | None) -> None:
    """Announce the started node, then wait for SIGINT / SIGTERM or for the node to fail."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    announce_ready(node, on_ready)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(node.failed.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def _run(config: NodeConfig, on_ready: ReadyCallback | None) -> None:
    watch_gc_pauses()
    node = Node(config)
    try:
        await node.start()
    except OSError as exc:
        where = unbound(node, f"{config.host}:{config.port}", config.mqtt, None)
        log.error("node.start_failed", address=where, error=str(exc))
        raise SystemExit(f"raftmq node: cannot listen on {where}: {exc.strerror or exc}") from None
    admin = await _start_admin(node)
    try:
        await run_until_stopped(node, on_ready)
    finally:
        log.info("node.stopping", node=node.name)
        if admin is not None:
            await admin.stop()
        await node.stop()


async def _start_admin(node: Node) -> Any:
    """The `admin` port of a single node (/status, /metrics, /health), if configured."""
    if node.config.admin is None:
        return None
    from raftmq.config import split_address
    from raftmq.server.admin.http import AdminServer
    from raftmq.server.admin.management import ManagementApi
    from raftmq.tls import admin_ssl_context

    host, port = split_address(node.config.admin)
    host = node.config.bind_host or host
    member: dict[str, str | None] = {"node": node.name, "client": f"{node.config.host}:{node.config.port}",
                                     "admin": node.config.admin}
    api = ManagementApi(node, lambda: [member])
    tls = node.config.security.tls
    admin = AdminServer(node.status, None, None, host, port, api=api, authenticate=api.authenticated,
                        ssl=None if tls is None else admin_ssl_context(tls),
                        hosts=node.known_names.with_names(node.config.admin), origins=node.config.admin_origins)
    try:
        await admin.start()
    except OSError as exc:
        await node.stop()
        raise SystemExit(f"raftmq node: cannot listen on {node.config.admin} (admin): {exc.strerror or exc}") from None
    return admin


def serve(
    config: NodeConfig,
    *,
    on_ready: ReadyCallback | None = None,
    log_file: str | os.PathLike[str] | None = None,
    log_level: str | None = None,
) -> None:
    """Run a node in the foreground until SIGINT/SIGTERM. Logs go to stderr, and as JSON lines
    to `log_file` if given; `log_level` None: `$RAFTMQ_LOG_LEVEL` or info."""
    setup_logging("raftmq node", log_file, log_level)
    raise_fd_limit()
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(_run(config, on_ready))
