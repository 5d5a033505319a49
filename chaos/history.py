"""A run's history, Jepsen's way: every operation is an `invoke` record followed by exactly one
`ok` (it happened), `fail` (it certainly did not) or `info` (outcome unknown: a SEND whose
receipt never came may or may not be stored). Deliveries to consumers are `ok` records of `f`
`receive`; the nemesis's faults are records of process `nemesis`. One JSON object per line
(`history.jsonl`), appended as the run goes, so a crash of the harness still leaves a history.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = (INVOKE, OK, FAIL, INFO)
NEMESIS = "nemesis"


@dataclass(frozen=True, slots=True)
class Op:
    index: int
    process: str  # "p3" (a producer), "c1" (a consumer), "nemesis"
    type: str  # invoke / ok / fail / info
    f: str  # send, receive, kill, pause, heal, ...
    value: Any = None  # a send's or receive's value; a fault's target
    time: float = 0.0  # wall clock, seconds since the epoch
    mono: float = 0.0  # monotonic seconds since the run started
    node: str | None = None  # the node the client was connected to, or the fault hit
    redelivered: bool = False  # a receive the broker flagged as a redelivery
    error: str | None = None  # why a fail / info

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None and v is not False},
                          separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Op:
        return cls(**data)


class History:
    """Appends ops to a file (or keeps them in memory with `path=None`), thread-safe: the
    nemesis runs in a thread of its own."""

    def __init__(self, path: Path | None = None, start: float | None = None) -> None:
        self._file: TextIO | None = path.open("a", encoding="utf-8") if path is not None else None
        self._lock = threading.Lock()
        self._start = time.monotonic() if start is None else start
        self.ops: list[Op] = []

    def record(self, process: str, type_: str, f: str, value: Any = None, *, node: str | None = None,
               redelivered: bool = False, error: str | None = None) -> Op:
        with self._lock:
            op = Op(len(self.ops), process, type_, f, value, time.time(), round(time.monotonic() - self._start, 6),
                    node, redelivered, error)
            self.ops.append(op)
            if self._file is not None:
                self._file.write(op.to_json() + "\n")
                self._file.flush()
            return op

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_history(path: Path) -> list[Op]:
    return list(iter_history(path))


def iter_history(path: Path) -> Iterator[Op]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield Op.from_dict(json.loads(line))
