"""The hot modules compiled from their own Python source, and the switch that runs them from it.

The modules in `HOT_MODULES` are plain Python, checked by mypy strict like the rest. An install
(`pip install .` or `pip install -e .`, setup.py) compiles them with mypyc into extension modules
beside their source, which Python then imports instead of the `.py` files. Nothing else changes:
the behaviour is the same, the tests are the same, and both builds are tested (the pure tests
under `RAFTMQ_PURE_PYTHON=1` in CI).

The source runs instead of the compiled build when:
- `RAFTMQ_PURE_PYTHON=1` is set (to compare, to debug with pdb or py-spy's line numbers);
- the install compiled nothing (`RAFTMQ_COMPILE=0` at install time, or no C compiler);
- a hot module's source changed since the build (an editable install being worked on): the
  build stored each source's hash in `BUILD_FILE`, and one that differs makes *every* hot module
  run from source, with a warning naming the file and the command that rebuilds. All or none:
  compiled modules call each other directly and share classes, so a mix would not work.

`mode()` says which build runs ("compiled", "pure", or "pure (...why)"); `raftmq --version`,
the node's start line and admin /status show it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PURE_ENV = "RAFTMQ_PURE_PYTHON"
BUILD_FILE = "compiled_sources.json"  # in this package's folder, written by setup.py
REBUILD = "pip install -e ."

# Interpreter-bound modules on the per-message path (docs/benchmarks.md, the profile table).
HOT_MODULES: tuple[str, ...] = (
    "raftmq.protocol.codec",
    "raftmq.core.dispatch",
    "raftmq.core.dispatch_paging",
    "raftmq.core.dispatch_redelivery",
    "raftmq.core.broker",
    "raftmq.core.model",
    "raftmq.core.state",
    "raftmq.replication.command_codec",
    "raftmq.protocol.frame",
    "raftmq.server.stomp.frames",
    "raftmq.server.stomp.translate",
    "raftmq.server.stomp.session",
    "raftmq.server.stomp.authorization",
    "raftmq.server.stomp.decisions",
    "raftmq.storage.records",
    "raftmq.storage.payload",
    "raftmq.server.replica.bodies",
    "raftmq.core.commands",
    "raftmq.core.effects",
    "raftmq.hot_values",
    "raftmq.core.message",
    "raftmq.core.message_headers",
    "raftmq.core.schedule",
    "raftmq.protocol.header_block",
    "raftmq.core.validation",
    "raftmq.routing.route",
    "raftmq.protocol.mqtt.primitives",
    "raftmq.protocol.mqtt.properties",
    "raftmq.protocol.mqtt.packets",
    "raftmq.protocol.mqtt.codec",
    "raftmq.protocol.mqtt.topics",
    "raftmq.server.mqtt.headers",
    "raftmq.server.mqtt.outbound",
    "raftmq.server.mqtt.decisions",
    "raftmq.server.mqtt.kept",
    "raftmq.server.mqtt.aliases",
    "raftmq.server.mqtt.subscriptions",
    "raftmq.server.mqtt.session",
)

_PACKAGE = Path(__file__).parent


class StaleBuild(UserWarning):
    """A hot module's source differs from what was compiled: the source runs."""


def source_path(module: str) -> Path:
    return _PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def source_hash(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def _compiled_file(module: str) -> Path | None:
    source = source_path(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_name(source.stem + suffix)
        if candidate.exists():
            return candidate
    return None


def _why_pure() -> str | None:
    """None when the compiled build runs; else why not."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE_ENV} is set"
    if any(_compiled_file(module) is None for module in HOT_MODULES):
        return "not compiled at install"
    try:
        built = json.loads((_PACKAGE / BUILD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{BUILD_FILE} is missing"
    changed = [module for module in HOT_MODULES if built.get(module) != source_hash(module)]
    if changed:
        first = source_path(changed[0]).relative_to(_PACKAGE.parent)
        warnings.warn(f"raftmq: {first} changed since it was compiled: running every hot module from source "
                      f"(rebuild with `{REBUILD}`)", StaleBuild, stacklevel=3)
        return f"{first} changed since the build"
    return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds each hot module's `.py` file ahead of its extension module."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in HOT_MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


_reason: str | None = None
_decided = False


def choose() -> None:
    """Run from source where `_why_pure` says so; once, before any hot module is imported
    (raftmq/__init__.py calls it)."""
    global _reason, _decided
    if _decided:
        return
    _decided = True
    _reason = _why_pure()
    if _reason is not None and not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def mode() -> str:
    choose()
    if _reason is None:
        return "compiled"
    return "pure" if _reason == f"{PURE_ENV} is set" else f"pure ({_reason})"


def is_compiled(module: ModuleType) -> bool:
    return not str(module.__file__ or "").endswith(".py")
