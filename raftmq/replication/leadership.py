"""Who may stand, who may vote, and how long a leader may speak: pre-vote, leader stickiness
and the leader lease, as pure decisions (the caller passes `now`, a monotonic time in seconds).

pysyncobj 0.3.17 has plain Raft elections: a member that stops hearing from its leader raises
its term and asks for votes, and any higher term deposes the leader. Two consequences:

- A member cut off by a partition keeps raising its term; when the partition heals its term
  deposes a healthy leader, which closes every client connection and is elected again a few
  milliseconds later. **Pre-vote** (Raft thesis §9.6) fixes it: before raising its term a
  member asks the others whether they would vote for it, and they say no while they hear from
  a leader. **Stickiness**: a member that heard from its leader within the minimum election
  timeout ignores a real vote request too (unless the leader itself asked for the election by
  handing over leadership), and so does a leader that heard from a majority that recently.
  **Check-quorum**: a leader that has not heard from a majority within the minimum election
  timeout steps down (`fallback` in raftmq.replication.pysyncobj).

- A leader that was paused (SIGSTOP, a long GC, a stalled VM) resumes believing it leads and
  writes deliveries it committed long ago, though a new leader has since redelivered them.
  **The lease** closes that: every append-entries carries the leader's send time (`lm`, its
  monotonic clock), every answer echoes the `lm` of the message it answers, and the leader's
  lease runs until `LEASE_FRACTION` of the minimum election timeout after the latest send time
  a majority (counting itself) has echoed. Because of stickiness, none of those members votes
  for anyone within a whole minimum election timeout of receiving that message, so no other
  leader can exist before the lease ends. The node writes a delivery or a receipt to a client
  only while the lease holds, checked at the moment of writing.

A group of one needs none of this: nobody else can lead.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

# The lease covers this share of the minimum election timeout: the rest is margin for the rate
# difference of two members' monotonic clocks and the time between a check and the write.
LEASE_FRACTION = 0.8
NO_LEASE = 0.0
FOREVER = float("inf")


@dataclass(frozen=True, slots=True)
class LogTip:
    """(term, index) of the last entry of a log: what "at least as up to date" compares."""

    term: int
    index: int

    def at_least(self, other: LogTip) -> bool:
        return self.term > other.term or (self.term == other.term and self.index >= other.index)


class Leadership:
    """The pre-vote round, stickiness and lease of one member of a group of `members`."""

    def __init__(self, members: int, election_timeout_min: float) -> None:
        self.members = members
        self.sticky_for = election_timeout_min
        self.lease_for = election_timeout_min * LEASE_FRACTION
        self.alone = members == 1
        self._heard_leader_at = -FOREVER  # when an append-entries of a current leader last arrived
        # Pre-vote: the term this member would stand at, and who said yes.
        self.prevote_term = 0
        self._grants: set[Hashable] = set()
        self.prevote_won = False
        # Lease (leader only): the newest `lm` each follower echoed during this leadership.
        self.leading = False
        self._leading_since = FOREVER
        self._handing_over = False
        self._echoed: dict[Hashable, float] = {}
        self.lease_expiry = NO_LEASE

    def reconfigure(self, others: set[Hashable]) -> None:
        """The group's configuration changed (a member added or removed): majorities count
        the new one, and answers of members no longer in it stop counting."""
        self.members = len(others) + 1
        self.alone = not others
        self._grants &= others
        self._echoed = {node: mark for node, mark in self._echoed.items() if node in others}

    # -- followers: stickiness -----------------------------------------------------------------

    def heard_from_leader(self, now: float) -> None:
        """An append-entries of a leader at a term not below ours arrived. A pre-vote round
        under way is over: its late answers must not start an election against this leader."""
        self._heard_leader_at = now
        self.prevote_term = 0
        self.prevote_won = False

    def in_contact(self, now: float) -> bool:
        """True while a vote for anyone could depose a working leader: we heard from one within
        the minimum election timeout, or we lead and either won within that time (a rival
        that won a pre-vote round just before our election must not undo it) or hold a lease."""
        if self.leading:
            return self.alone or now < self._leading_since + self.sticky_for or now < self.lease_expiry
        return now - self._heard_leader_at < self.sticky_for

    def ignores_vote_request(self, now: float, handover: bool) -> bool:
        """A real vote request is ignored (no term change, no vote) while in contact, unless the
        leader asked for this election (a leadership transfer)."""
        return not handover and self.in_contact(now)

    # -- pre-vote --------------------------------------------------------------------------------

    def start_prevote(self, current_term: int) -> int:
        """Begin a pre-vote round; returns the term this member would stand at."""
        self.prevote_term = current_term + 1
        self._grants = set()
        self.prevote_won = False
        return self.prevote_term

    def grants_prevote(self, now: float, current_term: int, mine: LogTip, term: int, theirs: LogTip) -> bool:
        """Would we vote for a member standing at `term` with log tip `theirs`?"""
        return term >= current_term and theirs.at_least(mine) and not self.in_contact(now)

    def stand_aside(self) -> None:
        """We just granted another member's pre-vote: our own round (if any) is over, so two
        members whose timers fired together (a group starting up) do not both stand and split
        the vote; the caller also pushes its election timer back, as granting a vote does."""
        self.prevote_term = 0
        self.prevote_won = False

    def prevote_answer(self, voter: Hashable, term: int, granted: bool) -> bool:
        """Count an answer to our round; True exactly once, when a majority (us included) said yes."""
        if not granted or term != self.prevote_term or self.prevote_won:
            return False
        self._grants.add(voter)
        if 1 + len(self._grants) > self.members / 2:
            self.prevote_won = True
            return True
        return False

    def take_prevote_win(self) -> bool:
        """True (once) when the round was won: the real election may start."""
        won, self.prevote_won = self.prevote_won, False
        if won:
            self.prevote_term = 0
        return won

    # -- the lease -------------------------------------------------------------------------------

    def became_leader(self, now: float) -> None:
        self.leading = True
        self._leading_since = now
        self._handing_over = False
        self._echoed = {}
        self.lease_expiry = FOREVER if self.alone else NO_LEASE

    def stepped_down(self) -> None:
        self.leading = False
        self._leading_since = FOREVER
        self._handing_over = False
        self._echoed = {}
        self.lease_expiry = NO_LEASE

    def handing_over(self) -> None:
        """We asked a follower to stand (leadership transfer): it may win at once, so our
        lease ends now and is not renewed for the rest of this leadership."""
        self._handing_over = True
        self.lease_expiry = NO_LEASE

    def echoed(self, follower: Hashable, mark: float | None) -> float:
        """A follower answered the append-entries we sent at `mark`; returns the lease expiry.
        Marks from before this leadership (a late answer to an earlier one) do not count."""
        if not self.leading or self._handing_over or mark is None or mark < self._leading_since:
            return self.lease_expiry
        if mark <= self._echoed.get(follower, -FOREVER):
            return self.lease_expiry
        self._echoed[follower] = mark
        needed = self.members // 2  # followers that, with us, make a majority
        if len(self._echoed) >= needed:
            start = sorted(self._echoed.values(), reverse=True)[needed - 1]
            self.lease_expiry = max(self.lease_expiry, start + self.lease_for)
        return self.lease_expiry
