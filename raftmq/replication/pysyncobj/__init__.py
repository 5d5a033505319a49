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
- `patches`: the version check, module-level swaps, shared helpers.
- `raft_journal`: `RaftJournal`, pysyncobj's log on disk in our format.
- `transport`: `DurableTransport`, durable before it speaks, on our wire.
- `tick_wait`: how long the tick thread may sleep (the first deadline a tick keeps).
- `syncobj`: `HardenedSyncObj`, one member with every fix.

This package re-exports nothing, so importing one of its pure modules never loads pysyncobj.

Each fix, the hole in 0.3.17 it closes, and the test that shows it (in tests/replication/):

- `fsync`: the journal is fsynced (one fdatasync per replication message / tick) before an
  append-entries response or a vote leaves a node and before the leader counts its own entries.
  `test_pysyncobj_transport.py::test_journal_is_durable_before_acks_votes_and_the_leaders_own_count`
- `durable_rename`: snapshot files fsynced, renamed, directory fsynced.
  `test_pysyncobj_patches.py::test_snapshot_rename_and_metadata_are_fsynced`
- `dump_always`: a journal is never configured without a snapshot file (state lost after
  compaction + restart). `test_pysyncobj_raft_journal.py::test_state_survives_compaction_and_restart`
- `dump_journal_race`: a journal not yet trimmed after its snapshot is aligned to it, instead of
  being discarded.
  `test_pysyncobj_raft_journal.py::test_journal_tail_past_the_snapshot_survives_a_crash_before_the_trim`
- `entry_size`: append-entries batches of 4 MiB, so no entry takes the broken chunking path
  (>64 KiB). `test_pysyncobj_transport.py::test_large_entries_replicate_whole`
- `pickle`: pickle protocol 5 (bytes are not inflated) and stored zlib on the wire (lz4 already
  compressed). `test_pysyncobj_patches.py::test_a_1kib_command_is_not_inflated_on_the_wire`
- `never_raise`: the replicated apply and every callback never raise in the tick thread.
  `test_pysyncobj_patches.py::test_a_raising_apply_is_applied_once_and_the_log_goes_on`,
  `test_pysyncobj_patches.py::test_a_raising_callback_does_not_apply_twice`
- `fallback`: a leader without quorum steps down after one minimum election timeout, not 30 s.
  `test_pysyncobj_syncobj.py::test_a_leader_without_quorum_steps_down_within_an_election_timeout`
- `bind`: the Raft port is bound to its configured address (stock: 0.0.0.0); off loopback a
  password is required. `test_pysyncobj_transport.py::test_the_raft_port_is_bound_to_its_address`,
  `test_pysyncobj_patches.py::test_a_member_off_loopback_needs_a_password`
- `no_spurious_truncation`: a follower no longer deletes entries it already holds when a late or
  repeated append-entries arrives.
  `test_pysyncobj_transport.py::test_followers_never_delete_entries_they_already_hold`
- `solo_commit`: a group of one commits what it appended at once, not one tick period later.
  `test_pysyncobj_syncobj.py::test_a_group_of_one_commits_an_entry_submitted_late_in_a_tick_at_once`,
  `test_pysyncobj_syncobj.py::test_a_group_of_one_commits_without_waiting_for_its_next_tick` (this
  one only with `wake_once` undone too: `WakeOnce` keeps the poll after a woken one from waiting)
- `short_candidate_round`: a candidate whose votes do not come in (a split vote) retries after
  0.1-0.25 s, not after another whole election timeout.
  `test_pysyncobj_syncobj.py::test_a_candidate_retries_a_failed_round_sooner_than_an_election_timeout`
- `piggyback_commit`: a new commit index rides on the next append-entries (or goes out within one
  tick), not in an extra message to every follower per commit.
  `test_pysyncobj_syncobj.py::test_a_commit_index_rides_on_the_next_append_entries`
