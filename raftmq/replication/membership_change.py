"""One membership change of a running group, committed by its leader (`raftmq group add-node`,
`remove-node`, `replace-node` end here, through the admin port).

The leader appends the change and waits for it to commit; pysyncobj refuses a change while
the leader's no-op or an earlier change is uncommitted, and those refusals are retried until
the deadline. A leader asked to remove itself hands leadership to a caught-up follower first
and answers `NotLeader` with the new leader's hint: the caller asks there.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from pysyncobj import FAIL_REASON

from raftmq.errors import CommitFailed, NotLeader
from raftmq.replication.in_flight import FAIL_REASONS
from raftmq.replication.membership import REMOVE, Change, check_change
from raftmq.replication.raft_log import RaftLog

log = structlog.get_logger("raftmq.replication.membership")

RETRY_SECONDS = 0.05


async def change_membership(raft: RaftLog, change: Change, timeout: float = 10.0) -> tuple[str, ...]:
    """Commit `change`; returns the members after it. Raises NotLeader (ask the hinted leader),
    ConfigError (the change makes no sense) or CommitFailed (outcome unknown: read the
    members again before retrying)."""
    if not raft.is_leader:
        raise NotLeader(raft.leader_hint)
    member = raft.member
    check_change(frozenset(member.members), change)
    if change.op == REMOVE and change.address == raft.settings.self_address:
        await raft.transfer_leadership(timeout=min(timeout, 3.0))
        raise NotLeader(raft.leader_hint)
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout
    while True:
        answer: asyncio.Future[int] = loop.create_future()

        def settled(_result: Any, error: int, answer: asyncio.Future[int] = answer) -> None:
            loop.call_soon_threadsafe(_settle, answer, error)

        member.change_membership(change, settled)
        try:
            error = await asyncio.wait_for(answer, max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            raise CommitFailed(
                f"membership change {change.op} {change.address}: not committed within {timeout:g} s"
            ) from None
        if error == FAIL_REASON.SUCCESS:
            log.info("raft.membership_committed", op=change.op, node=change.address, members=list(member.members))
            return member.members
        if error == FAIL_REASON.REQUEST_DENIED and raft.is_leader and time.monotonic() < deadline:
            await asyncio.sleep(RETRY_SECONDS)  # the no-op or the previous change is not committed yet
            continue
        if not raft.is_leader:
            raise NotLeader(raft.leader_hint)
        raise CommitFailed(f"membership change {change.op} {change.address}: {FAIL_REASONS.get(error, error)}")


def _settle(answer: asyncio.Future[int], error: int) -> None:
    if not answer.done():
        answer.set_result(error)
