"""The stale-delivery checker: a pure function of a `stale` workload's history (chaos.stale). No
I/O, no clock.

Every MESSAGE and CONNECTED frame of raftmq carries `raftmq-term`, the term of the leader that
wrote it. A **stale delivery** is a MESSAGE from a term lower than one some consumer of the run
had already received (on a MESSAGE or a CONNECTED frame) before it: it was written by a leader
after a newer leader's frames had reached a client, that is, after it had been deposed. The
history orders the frames as the clients' process received them; the clients read every socket
as it becomes readable (a thread per stomp.py connection), and a deposed leader's last lawful
frame leaves at least an election timeout before a new leader exists, so no lawful frame is
taken for a stale one. The leader lease is what keeps these at zero, for every client.

- `stale_plain`, `stale_own`: stale deliveries that reached the plain (stomp.py) consumers and
  the application through raftmq's own client.
- `stale_seen_plain`, `stale_seen_own`: the part of those older than a term the same client had
  itself received before: what a client could tell by itself. raftmq's own client drops these
  (raftmq.client.terms), so `stale_seen_own` is zero by construction whatever the server does;
  `dropped_by_term` counts what it dropped.
- the rest is the queue checker's verdict (lost, unexpected, stored duplicates) over the values.

Valid exactly when the queue verdict holds and no stale delivery reached any client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.checker import SAMPLE, QueueResult, check_queue
from chaos.history import OK, Op


@dataclass
class StaleResult(QueueResult):
    terms: int = 0  # distinct leader terms the consumers saw
    stale_plain: int = 0
    stale_own: int = 0
    stale_seen_plain: int = 0
    stale_seen_own: int = 0
    dropped_by_term: int = 0
    stale_deliveries: list[Any] = field(default_factory=list)  # at most a sample

    @property
    def valid(self) -> bool:
        return super().valid and self.stale_plain == 0 and self.stale_own == 0  # stale_seen_* are parts of these


def check_stale(history: Iterable[Op]) -> StaleResult:
    flat: list[Op] = []
    highest, terms, dropped = 0, set(), 0
    seen: dict[str, int] = {}  # the highest term each client received
    stale: list[dict[str, Any]] = []
    for op in history:
        value = op.value
        if op.type == OK and op.f in ("receive", "connect") and isinstance(value, dict):
            term = int(value.get("term") or 0)
            if op.f == "receive":
                if term and term < highest:
                    stale.append({"process": op.process, "value": value["value"], "term": term, "after": highest,
                                  "seen": term < seen.get(op.process, 0), "plain": bool(value.get("plain")),
                                  "mono": op.mono, "node": op.node})
                flat.append(dataclasses.replace(op, value=value["value"]))
            if term:
                terms.add(term)
                highest = max(highest, term)
                seen[op.process] = max(seen.get(op.process, 0), term)
        elif op.type == OK and op.f == "floor" and isinstance(value, dict):
            dropped += int(value.get("dropped", 0))
        else:
            flat.append(op)
    base = check_queue(flat)
    plain = [s for s in stale if s["plain"]]
    own = [s for s in stale if not s["plain"]]
    return StaleResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(QueueResult)},
                       terms=len(terms), stale_plain=len(plain), stale_own=len(own),
                       stale_seen_plain=sum(1 for s in plain if s["seen"]),
                       stale_seen_own=sum(1 for s in own if s["seen"]),
                       dropped_by_term=dropped, stale_deliveries=stale[:SAMPLE])