- `pre_vote`: a member asks whether it could win before it raises its term, and nobody votes
  while it hears from a working leader (raftmq.replication.leadership): a healed partition does
  not depose a healthy leader.
  `test_pysyncobj_syncobj.py::test_a_healed_partition_does_not_depose_a_healthy_leader`,
  `test_pysyncobj_syncobj.py::test_a_cut_off_member_does_not_raise_its_term`
- `wire`: the Raft port speaks our wire (raftmq.replication.wire): peers prove the group secret
  before anything is decoded, frames are AES-GCM and msgpack, never pickle; reads bounded per
  frame and per poll; handshakes time out.
  `test_pysyncobj_transport.py::test_a_strangers_pickle_sent_to_the_raft_port_never_runs`
- `durable_term`: a new term and vote are stored before the member believes them: pysyncobj set
  them in memory first, so a member whose store failed (a full disk) went on in a term it had
  not stored, and a leader that could not store a higher term kept leading in it, deposing the
  real leader of that term and truncating entries it had applied (two leaders in one term;
  found by the chaos disk-full nemesis).
  `test_pysyncobj_syncobj.py::test_a_term_that_cannot_be_stored_is_not_believed`
- `membership`: membership changes (raftmq.replication.membership): a member's configuration is
  its log's, as Raft has it. pysyncobj counted a member twice after loading a snapshot (it
  filtered itself out comparing a string with a node), applied a change again when it committed
  (a follower holding an add and a later remove re-added the member), snapshotted the
  configuration of the log's end, and on a restart used the configured peers until its first
  ticks re-applied the committed changes (never the uncommitted ones); and its entries carried
  a pickled node.
  `test_pysyncobj_membership.py::test_a_member_restarted_from_a_snapshot_does_not_count_itself_twice`
- `wake_once`: the loop wakes the tick thread with a pipe byte only while it waits in its poll,
  one per wait, not one per submitted entry (a system call each while the tick thread is mostly
  awake already); an entry submitted while it ticks makes its next poll not wait.
  `test_pysyncobj_syncobj.py::test_the_tick_thread_is_woken_once_per_wake_not_once_per_submitted_entry`
- `lease`: a leader writes deliveries and receipts only while a majority answered it within the
  lease (raftmq.replication.leadership): a paused leader that resumes writes nothing stale.
  `test_pysyncobj_syncobj.py::test_a_leader_that_stalled_past_its_lease_knows_it_at_once`
- `sleep_until_due`: the tick thread's poll waits until the first deadline a tick keeps (a
  heart-beat, an election, a connection's; `tick_wait`), not one tick period whatever is due: an
  idle member wakes for heart-beats, not 200 times a second.
  `test_pysyncobj_syncobj.py::test_an_idle_member_sleeps_until_something_is_due`
- `quiet_connections`: a connection is closed when a request on it (append-entries, a vote) goes
  unanswered for `connectionTimeout`, not after that long without a read: two followers, which
  never speak to each other, were disconnected and reconnected (a handshake each) every 1.75 s.
  `test_pysyncobj_syncobj.py::test_a_connection_nobody_asks_anything_on_stays_open`

The product always runs every fix: no module here has a switch that turns one off. Each test
above fails with its fix undone (the one so marked, with `wake_once` undone too), and the
unfixed behaviour is planted from the test side (tests/helpers/unfixed.py: subclasses of
`HardenedSyncObj` and `DurableTransport` that call pysyncobj's own methods, and pysyncobj's
module-level names put back); the small methods these override (`make_durable`, `_guard`,
`_start_prevote`, ...) are where each fix sits.

Not closed here: one shared send budget per heartbeat can still starve a slow follower ;
the Raft log between compactions stays in RAM (bounded by `compact_after_bytes`); a damaged
journal record past the stored commit index with nothing whole after it is cut off at open like
a torn tail (the leader re-sends it; docs/raft-journal-format.md).
"""
