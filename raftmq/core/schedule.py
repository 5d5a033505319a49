"""Scheduled and delayed delivery: ActiveMQ's `AMQ_SCHEDULED_*` headers and Artemis's
`_AMQ_SCHED_DELIVERY`, as committed state.

A SEND carrying them is not stored in its destination: it becomes a `Job` in the core's state
(and so in every replica and every snapshot), due at a committed time. A Tick whose committed
`now` has reached a job's due time publishes it — once per occurrence, whichever member leads
then, since the job and its next due time are replicated — and the node's ticker proposes a
Tick at the earliest due time (`Scheduler.next_due`), so lateness is one commit, not a tick
interval. Time is always a command's `now`, never a node's wall clock.

The headers (values are integers in ms, `AMQ_SCHEDULED_CRON` a five-field cron line in UTC):
- `AMQ_SCHEDULED_DELAY`: first delivery this long after the SEND (or after each cron time);
- `_AMQ_SCHED_DELIVERY`: first delivery at this time (ms since the epoch);
- `AMQ_SCHEDULED_PERIOD` and `AMQ_SCHEDULED_REPEAT`: `REPEAT` more deliveries, `PERIOD` apart;
- `AMQ_SCHEDULED_CRON`: at every time the line names, the delay / period / repeat above, for
  as long as the job lives (a cron job never ends by itself).
The delivered message has none of these headers, so a group it is forwarded to does not
schedule it again. A producer's `_AMQ_DUPL_ID` is checked when the job is made: a resent SEND
after a failover schedules nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from heapq import heapify, heappop, heappush
from typing import Any

from croniter import croniter

from raftmq.core.dedup import DedupCache
from raftmq.core.validation import Refused
from raftmq.protocol.header_block import block_of, first, pairs_of, user_block

DELAY = "AMQ_SCHEDULED_DELAY"
PERIOD = "AMQ_SCHEDULED_PERIOD"
REPEAT = "AMQ_SCHEDULED_REPEAT"
CRON = "AMQ_SCHEDULED_CRON"
DELIVERY_TIME = "_AMQ_SCHED_DELIVERY"
SCHEDULE_HEADERS = frozenset({DELAY, PERIOD, REPEAT, CRON, DELIVERY_TIME})

MAX_REPEAT = 1_000_000
MAX_DELAY_MS = 10 * 365 * 86_400_000  # ten years
# Occurrences one Tick publishes at most; the rest wait for the next (bounded work per command).
MAX_FIRES_PER_TICK = 5_000


def is_scheduled(headers: str) -> bool:
    """Does a SEND's header block ask for scheduled delivery? (The send path's only cost: one
    search of the block's text.)"""
    return "AMQ_SCHED" in headers and any(name in SCHEDULE_HEADERS for name, _ in pairs_of(headers))


def special_headers(headers: str) -> tuple[bool, bool]:
    """(scheduled, has a reply-to) of a SEND's header block, in two searches of its text for
    the common SEND that has neither."""
    return is_scheduled(headers), "reply-to:" in headers and first(headers, "reply-to") is not None


@dataclass(slots=True)
class Job:
    """A scheduled message: published at `due`, then `remaining` more times `period` apart
    (`remaining` counts down), and for a cron job again from the cron line's next time."""

    seq: int
    destination: str
    headers: str  # the message's header block, the schedule's removed
    body: Any
    due: int
    period: int
    remaining: int
    repeat: int
    delay: int
    cron: str | None

    def dump(self) -> list[Any]:
        return [self.seq, self.destination, self.headers, self.body, self.due, self.period,
                self.remaining, self.repeat, self.delay, self.cron]

    @classmethod
    def load(cls, record: list[Any]) -> Job:
        seq, destination, headers, body, due, period, remaining, repeat, delay, cron = record
        # Pairs: headers written before blocks.
        block = headers if isinstance(headers, str) else user_block((n, v) for n, v in headers)
        return cls(seq, destination, block, body, due, period, remaining, repeat, delay, cron)


