"""One member's Raft settings and the status it reports (`RaftLog`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """One member's Raft settings, in seconds (`raftmq.config.RaftTimings` is the same in the
    config file, in ms). Timings are the tuned values (docs/replication.md; stock pysyncobj:
    50 ms ticks, 100 ms heartbeats, 0.4-1.4 s elections, 30 s fallback)."""

    self_address: str  # "host:port" of this member's Raft port; bound exactly there
    peers: tuple[str, ...]  # every member's Raft address (this one may be included)
    data_dir: str  # journal, metadata and snapshot of this member
    # Required unless every address is loopback; needs `cryptography`. Kept out of reprs.
    password: str | None = field(default=None, repr=False)
    # The group secret the Raft wire authenticates with (the password, or the group's generated
    # one: raftmq.replication.group_secret). None: the one beside `data_dir`.
    secret: str | None = field(default=None, repr=False)
    # 5 ms ticks / 20 ms heartbeats: commit latency ~1-3 ms idle; costs some idle CPU.
    tick_period: float = 0.005
    append_entries_period: float = 0.02
    # Failover within ~0.5 s; a member stalled longer than 0.3 s (GC, swap) triggers an election.
    election_timeout_min: float = 0.3
    election_timeout_max: float = 0.6
    leader_fallback_timeout: float | None = None  # None: election_timeout_min
    connection_timeout: float = 1.5
    connection_retry: float = 0.25
    # Group commit: entries of at most this many encoded bytes (a single larger append goes alone).
    max_entry_bytes: int = 256 * 1024
    # Entries in flight at once: 1 = send at once when idle, coalesce everything else meanwhile.
    max_in_flight_entries: int = 2
    # Past the first, a further entry goes out while others are in flight only if those hold at
    # most this many encoded bytes (light load: a SEND does not wait behind a consumer's ACK
    # entry); under heavier load everything that arrives meanwhile is coalesced instead, since
    # every entry costs each member a round of Python work whatever its size.
    light_load_bytes: int = 16 * 1024
    append_entries_batch_bytes: int = 24 * 2**20  # also the hard limit of one entry (a 16 MiB body fits)
    compact_after_bytes: int = 64 * 2**20  # snapshot + trim the journal past this size
    commit_timeout: float = 5.0  # an append not committed by then fails (outcome unknown)
    snapshot_timeout: float = 5.0


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
