"""Restart requests: how `raftmq restart --rolling` asks the supervisor of `raftmq up` (the
nodes' parent, the only one that can start them again as its children) to restart one node.
A request is an empty file `<state dir>/restart-requests/<group>@<node>` (neither name may hold an "@"); the supervisor
removes it once the node runs again (raftmq.ops.supervisor)."""

from __future__ import annotations

import contextlib
from pathlib import Path

REQUEST_DIR = "restart-requests"

NodeKey = tuple[str, str]


def request_restart(state_dir: Path, key: NodeKey) -> Path:
    directory = state_dir / REQUEST_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key[0]}@{key[1]}"
    path.touch()
    return path


def requested_restarts(state_dir: Path) -> list[NodeKey]:
    directory = state_dir / REQUEST_DIR
    if not directory.is_dir():
        return []
    keys = []
    for path in sorted(directory.iterdir()):
        group, at, node = path.name.partition("@")
        if at and group and node:
            keys.append((group, node))
    return keys


def clear_restart_request(state_dir: Path, key: NodeKey) -> None:
    with contextlib.suppress(FileNotFoundError):
        (state_dir / REQUEST_DIR / f"{key[0]}@{key[1]}").unlink()
