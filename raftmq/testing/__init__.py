"""Testing aids for raftmq: the pytest plugin and the deterministic simulator.

The pytest plugin (its hook and fixtures live in `raftmq.testing.fixtures`) is enabled in a
project's top-level `conftest.py` with::

    pytest_plugins = ["raftmq.testing"]

or, in a conftest further down the tree, with `from raftmq.testing import *`. It gives the
`raftmq_broker` and `raftmq_client` fixtures (see `raftmq.testing.fixtures`).

The simulator (`raftmq.testing.sim`, with `raftmq.testing.fake_log`) runs replicas of the
broker core behind a fake commit log from one seed; `python -m raftmq.testing.sim --seeds 100`
runs it by hand (docs/simulator.md).

The plugin's names are loaded on first use (PEP 562), not on import: the simulator must run
where pytest is not installed and without importing the server, and importing
`raftmq.testing.sim` imports this package first. `dir()` lists them, so pytest, which walks a
plugin module's `dir()` for hooks and fixtures, and `import *` both see them.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["pytest_configure", "raftmq_broker", "raftmq_client"]

_PLUGIN_MODULE = "raftmq.testing.fixtures"


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module(_PLUGIN_MODULE), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
