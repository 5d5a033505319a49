"""No new copy in production code: `duplicates` (a command of the project's tool library, on the
build machines' PATH) lists the places that share six or more lines, and every pair of production
modules it finds (boilerplate aside) must be one of those accepted in tests/duplicates_known.txt.
Pairs are named by their two files, so code that moves within a file does not trip the check."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
KNOWN = Path(__file__).with_name("duplicates_known.txt")
PRODUCTION = ("raftmq/", "cluster/", "chaos/", "spark_audit/")
_ROW = re.compile(r"^D\d+ (\S+?):\d+-\d+ ~ (\S+?):\d+-\d+(.*)$")


def production_pairs(report: str) -> set[str]:
    """`a.py ~ b.py` (sorted) for each row of a `duplicates` report whose two places are both in
    production packages and that it does not mark as boilerplate."""
    pairs = set()
    for line in report.splitlines():
        row = _ROW.match(line.strip())
        if row is None or "boilerplate" in row.group(3):
            continue
        first, second = row.group(1), row.group(2)
        if first.startswith(PRODUCTION) and second.startswith(PRODUCTION):
            pairs.add(" ~ ".join(sorted((first, second))))
    return pairs


def known_pairs() -> set[str]:
    return {line.strip() for line in KNOWN.read_text().splitlines() if line.strip() and not line.startswith("#")}


@pytest.mark.integration  # a process of its own
def test_no_new_copy_in_production_code() -> None:
    tool = shutil.which("duplicates")
    if tool is None:
        pytest.skip("the duplicates command is not installed on this machine")
    done = subprocess.run([tool, "--most", "200", "--seconds", "120"], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=300)
    assert "incomplete:" not in done.stdout, done.stdout[-2000:]
    assert "more pairs)" not in done.stdout, "more pairs than --most shows: raise it"
    new = sorted(production_pairs(done.stdout) - known_pairs())
    assert new == [], f"new copies in production code: {new} (fold them, or accept them in {KNOWN.name} with a reason)"


def test_the_check_names_a_new_pair_and_passes_over_the_rest() -> None:
    report = "\n".join([
        "3 pairs of places (10 files read), ...",
        "D1 raftmq/a.py:1-9 ~ raftmq/b.py:20-28 shape (+1 more run)",  # planted: a new production pair
        "D2 tests/x.py:1-9 ~ raftmq/b.py:1-9",  # a test's copy
        "D3 chaos/c.py:1-9 ~ chaos/d.py:1-9 shape boilerplate",
    ])
    assert production_pairs(report) == {"raftmq/a.py ~ raftmq/b.py"}
    assert "raftmq/a.py ~ raftmq/b.py" not in known_pairs()
