"""The node: a STOMP listener in front of one broker core, joined by the commit log.

Sessions append commands to the `CommitLog`; the log calls `Node.on_commit` with committed
commands in order; the node applies each to the `Broker` and executes the effects on the
sessions of this node (effects for sessions that are elsewhere or gone are dropped: the
Disconnect a closing session appends returns its deliveries to their queues).

`serve(config)` is the foreground entry point the CLI calls: it runs a `Node` until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

import structlog

from raftmq.config import NodeConfig
from raftmq.core.broker import Broker
from raftmq.core.commands import Command, Connect, Disconnect, Tick
from raftmq.core.effects import Deliver, Receipt, SessionError
from raftmq.server.log import CommitLog, InMemoryLog
from raftmq.server.session import Session

log = structlog.get_logger("raftmq.server.node")

# How long a stopping node waits for the Disconnects of its closed sessions to commit.
STOP_DRAIN_SECONDS = 2.0


class Node:
    """One broker node; in-process usable: `await node.start()`, `node.address`, `await node.stop()`."""

    def __init__(self, config: NodeConfig, commit_log: CommitLog | None = None, *, name: str | None = None) -> None:
        self.config = config
        self.commit_log = commit_log if commit_log is not None else InMemoryLog()
        self.broker = Broker(config.core)
        self.name = name or config.name
        self.sessions: dict[str, Session] = {}
        self._boot = secrets.token_hex(4)  # session ids stay unique across restarts
        self._session_numbers = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._address: tuple[str, int] | None = None
        self._stopping = False
        self.apply_failures = 0  # commands the core raised on (a bug; logged and skipped)
        self.internal_errors = 0  # connections closed because handling their input raised

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "node not started"
        return self._loop

    @property
    def address(self) -> tuple[str, int]:
        assert self._address is not None, "node not started"
        return self._address

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.commit_log.start(self.on_commit)
        self._server = await self._loop.create_server(
            self._new_session, self.config.host, self.config.port, reuse_address=True, backlog=1024
        )
        sockname = self._server.sockets[0].getsockname()
        self._address = (sockname[0], sockname[1])
        if self.config.tick_interval_ms > 0:
            self._tick_task = self._loop.create_task(self._tick_forever())
        log.info("node.started", node=self.name, host=self._address[0], port=self._address[1])

    async def stop(self) -> None:
        """Stop accepting, tell every client the broker is shutting down, let their
        Disconnects commit (bounded), then stop the log."""
        if self._stopping or self._loop is None:
            return
        self._stopping = True
        if self._server is not None:
            self._server.close()
        if self._tick_task is not None:
            self._tick_task.cancel()
            try:
                await self._tick_task
            except asyncio.CancelledError:
                pass
        for session in list(self.sessions.values()):
            session.shutdown()
        deadline = self.loop.time() + STOP_DRAIN_SECONDS
        while self.sessions and self.loop.time() < deadline:
            await asyncio.sleep(0.01)  # closing transports flush, then call connection_lost
        for session in list(self.sessions.values()):
            session.abort()  # a client that does not read is not waited for
        await asyncio.sleep(0)
        # An empty append completes after everything appended before it (the Disconnects).
        drain = self.commit_log.append([])
        try:
            await asyncio.wait_for(drain, max(0.1, deadline - self.loop.time()))
        except Exception:
            pass
        await self.commit_log.stop()
        log.info("node.stopped", node=self.name)

    def _new_session(self) -> Session:
        session_id = f"{self.name}:{self._boot}:{next(self._session_numbers)}"
        session = Session(self, session_id)
        self.sessions[session_id] = session
        return session

    def session_closed(self, session: Session) -> None:
        self.sessions.pop(session.session_id, None)

    def on_commit(self, commands: Sequence[Command]) -> None:
        """Apply committed commands in order and execute their effects on local sessions."""
        apply = self.broker.apply
        sessions = self.sessions
        for command in commands:
            try:
                effects = apply(command)
            except Exception:
                # A core bug must not stop the node; the command is logged and skipped.
                self.apply_failures += 1
                log.exception("broker.apply_failed", command=type(command).__name__)
                continue
            for effect in effects:
                session = sessions.get(effect.session)
                if session is None:
                    continue
                kind = type(effect)
                if kind is Deliver:
                    session.deliver(effect)  # type: ignore[arg-type]
                elif kind is Receipt:
                    session.receipt(effect.receipt_id)  # type: ignore[union-attr]
                elif kind is SessionError:
                    session.fail(
                        effect.message,  # type: ignore[union-attr]
                        effect.detail,  # type: ignore[union-attr]
                        effect.receipt_id,  # type: ignore[union-attr]
                        wait_for_log=False,
                    )
            kind = type(command)
            if kind is Connect or kind is Disconnect:
                session = sessions.get(command.session)  # type: ignore[union-attr]
                if session is not None:
                    if kind is Connect:
                        session.connect_committed()
                    else:
                        session.disconnect_committed()

    async def _tick_forever(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self.commit_log.is_leader:
                future = self.commit_log.append([Tick(int(time.time() * 1000))])
                future.add_done_callback(_ignore_outcome)

    def stats(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "apply_failures": self.apply_failures,
            "internal_errors": self.internal_errors,
            "broker": self.broker.stats(),
        }


def _ignore_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _configure_logging() -> None:
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"], sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _run(config: NodeConfig) -> None:
    node = Node(config)
    try:
        await node.start()
    except OSError as exc:
        log.error("node.start_failed", host=config.host, port=config.port, error=str(exc))
        raise SystemExit(f"raftmq node: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, port = node.address
    print(f"raftmq node listening on {host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("node.stopping", node=node.name)
        await node.stop()


def serve(config: NodeConfig) -> None:
    """Run a node in the foreground until SIGINT/SIGTERM."""
    _configure_logging()
    with asyncio.Runner(loop_factory=_new_event_loop) as runner:
        runner.run(_run(config))
