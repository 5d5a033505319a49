"""The Raft port's listening socket (raftmq.replication.wire has the connections it accepts):
pysyncobj's `TcpServer` interface, on the same poller and tick thread."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import Any

import structlog
from pysyncobj.poller import POLL_EVENT_TYPE

from raftmq.replication.wire import MAX_UNAUTHENTICATED, RaftConnection, close_polled

log = structlog.get_logger("raftmq.replication.wire")


class RaftServer:
    """Accepts Raft connections (the interface TCPTransport uses of pysyncobj's TcpServer)."""

    def __init__(self, poller: Any, host: str, port: int, on_new_connection: Callable[[RaftConnection], None],
                 make_connection: Callable[[socket.socket], RaftConnection]) -> None:
        self._poller = poller
        self._address = (host, int(port))
        self._on_new_connection = on_new_connection
        self._make_connection = make_connection
        self._sock: socket.socket | None = None
        self._fileno: int | None = None

    def bind(self) -> None:
        family = socket.AF_INET6 if ":" in self._address[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setblocking(False)
            sock.bind(self._address)
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        self._sock, self._fileno = sock, sock.fileno()
        self._poller.subscribe(self._fileno, self._on_event, POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR)

    def unbind(self) -> None:
        self._sock, self._fileno = close_polled(self._poller, self._sock, self._fileno)

    def _on_event(self, descr: int, event: int) -> None:
        if self._sock is None:
            return
        for _ in range(MAX_UNAUTHENTICATED):  # bounded: a flood of connects cannot hold the tick
            try:
                sock, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("raft.accept_failed", error=exc.strerror)
                return
            self._on_new_connection(self._make_connection(sock))
