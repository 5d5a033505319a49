"""Requests to the supervisor of `raftmq up`. Restart requests: how `raftmq restart --rolling`
asks the supervisor of `raftmq up` (the nodes' parent, the only one that can start them again as
its children) to restart one node.
A request is an empty file `<state dir>/restart-requests/<group>@<node>` (neither name may hold
an "@"); the supervisor removes it once the node runs again (raftmq.ops.supervisor)."""

from __future__ import annotations

import contextlib
import json
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


# -- members joining and leaving (`raftmq group add-node / remove-node`) ---------------------
# `<state dir>/member-requests/join@<group>@<node>` holds the JSON of the NodeProcess fields a
# new member is started with (group, id, client, raft, admin, argv, log); `leave@<group>@<node>`
# is empty. The supervisor starts (or stops for good) the node and removes the request.

MEMBER_REQUEST_DIR = "member-requests"
JOIN, LEAVE = "join", "leave"


def request_member(state_dir: Path, kind: str, key: NodeKey, spec: dict[str, object] | None = None) -> Path:
    directory = state_dir / MEMBER_REQUEST_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{kind}@{key[0]}@{key[1]}"
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(spec or {}), encoding="utf-8")
    temporary.replace(path)  # the supervisor never reads half a request
    return path


def member_requests(state_dir: Path) -> list[tuple[str, NodeKey, dict[str, object]]]:
    directory = state_dir / MEMBER_REQUEST_DIR
    if not directory.is_dir():
        return []
    requests = []
    for path in sorted(directory.iterdir()):
        kind, group, node = (path.name.split("@") + ["", ""])[:3]
        if kind in (JOIN, LEAVE) and group and node:
            try:
                spec = json.loads(path.read_text(encoding="utf-8") or "{}")
            except (OSError, ValueError):
                continue
            requests.append((kind, (group, node), spec if isinstance(spec, dict) else {}))
    return requests


def clear_member_request(state_dir: Path, kind: str, key: NodeKey) -> None:
    with contextlib.suppress(FileNotFoundError):
        (state_dir / MEMBER_REQUEST_DIR / f"{kind}@{key[0]}@{key[1]}").unlink()


def pending_member_request(state_dir: Path, kind: str, key: NodeKey) -> bool:
    return (state_dir / MEMBER_REQUEST_DIR / f"{kind}@{key[0]}@{key[1]}").exists()
