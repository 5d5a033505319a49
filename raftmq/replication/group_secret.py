"""A group's Raft secret: the configured password, or a random one the first member to start
writes (0600) into the group's data directory. The Raft wire (raftmq.replication.wire) proves it
in its handshake and derives its keys from it. Imports no pysyncobj.
"""

from __future__ import annotations

import os
from pathlib import Path

from raftmq.errors import ConfigError

SECRET_FILE = "group.secret"


def group_secret(password: str | None, group_dir: str | os.PathLike[str]) -> str:
    """The configured password, or the secret stored in `group_dir/group.secret`, created
    (0600, race-free: members of a group may start at the same moment) when missing."""
    if password:
        return password
    directory = Path(group_dir)
    path = directory / SECRET_FILE
    directory.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = directory / f".{SECRET_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(32).hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another member got there first: theirs wins
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ConfigError(f"{path}: the group secret must be readable by its owner only (mode {mode:o}; chmod 600 it)")
    secret = path.read_text(encoding="ascii", errors="replace").strip()
    if len(secret) < 16:
        raise ConfigError(f"{path}: not a group secret (too short); remove it to have a new one made")
    return secret
