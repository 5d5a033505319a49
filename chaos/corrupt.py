"""The corrupt nemesis's damage: flipped bits and truncations in a stopped member's files.

A member keeps its Raft journal and snapshot in `<member dir>/raft/` and its body journal in
`<member dir>/bodies/*.seg` (docs/raft-journal-format.md, docs/journal-format.md). `damage`
picks one of those files and one kind of damage from a seeded Random, so a run replays:

- `bitflip`: one bit of the file's written bytes (never the reserved zeros past the last Raft
  record, which hold nothing) is inverted;
- `truncate`: the file is cut at a point inside its written bytes.

What a member must do with damaged files, and what the nemesis checks at heal: start, having
cut off only what it can prove was never acknowledged (a torn tail past the stored commit
index: the leader sends it again), or refuse to start and say which file is damaged. It must
never start on damaged data silently. A member that refuses is repaired the way an operator
would: its directory is moved aside (kept in the run directory for the audit) and it starts
empty, resynced from its peers (chaos.faults.corrupt).
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from raftmq.errors import RaftJournalError
from raftmq.replication.pysyncobj.raft_journal_format import scan_journal

KINDS = ("bitflip", "truncate")
# What a member says when it refuses to start on damaged files (raftmq.app.group): the body
# journal's JournalCorrupt, the Raft journal's and snapshot's RaftJournalError.
REFUSAL_WORDS = ("corrupt", "damaged", "checksum", "not a raftmq", "refusing to start", "unreadable")


@dataclass(frozen=True, slots=True)
class Damage:
    path: str  # relative to the member directory
    kind: str  # bitflip / truncate
    offset: int  # the byte flipped, or the new length
    size: int  # the file's size before
    bit: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidates(member_dir: Path) -> list[Path]:
    """The member's files worth damaging, in a stable order: Raft journal, snapshot, segments."""
    raft = member_dir / "raft"
    files = [raft / "raft.journal", raft / "raft.snapshot", *sorted((member_dir / "bodies").glob("*.seg"))]
    return [path for path in files if path.is_file() and path.stat().st_size > 0]


def written_bytes(path: Path) -> int:
    """How much of the file holds data: a Raft journal ends at its last record (reserved zeros
    follow), every other file at its size."""
    if path.name == "raft.journal":
        try:
            return scan_journal(path.read_bytes(), str(path)).end
        except RaftJournalError:
            return path.stat().st_size
    return path.stat().st_size


def damage(member_dir: Path, rng: random.Random, kinds: tuple[str, ...] = KINDS) -> Damage | None:
    """Damage one of the member's files (the member must be stopped); None when it has none yet."""
    files = candidates(member_dir)
    if not files:
        return None
    path = rng.choice(files)
    kind = rng.choice(kinds)
    size, written = path.stat().st_size, written_bytes(path)
    if written <= 0:
        return None
    relative = str(path.relative_to(member_dir))
    if kind == "truncate":
        offset = rng.randrange(0, written)
        os.truncate(path, offset)
        return Damage(relative, kind, offset, size)
    offset, bit = rng.randrange(0, written), rng.randrange(8)
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))
        f.flush()
        os.fsync(f.fileno())
    return Damage(relative, kind, offset, size, bit)


def refusal_for_damage(output: str) -> str | None:
    """The line of a member's last words that says it refused to start because of damaged
    files (the last such line), or None when they say no such thing."""
    for line in reversed(output.splitlines()):
        if any(word in line.lower() for word in REFUSAL_WORDS):
            return line.strip()
    return None


def refused_for_damage(output: str) -> bool:
    return refusal_for_damage(output) is not None
