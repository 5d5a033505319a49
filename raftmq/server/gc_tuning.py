"""The garbage collector, tuned for a broker node's allocation pattern, and long collections
logged (`node.gc_pause`)."""

from __future__ import annotations

import gc
import time
from typing import Any

import structlog

log = structlog.get_logger("raftmq.server.node")

GC_GEN0_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)
GC_PAUSE_LOG_SECONDS = 0.03
_gc_tuned = False


def tune_gc() -> None:
    # Every message allocates a few dozen short-lived container objects (frames, commands,
    # effects); at the default gen-0 threshold (700) the collector ran thousands of times a
    # second (~11 % of a 3-node leader's busy CPU, py-spy --native) and its full collections
    # walk every long-lived object. Freeze what exists at the first start (imports, config)
    # and collect young objects less often. Once per process: nodes started in-process (tests)
    # must not freeze each other's garbage.
    global _gc_tuned
    if _gc_tuned:
        return
    _gc_tuned = True
    gc.freeze()
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(GC_GEN0_THRESHOLD, first), second, third)


def watch_gc_pauses() -> None:
    """Log long collections (`node.gc_pause`); for a node's own process (`raftmq node`), not
    for a process that merely hosts nodes (tests, the embedded broker)."""
    if _time_collections not in gc.callbacks:
        gc.callbacks.append(_time_collections)


def unwatch_gc_pauses() -> None:
    if _time_collections in gc.callbacks:
        gc.callbacks.remove(_time_collections)


_collection_started = 0.0


def _time_collections(phase: str, info: dict[str, Any]) -> None:
    """Log a collection that stopped the process long enough to matter (`node.gc_pause`): past
    a tenth of the election timeout it starves Raft's heart-beats too."""
    global _collection_started
    if phase == "start":
        _collection_started = time.perf_counter()
        return
    paused = time.perf_counter() - _collection_started
    if paused >= GC_PAUSE_LOG_SECONDS:
        log.warning("node.gc_pause", generation=info.get("generation"), ms=round(paused * 1000, 1),
                    collected=info.get("collected"))
