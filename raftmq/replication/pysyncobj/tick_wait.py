"""How long a member's tick thread may sleep: until the first thing a tick has to do.

pysyncobj ticks every `autoTickPeriod` (5 ms here) whether or not anything is due: two hundred
rounds of Python a second per member, most of an idle member's CPU. A tick does work for four
reasons, and three of them wake the poll it sleeps in by themselves: a peer's message (a socket),
a submitted entry (the pipe notifier, `WakeOnce`), a task for the tick thread (the same pipe).
The fourth is time, and every timed duty of a tick has a deadline this module reads:

- a leader's next append-entries (its heart-beat, or the commit index it owes its followers);
- a leader's fallback: the moment the answers of its followers stop being recent enough;
- a follower's or candidate's election deadline, less the pre-vote look-ahead;
- a connection's handshake or overdue answer, and the retry of a peer to connect to again;

so the poll waits until the earliest of them, and never longer than `MAX_WAIT_SECONDS` (a
bound for whatever pysyncobj times that is not listed: its one-second timer). Only while a tick
has unfinished business it cannot wake for (a snapshot being written, a transport not bound
yet, an overdue deadline it did not act on) does the poll wait the tick period.
"""

from __future__ import annotations

from typing import Any

import pysyncobj.syncobj as pso_syncobj
from pysyncobj import _RAFT_STATE

from raftmq.replication.pysyncobj.patches import PREVOTE_LOOKAHEAD

MAX_WAIT_SECONDS = 0.5
# Wake just after a deadline, not on it: pysyncobj acts when `now > deadline`.
PAST_DEADLINE_SECONDS = 0.0005


def poll_timeout(member: Any, tick: float, now_own: float) -> float:
    """How long `member` (a HardenedSyncObj) may wait in its poll; `tick` is the tick period,
    `now_own` time.monotonic() (connections keep their deadlines on that clock; pysyncobj's
    are on its own, `pso_syncobj.monotonicTime`)."""
    if member._tick_tasks:
        return 0.0
    transport = member._SyncObj__transport
    # A snapshot under way (pid set; checkSerializing reads it but also ends it: not called here).
    if not transport.ready or member._SyncObj__serializer._Serializer__pid != 0:
        return tick
    now = pso_syncobj.monotonicTime()
    due = now + MAX_WAIT_SECONDS
    if member._SyncObj__raftState == _RAFT_STATE.LEADER:
        due = min(due, member._SyncObj__newAppendEntriesTime)
        fallback = member._SyncObj__conf.leaderFallbackTimeout
        answers = member._SyncObj__lastResponseTime
        recent = [answers[node] + fallback for node in member._SyncObj__otherNodes
                  if answers.get(node, 0.0) + fallback > now]
        due = min([due, *recent])
    elif member._SyncObj__selfNode is not None:
        due = min(due, member._SyncObj__raftElectionDeadline - PREVOTE_LOOKAHEAD)
    wait = min(due - now, transport.next_deadline() - now_own)
    if wait <= 0:
        return tick  # overdue and not acted on (an election with nobody connected): no busy loop
    return wait + PAST_DEADLINE_SECONDS
