"""Nothing in the repository points outside it: no absolute path of someone's machine (a home or
work folder), and no bare issue number of a tracker the repository does not carry. Every tracked
text file is read; the tracked files come from git's index, read here without starting git.

Scratch paths under the system's temp folder are allowed: every POSIX machine has one, and the
examples use it as a throwaway working directory. An upstream bug is named by its repository
(`owner/project#123` or the issue's URL), which says where to look."""

from __future__ import annotations

import re
import struct
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent

# A folder that only exists on one kind of machine, written as an absolute path: a home folder
# (Linux, macOS, root's, Windows) or a build machine's work folder.
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|root|home|Users)/|\b[A-Za-z]:\\Users\\")
# The word issue followed by a number (after a space, '#' or '-'): a tracker that is not here.
ISSUE_NUMBER = re.compile(r"\bissues?[\s#-]*\d", re.IGNORECASE)
BINARY_SNIFF_BYTES = 8192
REGULAR_FILE_MODES = (0o100644, 0o100755)  # not symlinks (0o120000) nor submodules (0o160000)


def _git_dir(root: Path) -> Path:
    dot_git = root / ".git"
    if dot_git.is_file():  # a worktree: "gitdir: <path>"
        target = Path(dot_git.read_text().split(":", 1)[1].strip())
        return target if target.is_absolute() else (root / target).resolve()
    return dot_git


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset encoding (varint.c): the value and the position after it."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def tracked_files(root: Path) -> list[str]:
    """Paths of the regular files in git's index (format versions 2, 3 and 4), as `git ls-files`
    lists them."""
    data = (_git_dir(root) / "index").read_bytes()
    signature, version, count = struct.unpack(">4sII", data[:12])
    assert signature == b"DIRC" and version in (2, 3, 4), (signature, version)
    at, previous, paths = 12, b"", []
    for _ in range(count):
        start = at
        (mode,) = struct.unpack(">I", data[at + 24:at + 28])
        (flags,) = struct.unpack(">H", data[at + 60:at + 62])
        at += 62 + (2 if version >= 3 and flags & 0x4000 else 0)
        if version == 4:
            strip, at = _varint(data, at)
            end = data.index(b"\0", at)
            path = previous[:len(previous) - strip] + data[at:end]
            at = end + 1
        else:
            end = data.index(b"\0", at)
            path = data[at:end]
            at = start + ((end - start + 8) & ~7)
        previous = path
        if mode in REGULAR_FILE_MODES:
            paths.append(path.decode())
    return paths


def findings(name: str, text: str) -> list[str]:
    """`name:line: the line` for every line that names a machine path or an issue number."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if MACHINE_PATH.search(line) or ISSUE_NUMBER.search(line):
            found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_the_index_lists_this_file_and_the_package() -> None:
    files = tracked_files(REPOSITORY)
    assert "tests/test_repository_hygiene.py" in files
    assert "raftmq/__init__.py" in files
    assert "pyproject.toml" in files


def test_the_patterns_find_what_they_are_for() -> None:
    home, work = "/" + "home/someone/x", "/" + "work/shared/peers"
    assert findings("a.md", f"ok\ncp -r {work} .\nsee {home}")  == [f"a.md:2: cp -r {work} .", f"a.md:3: see {home}"]
    for line in ("as issue" + " 3 asked", "the Issue" + " #15 sitting", "the issue" + "-15 run", "issues" + " 8 and 9"):
        assert findings("b.md", line), line
    for line in ("wolfcw/libfaketime#426", "github.com/o/p/issues/426", "/tmp/deep5", "https://x.org/home/a",
                 "~/work/a", "the issue's aims", "$HOME/work"):
        assert not findings("c.md", line), line


def test_no_tracked_file_names_a_machine_path_or_an_issue_number() -> None:
    found: list[str] = []
    for name in tracked_files(REPOSITORY):
        path = REPOSITORY / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            continue
        found += findings(name, data.decode("utf-8", errors="replace"))
    assert not found, "machine paths or issue numbers (say what they are instead):\n" + "\n".join(found)


def test_test_modules_have_names_of_their_own() -> None:
    # The test folders are no packages: pytest imports each module by its base name, and a
    # second module of the same name fails the collection ("import file mismatch").
    seen: dict[str, Path] = {}
    for path in sorted((REPOSITORY / "tests").rglob("test_*.py")):
        if "node_modules" in path.parts:
            continue
        assert path.name not in seen, f"{path} and {seen[path.name]} share a module name"
        seen[path.name] = path