def _integer(headers: dict[str, str], name: str, low: int, high: int) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise Refused("invalid schedule", f"{name}: {value!r} is not a whole number of milliseconds") from None
    if not low <= number <= high:
        raise Refused("invalid schedule", f"{name}: {number} is outside {low}..{high}")
    return number


def next_cron_time(line: str, after: int) -> int:
    """The first time (ms) after `after` that the cron line names, in UTC."""
    start = datetime.fromtimestamp(after / 1000, UTC)
    return int(croniter(line, start).get_next(datetime).timestamp() * 1000)


def plan(destination: str, headers: str, now: int) -> Job:
    """The job a SEND's schedule headers describe (seq 0: the scheduler numbers it), or
    Refused naming the header that makes no sense."""
    given: dict[str, str] = {}
    kept = []
    for name, value in pairs_of(headers):
        if name in SCHEDULE_HEADERS:
            given.setdefault(name, value)
        else:
            kept.append((name, value))
    delay = _integer(given, DELAY, 0, MAX_DELAY_MS) or 0
    at = _integer(given, DELIVERY_TIME, 0, 1 << 62)
    period = _integer(given, PERIOD, 0, MAX_DELAY_MS) or 0
    repeat = _integer(given, REPEAT, 0, MAX_REPEAT) or 0
    cron = given.get(CRON)
    if repeat and not period:
        raise Refused("invalid schedule", f"{REPEAT}: {repeat} repeats need an {PERIOD} above 0")
    if cron is not None:
        cron = cron.strip()
        if at is not None:
            raise Refused("invalid schedule", f"{CRON} and {DELIVERY_TIME} both name when to deliver")
        if not croniter.is_valid(cron) or len(cron.split()) != 5:
            raise Refused("invalid schedule", f"{CRON}: {cron!r} is not a five-field cron line")
        due = next_cron_time(cron, now) + delay
    elif at is not None:
        due = max(at, now) + delay
    else:
        due = now + delay
    return Job(0, destination, block_of(kept), None, due, period, repeat, repeat, delay, cron)


class Scheduler:
    """The jobs in `state` (`jobs`, `job_seq`) and a heap of (due, seq) over them, derived."""

    def __init__(self, jobs: dict[int, Job], publish: Callable[[str, str, Any, int], None]) -> None:
        self.jobs = jobs
        self._publish = publish
        self.heap: list[tuple[int, int]] = []
        self.rebuild()

    def rebuild(self) -> None:
        self.heap = [(job.due, seq) for seq, job in self.jobs.items()]
        heapify(self.heap)

    def add(self, job: Job, seq: int, body: Any, dedup: DedupCache) -> None:
        """Keep `job` (numbered `seq`) unless its `_AMQ_DUPL_ID` was seen for its destination."""
        dupl_id = first(job.headers, "_AMQ_DUPL_ID")
        if dupl_id and not dedup.remember(job.destination, dupl_id):
            return
        job.seq = seq
        job.body = body
        self.jobs[seq] = job
        heappush(self.heap, (job.due, seq))

    def next_due(self) -> int | None:
        heap = self.heap
        while heap and (heap[0][1] not in self.jobs or self.jobs[heap[0][1]].due != heap[0][0]):
            heappop(heap)  # a job that ended or moved on
        return heap[0][0] if heap else None

    def fire_due(self, now: int) -> int:
        """Publish every occurrence due at or before `now` (at most MAX_FIRES_PER_TICK); returns
        how many were published."""
        fired = 0
        while fired < MAX_FIRES_PER_TICK:
            due = self.next_due()
            if due is None or due > now:
                break
            _, seq = heappop(self.heap)
            job = self.jobs[seq]
            self._publish(job.destination, job.headers, job.body, now)
            fired += 1
            if job.remaining > 0:
                job.remaining -= 1
                job.due += job.period
            elif job.cron is not None:
                job.remaining = job.repeat
                job.due = next_cron_time(job.cron, max(job.due - job.delay, now - job.delay)) + job.delay
            else:
                del self.jobs[seq]
                continue
            heappush(self.heap, (job.due, seq))
        return fired
