"""pysyncobj 0.3.17 made safe for raftmq, in our code (docs/replication.md lists the holes).

Nothing here copies pysyncobj: we pass our own journal through its `journalFile` hook (via a
wrapped `createJournal`), a `TCPTransport` subclass through `transportClass`, our own snapshot
format through its `serializer`/`deserializer` hooks, override `_onTick`,
`_checkCommandsToApply` and the private `__applyLogEntries` in a `SyncObj` subclass (each
calls the original), and swap three module-level names (the pickle protocol, the zlib used on
the wire, the rename used for snapshot files). Importing `patches` (and so any module here
that uses pysyncobj) with any pysyncobj but 0.3.17 raises ImportError.

Modules:
- `raft_journal_format`, `snapshot_file`: the bytes of a member's Raft files
  (docs/raft-journal-format.md); pure, they import neither pysyncobj nor asyncio.
- `patches`: the version check, the fix switches (`Fixes`), module-level swaps, shared helpers.
- `raft_journal`: `RaftJournal`, pysyncobj's log on disk in our format.
- `transport`: `DurableTransport`, durable before it speaks, on our wire.
- `syncobj`: `HardenedSyncObj`, one member with every fix.

This package re-exports nothing, so importing one of its pure modules never loads pysyncobj.

| fix (field of `Fixes`) | hole it closes |
|---|---|
| `fsync`             | journal fsynced (one fdatasync per replication message / tick) before an append-entries response or a vote leaves a node and before the leader counts its own entries |
| `durable_rename`    | snapshot files fsynced, renamed, directory fsynced |
| `dump_always`       | a journal is never configured without a snapshot file (state lost after compaction + restart) |
| `dump_journal_race` | a journal not yet trimmed after its snapshot is aligned to it, instead of being discarded |
| `entry_size`        | append-entries batches of 4 MiB, so no entry takes the broken chunking path (>64 KiB) |
| `pickle`            | pickle protocol 5 (bytes are not inflated) and stored zlib on the wire (lz4 already compressed) |
| `never_raise`       | the replicated apply and every callback never raise in the tick thread |
| `fallback`          | a leader without quorum steps down after one minimum election timeout, not 30 s |
| `bind`              | the Raft port is bound to its configured address; off loopback a password is required |
| `no_spurious_truncation` | a follower no longer deletes entries it already holds when a late or repeated append-entries arrives |
| `solo_commit`       | a group of one commits what it appended at once, not one tick period later |
| `short_candidate_round` | a candidate whose votes do not come in (a split vote) retries after 0.1-0.25 s, not after another whole election timeout |
| `piggyback_commit`  | a new commit index rides on the next append-entries (or goes out within one tick), not in an extra message to every follower per commit |
| `pre_vote`          | a member asks whether it could win before it raises its term, and nobody votes while it hears from a working leader (raftmq.replication.leadership): a healed partition does not depose a healthy leader |
| `wire`              | the Raft port speaks our wire (raftmq.replication.wire): peers prove the group secret before anything is decoded, frames are AES-GCM and msgpack, never pickle; reads bounded per frame and per poll; handshakes time out |
| `durable_term`      | a new term and vote are stored before the member believes them: pysyncobj set them in memory first, so a member whose store failed (a full disk) went on in a term it had not stored, and a leader that could not store a higher term kept leading in it, deposing the real leader of that term and truncating entries it had applied (two leaders in one term; found by the chaos disk-full nemesis) |
| `membership`        | membership changes (raftmq.replication.membership): a member's configuration is its log's, as Raft has it. pysyncobj counted a member twice after loading a snapshot (it filtered itself out comparing a string with a node), applied a change again when it committed (a follower holding an add and a later remove re-added the member), snapshotted the configuration of the log's end, and on a restart used the configured peers until its first ticks re-applied the committed changes (never the uncommitted ones); and its entries carried a pickled node |
| `wake_once`         | the loop wakes the tick thread with a pipe byte only while it waits in its poll, one per wait, not one per submitted entry (a system call each while the tick thread is mostly awake already); an entry submitted while it ticks makes its next poll not wait |
| `lease`             | a leader writes deliveries and receipts only while a majority answered it within the lease (raftmq.replication.leadership): a paused leader that resumes writes nothing stale |

`Fixes` exists so a regression test can turn one fix off and show that it then fails; the
product always runs with all of them (`ALL_FIXES`).

Not closed here: one shared send budget per heartbeat can still starve a slow follower ;
the Raft log between compactions stays in RAM (bounded by `compact_after_bytes`); a damaged
journal record past the stored commit index with nothing whole after it is cut off at open like
a torn tail (the leader re-sends it; docs/raft-journal-format.md).
"""
