"""One member's Raft settings and the status it reports (`RaftLog`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from raftmq.config import RaftTimings
from raftmq.security import TlsConfig


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """One member's Raft settings: where it is, who its peers are, and the group's tuning
    (`RaftTimings`, the `[raft]` table of its group file, in ms; pysyncobj's seconds are made
    from it where pysyncobj's config is built, raftmq.replication.pysyncobj.syncobj)."""

    self_address: str  # "host:port" of this member's Raft port; bound exactly there
    peers: tuple[str, ...]  # every member's Raft address (this one may be included)
    data_dir: str  # journal, metadata and snapshot of this member
    # Required unless every address is loopback; needs `cryptography`. Kept out of reprs.
    password: str | None = field(default=None, repr=False)
    # The group secret the Raft wire authenticates with (the password, or the group's generated
    # one: raftmq.replication.group_secret). None: the one beside `data_dir`.
    secret: str | None = field(default=None, repr=False)
    timings: RaftTimings = field(default_factory=RaftTimings)
    # Bind the Raft port (and outgoing connections) on this host instead of `self_address`'s,
    # which stays the member's name in the group. None: `self_address`'s host.
    bind_host: str | None = None
    # The Raft port speaks TLS under its own wire, with this certificate ([tls] raft = true).
    tls: TlsConfig | None = None
    # Past the first, a further entry goes out while others are in flight only if those hold at
    # most this many encoded bytes (light load: a SEND does not wait behind a consumer's ACK
    # entry); under heavier load everything that arrives meanwhile is coalesced instead, since
    # every entry costs each member a round of Python work whatever its size.
    light_load_bytes: int = 16 * 1024


@dataclass(frozen=True, slots=True)
class RaftStatus:
    node: str
    leader: str | None  # Raft address
    leader_client: str | None  # client address, when known
    is_leader: bool
    term: int
    commit_index: int
    last_applied: int  # applied in the tick thread
    delivered_index: int  # handed to the state machine on the loop
    journal_entries: int
    journal_first_index: int  # first entry still in the Raft journal (past the last snapshot)
    journal_bytes: int
    fsyncs: int
    apply_errors: int
    last_apply_error: str | None
    in_flight_entries: int
    queued_appends: int
    members: tuple[str, ...] = ()  # the Raft addresses of the group's configuration
