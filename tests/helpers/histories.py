"""Synthetic chaos histories for the checkers' tests: ops recorded with a clock of their own,
each 10 ms after the one before, so liveness figures are exact."""

from __future__ import annotations

from chaos.history import History, Op


class Builder:
    def __init__(self) -> None:
        self.history = History()
        self.clock = 0.0

    def op(self, process: str, type_: str, f: str, value: object = None, redelivered: bool = False,
           error: str | None = None) -> None:
        op = self.history.record(process, type_, f, value, redelivered=redelivered, error=error)
        self.clock += 0.01
        self.history.ops[-1] = Op(op.index, op.process, op.type, op.f, op.value, op.time, self.clock, op.node,
                                  op.redelivered, op.error)
