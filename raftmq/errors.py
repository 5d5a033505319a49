"""The one error hierarchy of raftmq, and of the chaos harness and the audit beside it.

Every error raftmq, `chaos` or `spark_audit` raises on purpose derives from `RaftmqError`, so
callers can tell our failures from bugs (a bare `Exception` from them is a bug). Classes of the
harness and the audit are defined there (raftmq never imports them) and named here with their
module::

    RaftmqError
    ├── ConfigError                    a configuration file or option is invalid (names file and key)
    │   └── InvalidFailoverUrl         a failover: URL or option
    ├── ProtocolError                  bytes that are not valid STOMP or MQTT, or break a limit (→ ERROR frame)
    │   ├── FrameTooLarge
    │   └── MqttError                  an MQTT packet that is malformed or breaks the protocol; `reason_code`
    ├── CodecError                     stored or replicated bytes this version cannot read
    │   ├── CommandCodecError          a replicated command
    │   └── SnapshotError              a broker snapshot
    ├── StorageError                   what is on disk cannot be used
    │   ├── JournalCorrupt             a body-journal segment failed verification
    │   ├── RaftJournalError           the Raft journal or snapshot is unreadable
    │   └── BodyUnavailable            a referenced body is missing here or failed its checksum
    ├── ReplicationError               the group did not (certainly) commit; `retriable`
    │   ├── NotLeader                  this node does not lead; `leader` names who does, if known
    │   └── CommitFailed               outcome unknown (leader change, timeout, stopped)
    ├── WireError                      a Raft peer broke the wire protocol (connection closed)
    ├── RelayRefused                   a follower will not relay to that leader (TLS mismatch)
    ├── SelectorError                  a JMS selector does not parse
    ├── InvariantViolated              the broker core found its own state inconsistent (a bug: stop)
    ├── ClientError                    raised by raftmq.client
    │   ├── BrokerRefused              the broker answered ERROR
    │   ├── NotStompPort               the address is a raftmq admin or Raft port, or HTTP
    │   ├── NoVmBroker                 a vm:// URL names no broker running in this process
    │   ├── RedirectLimitExceeded      too many leader redirects
    │   ├── FailoverExhausted          every reconnect attempt failed
    │   ├── SubscriptionEnded          the subscription ended cleanly
    │   └── TransactionRolledBack      the connection carrying the transaction broke
    ├── DeploymentError                `raftmq up` / `down` cannot proceed
    ├── ProcessNotReady                a started process exited or never became ready
    ├── EmbeddedBrokerError            the embedded broker could not start, or was misused
    ├── FaultUnavailable               this machine cannot make that chaos fault (root, FUSE, ...)
    │   ├── Unavailable                chaos.environment: a nemesis's requirement is missing
    │   ├── ClockUnavailable           chaos.clock_fault: no libfaketime or C compiler, or a misused clock
    │   ├── DiskUnavailable            chaos.disk: not root, no mount, or not our mountpoint
    │   ├── LibraryMissing             chaos.packet_queue: no libnetfilter_queue.so.1
    │   └── NetemUnavailable           chaos.netns: no netem qdisc (also a NetnsError)
    ├── NetnsError                     chaos.netns: a namespace, link, rule or qdisc was not set up
    ├── NeedsCluster                   chaos.workload: the workload needs more groups than deployed
    ├── NoMqtt                         chaos.mqtt: the mqtt workload's group has no MQTT listener
    └── AuditError                     a run directory the audit cannot read as one (spark_audit)
"""

from __future__ import annotations

from collections.abc import Sequence


class RaftmqError(Exception):
    """Base of every error raftmq raises on purpose."""


