"""Frames of a deposed leader, dropped: raftmq's MESSAGE and CONNECTED frames carry
`raftmq-term`, the Raft term of the leader that wrote them. A client that has seen a term drops
a MESSAGE from a lower one: it comes from a leader that lost its leadership (a paused or cut-off
process that resumed), and the new leader delivers that message again. Frames without the
header (other brokers) pass."""

from __future__ import annotations

from raftmq.protocol.frame import TERM_HEADER, Frame


class TermFloor:
    """The highest leader term seen; one per client, shared by a failover client's connections."""

    def __init__(self) -> None:
        self.highest = 0
        self.dropped = 0  # MESSAGE frames from an older term

    def see(self, term: int) -> None:
        self.highest = max(self.highest, term)

    def admits(self, frame: Frame) -> bool:
        """Record the frame's term; False for a frame from a term older than one seen."""
        value = frame.get(TERM_HEADER)
        if value is None or not value.isdigit():
            return True
        term = int(value)
        if term < self.highest:
            self.dropped += 1
            return False
        self.highest = term
        return True
