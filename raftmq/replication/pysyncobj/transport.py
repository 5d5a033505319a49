"""The transport of a hardened member: durable before it speaks, on our wire.

`DurableTransport` syncs the Raft journal before an append-entries answer or a vote leaves the
node, hands the pre-vote messages to the member, drops the entries a follower already holds
from a late append-entries, and builds its connections from raftmq.replication.wire.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Protocol

import structlog
from pysyncobj.transport import TCPTransport

from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.wire import MAX_UNAUTHENTICATED, RaftConnection, frame_max_for
from raftmq.replication.wire_server import RaftServer

log = structlog.get_logger("raftmq.replication.pysyncobj")


class TransportHost(Protocol):
    """What the transport hands a hardened member (`HardenedSyncObj`)."""

    durable_journal: RaftJournal
    answering_mark: float | None

    def make_durable(self) -> None: ...

    def outgoing(self, kind: str, message: dict[str, Any]) -> dict[str, Any]: ...

    def on_election_message(self, node: Any, message: dict[str, Any]) -> None: ...

    def ignores_vote_request(self, message: dict[str, Any]) -> bool: ...

    def on_answer(self, node: Any, message: dict[str, Any]) -> None: ...

    def on_append_entries(self, node: Any, message: dict[str, Any]) -> None: ...


_DURABLE_BEFORE_SENDING = frozenset({"next_node_idx", "response_vote", "request_vote"})
_ELECTION_MESSAGES = frozenset({"pre_vote", "pre_vote_response", "higher_term"})  # ours, never passed to pysyncobj


class DurableTransport(TCPTransport):
    """Syncs the journal before an append-entries response or a vote leaves this node. A
    follower answers once per append-entries message, so that is one fdatasync per message,
    covering every entry it carried. Its connections are ours (raftmq.replication.wire):
    authenticated by the group secret, encrypted, msgpack, bounded; pysyncobj's pickling
    TcpConnection and TcpServer are never built."""

    _refusals_logged_at = 0.0
    _refusals_unlogged = 0
    connection_class: type[RaftConnection] = RaftConnection

    def _createServer(self) -> None:
        host, port = self._listen_address().rsplit(":", 1)
        self._server = RaftServer(self._syncObj._poller, host, int(port), self._onNewIncomingConnection, self._accepted)

    def _connection(self, sock: Any = None, bind_host: str | None = None) -> RaftConnection:
        conf = self._syncObj.conf
        return self.connection_class(
            self._syncObj._poller, self._syncObj.wire_secret, timeout=conf.connectionTimeout, sock=sock,
            bind_host=bind_host, send_buffer=conf.sendBufferSize, recv_buffer=conf.recvBufferSize,
            frame_max=frame_max_for(conf.appendEntriesBatchSizeBytes), on_refused=self._refused,
            tls=getattr(self._syncObj, "raft_tls", None),
        )

    def _listen_address(self) -> str:
        """The configured address (HardenedSyncObj sets `bindAddress`): stock binds 0.0.0.0."""
        return str(self._syncObj.conf.bindAddress or self._selfNode.address)

    def _accepted(self, sock: Any) -> RaftConnection:
        return self._connection(sock=sock)

    def addNode(self, node: Any) -> None:
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if self._shouldConnect(node):
            own = self._syncObj.conf.bindAddress or self._selfNode.address
            conn = self._connection(bind_host=own.rsplit(":", 1)[0].strip("[]"))
            conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
            conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
            conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
            self._connections[node] = conn

    def _onNewIncomingConnection(self, conn: Any) -> None:
        if len(self._unknownConnections) >= MAX_UNAUTHENTICATED:
            self._refused(getattr(conn, "peer", "?"), "too many connections still in their handshake")
            conn.disconnect()
            return
        super()._onNewIncomingConnection(conn)

    def _onTick(self) -> None:
        super()._onTick()
        now = time.monotonic()
        for conn in [*self._unknownConnections, *self._connections.values()]:
            conn.check_deadlines(now)

    def next_deadline(self) -> float:
        """The first moment (time.monotonic) a tick has a connection to close or to open: a
        handshake or an answer overdue, or a peer to connect to again after the retry time."""
        due = min((conn.next_deadline() for conn in [*self._unknownConnections, *self._connections.values()]),
                  default=float("inf"))
        if any(not conn.authenticated and self._shouldConnect(node) for node, conn in self._connections.items()):
            due = min(due, time.monotonic() + self._syncObj.conf.connectionRetryTime)
        return due

    def _refused(self, peer: str, reason: str) -> None:
        # A stranger may hammer the port: one line per second at most, with what was skipped.
        now = time.monotonic()
        if now - self._refusals_logged_at < 1.0:
            self._refusals_unlogged += 1
            return
        log.warning("raft.peer_refused", peer=peer, reason=reason, more_refused=self._refusals_unlogged)
        self._refusals_logged_at, self._refusals_unlogged = now, 0

    def send(self, node: Any, message: Any) -> bool:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in _DURABLE_BEFORE_SENDING:
            self._syncObj.make_durable()
        if kind is not None:
            message = self._syncObj.outgoing(kind, message)
        return super().send(node, message)

    def _trim_known_entries(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """An append-entries less the entries this log already holds (`trim_known_entries`)."""
        return trim_known_entries(self._syncObj.durable_journal, message)

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if not isinstance(message, dict):
            return  # every Raft message is a dict; anything else is not for pysyncobj
        sync: TransportHost = self._syncObj
        kind = message.get("type")
        if kind in _ELECTION_MESSAGES:
            sync.on_election_message(node, message)
            return
        if kind == "request_vote" and sync.ignores_vote_request(message):
            return
        if kind == "next_node_idx":
            sync.on_answer(node, message)
        elif kind == "append_entries":
            sync.on_append_entries(node, message)
            message = self._trim_known_entries(message)
            if message is None:
                return
        try:
            super()._onMessageReceived(node, message)
        finally:
            sync.answering_mark = None


def trim_known_entries(log: RaftJournal, message: dict[str, Any]) -> dict[str, Any] | None:
    """A follower in pysyncobj deletes every entry after `prevLogIdx` before appending, even
    entries that match: a late or repeated append-entries (the leader re-sends after a stale
    `reset` reply) truncates entries this node already acknowledged (logged as "truncating
    already-applied log entries"). Raft deletes only on conflict. So we drop from the message the
    entries this log already holds with the same term (Log Matching: they are identical), moving
    `prevLogIdx` up; a message that then carries nothing new while our log extends past it is
    dropped (the leader has already moved its next index past it; later messages follow)."""
    entries = message.get("entries")
    if not entries or "prevLogIdx" not in message or "transmission" in message or len(log) == 0:
        return message
    first, last = log[0][1], log[-1][1]
    prev = message["prevLogIdx"]
    if prev < first or prev > last or log[prev - first][2] != message["prevLogTerm"]:
        return message  # pysyncobj's own reset path
    known = 0
    for _command, idx, term in entries:
        if idx > last or log[idx - first][2] != term:
            break
        known += 1
    if known == 0:
        return message
    _command, new_prev, new_prev_term = entries[known - 1]
    if known == len(entries) and new_prev < last:
        return None
    trimmed = dict(message)
    trimmed["prevLogIdx"], trimmed["prevLogTerm"], trimmed["entries"] = new_prev, new_prev_term, entries[known:]
    return trimmed