class ProtocolError(RaftmqError):
    """A peer sent bytes that are not valid STOMP (or break a configured limit).

    The server answers with an ERROR frame carrying `message` and closes the connection.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        # The offending frame's `receipt` header when its headers could be read (a body over
        # the limit): the ERROR then names the frame, so a client fails that one operation.
        self.receipt: str | None = None


class FrameTooLarge(ProtocolError):
    """A frame, header line or header count broke a configured limit."""


class MqttError(ProtocolError):
    """An MQTT packet that is malformed, breaks the protocol or a limit.

    `reason_code` is MQTT 5's for it (0x81 malformed packet, 0x82 protocol error, 0x84
    unsupported protocol version, 0x95 packet too large, ...): an MQTT 5 session sends it in its
    CONNACK or DISCONNECT; an MQTT 3.1.1 session closes the connection (or answers a CONNECT with
    the 3.1.1 return code that matches).
    """

    def __init__(self, reason_code: int, message: str, detail: str = "") -> None:
        super().__init__(message, detail)
        self.reason_code = reason_code
        self.packets: Sequence[object] = ()  # the parser's: the packets complete before the bad one


class CodecError(RaftmqError):
    """Stored or replicated bytes this version cannot read (or a value it cannot write)."""


class CommandCodecError(CodecError):
    """A replicated command could not be encoded or decoded (unknown version or type)."""


class SnapshotError(CodecError, ValueError):
    """The data is not a broker snapshot this version can read."""


class ConfigError(RaftmqError):
    """A configuration file is invalid; the message names the file and the key."""


class ClientError(RaftmqError):
    """Raised by raftmq.client: the broker refused or the connection failed."""


class NotStompPort(ClientError):
    """The address answered as no STOMP port does (a raftmq admin or Raft port, an HTTP server):
    trying it again cannot help."""


class NoVmBroker(ClientError):
    """A `vm://NAME` URL names no in-VM broker running in this process (raftmq.vm)."""


class RedirectLimitExceeded(ClientError):
    """A group's nodes kept naming other nodes as leader for more than `maxRedirects` hops."""


class FailoverExhausted(ClientError):
    """Every reconnect attempt allowed by `maxReconnectAttempts` failed."""


class SubscriptionEnded(ClientError):
    """The subscription ended cleanly (unsubscribed or disconnected)."""


class TransactionRolledBack(ClientError):
    """The connection carrying the transaction broke; the broker rolled it back."""


class InvalidFailoverUrl(ConfigError, ValueError):
    """A failover URL or option is malformed; the message names the part at fault."""


class BrokerRefused(ClientError):
    """The broker answered with an ERROR frame."""

    def __init__(self, message: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.body = body


class ReplicationError(RaftmqError):
    """The group did not commit the command, or cannot say whether it did. `retriable`: sending
    it again (with its duplicate-detection id) is safe and may succeed, e.g. at the new leader."""

    retriable = True


class NotLeader(ReplicationError):
    """This node is not the leader of its group; `leader` names the leader's client address if known."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(f"not the leader (leader: {leader or 'unknown'})")
        self.leader = leader


class WireError(RaftmqError):
    """A Raft peer broke the wire protocol; the connection is closed (never raised to pysyncobj)."""


class RelayRefused(RaftmqError):
    """A follower will not relay a client to the node at the leader's address (a TLS
    certificate that is not the group's)."""


class CommitFailed(ReplicationError):
    """A command's outcome is unknown or it was not committed (leader change, timeout)."""


class SelectorError(RaftmqError):
    """A JMS selector on SUBSCRIBE could not be parsed."""


class InvariantViolated(RaftmqError):
    """The broker core found its own state inconsistent: a bug. Replicas must stop, not skip."""


class StorageError(RaftmqError):
    """What is on disk cannot be used."""


class RaftJournalError(StorageError):
    """The Raft journal or snapshot on disk is unreadable; the node refuses to start."""


class BodyUnavailable(StorageError):
    """A referenced body is not in this member's journal (or failed its checksum)."""


class JournalCorrupt(StorageError):
    """A journal segment failed verification where a torn write cannot explain it.

    Bad CRC, bad magic, an unsupported format or inconsistent batch contents. `path` and
    `offset` name the segment file and the byte offset of the batch. Corrupt bytes are never
    served: the node refuses to start or repairs the segment from a peer.
    """

    def __init__(self, reason: str, path: str | None = None, offset: int | None = None) -> None:
        where = path or "<buffer>"
        if offset is not None:
            where = f"{where} at offset {offset}"
        super().__init__(f"journal corrupt: {where}: {reason}")
        self.reason = reason
        self.path = path
        self.offset = offset


class DeploymentError(RaftmqError):
    """`up` / `down` cannot proceed; the message is one line naming the problem."""


class ProcessNotReady(RaftmqError):
    """A started process exited, or did not print its readiness line in time."""


class EmbeddedBrokerError(RaftmqError):
    """The embedded broker could not start, or was used in the wrong state."""


class FaultUnavailable(RaftmqError):
    """The chaos harness cannot make a fault on this machine (it lacks root, FUSE, network
    namespaces, netem, libfaketime, libnetfilter_queue, ...); the message says what is missing.
    Its subclasses, in `chaos`, name the fault."""


class AuditError(RaftmqError):
    """A run directory the audit (spark_audit) cannot read as one (named, with the reason)."""
