"""Committed entries crossing from pysyncobj's tick thread to the state machine on the event loop
(raftmq.replication.raft_log's `RaftLog` owns one): applied in log order, snapshots taken in
order with them, restores that hold what follows until they finish."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

import structlog

from raftmq.core.commands import Command
from raftmq.errors import CommandCodecError
from raftmq.replication.commit_log import LogPosition, StateMachine
from raftmq.replication.entry_codec import decode_entry
from raftmq.replication.handoff import OrderedHandoff
from raftmq.replication.in_flight import InFlightEntries

log = structlog.get_logger("raftmq.replication.raft_log")


class Applier:
    def __init__(self, in_flight: InFlightEntries, snapshot_timeout: float) -> None:
        self.machine: StateMachine | None = None
        # Set while a restore finishes (StateMachine.restore returned a future): what the tick
        # thread hands over meanwhile waits here, in order.
        self.handoff = OrderedHandoff()
        self.delivered_index = 0
        self.position = LogPosition(0, 0)
        self.failed_deliveries: set[int] = set()  # entries this member could not apply
        self.apply_errors = 0
        self.last_apply_error: str | None = None
        self._in_flight = in_flight
        self._snapshot_timeout = snapshot_timeout

    # -- tick thread

    def apply_in_tick_thread(self, index: int, term: int, entry: bytes) -> int:
        # Decoding happens on the loop: the tick thread stays free for heartbeats and I/O.
        self.handoff.send(self._deliver, index, term, entry)
        return index

    def snapshot_in_tick_thread(self, index: int, term: int) -> bytes:
        assert self.machine is not None
        result: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        snapshot = self.machine.snapshot

        def take() -> None:  # queued after every batch handed over so far: state == last applied
            if index > self.delivered_index:
                # Entries of pysyncobj's own (a new leader's no-op, a membership change) reach no
                # state machine; the state is the one at `index` and says so (`position`).
                self.delivered_index = index
                self.position = LogPosition(index, term)
            try:
                result.set_result(snapshot())
            except BaseException as exc:
                result.set_exception(exc)

        self.handoff.send(take)
        return result.result(timeout=self._snapshot_timeout)

    def restore_in_tick_thread(self, state: bytes, index: int) -> None:
        self.handoff.send(self._restore_on_loop, state, index)

    # -- loop

    def _deliver(self, index: int, term: int, entry: bytes) -> None:
        self.delivered_index = index
        self.position = LogPosition(index, term)
        pending = self._in_flight.take_applied(entry)
        if pending is not None:
            # Our own entry: apply the commands it was built from rather than decode it again.
            commands: Sequence[Command] = pending.commands
        else:
            try:
                commands = decode_entry(entry)
            except CommandCodecError as exc:
                # Committed but unreadable here (a newer format?): this member's state now lags
                # the group's. Surface it; never pretend it was applied.
                log.critical("raft.entry_undecodable", index=index, error=str(exc))
                self._record_apply_error(index, exc)
                return
        if not commands or self.machine is None:
            return
        try:
            self.machine.apply(commands)
        except Exception as exc:
            log.exception("raft.apply_failed", index=index)
            self._record_apply_error(index, exc)

    def _record_apply_error(self, index: int, exc: BaseException) -> None:
        self.apply_errors += 1
        self.last_apply_error = f"entry {index}: {type(exc).__name__}: {exc}"
        self.failed_deliveries.add(index)

    def _restore_on_loop(self, state: bytes, index: int) -> None:
        assert self.machine is not None
        try:
            finishing = self.machine.restore(state)
        except Exception:
            self._restored(index)
            log.exception("raft.restore_failed", index=index)
            return
        if finishing is None:
            self._restored(index)
        else:
            # Not applied up to `index` until the machine says so (status shows the old index).
            self.handoff.hold_until(finishing, first=(self._restored, (index,)))

    def _restored(self, index: int) -> None:
        self.delivered_index = index
        self.position = LogPosition(index, self.position.term)
