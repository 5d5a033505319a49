"""Counting the broker's source lines that a piece of work runs: a measure of work that does not
depend on the machine's load, for tests that hold "costs nothing per stored message".

The compiled build runs no source lines, so where it is installed the counting is done in a
process that runs the source (`RAFTMQ_PURE_PYTHON=1`); such tests are marked integration."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from raftmq.core import dispatch

ROOT = Path(__file__).resolve().parents[2]
SOURCE = str(Path(dispatch.__file__ or "").resolve().parent.parent)  # the raftmq package


def lines_run(work: Callable[[], object]) -> int:
    """How many lines of raftmq's source `work()` runs (a line tracer; none in compiled code)."""
    count = 0

    def trace(frame: FrameType, event: str, _arg: object) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return trace if frame.f_code.co_filename.startswith(SOURCE) else None

    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def source_runs() -> bool:
    return (dispatch.__file__ or "").endswith(".py")


def counts(target: str, sizes: list[int]) -> list[int]:
    """`module:function` (taking a size, answering a count of lines) for each of `sizes`: here when
    the source runs, else in a process that runs it."""
    module_name, function = target.split(":")
    if source_runs():
        count_of = getattr(importlib.import_module(module_name), function)
        return [int(count_of(size)) for size in sizes]
    code = (f"from {module_name} import {function} as count_of;"
            f"print(*(count_of(size) for size in {sizes!r}))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "RAFTMQ_PURE_PYTHON": "1"},
                         capture_output=True, text=True, timeout=120, check=True, cwd=ROOT)
    return [int(word) for word in out.stdout.split()]
