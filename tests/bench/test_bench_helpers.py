"""The benchmarks' own helpers still fit the shipped files and the replica: the group file the
benchmark groups start from is written back as it was read (bench.node_group.toml_dumps: it
once refused the group file's lists of strings), and the follower's apply benchmark builds a
replica that applies (bench/follower_apply.py: its host once lacked awaiting_adoption)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bench.follower_apply import entries, one_round
from bench.node_group import toml_dumps

REPOSITORY = Path(__file__).resolve().parents[2]


def test_the_shipped_group_file_is_written_back_as_it_was_read() -> None:
    document = tomllib.loads((REPOSITORY / "configs" / "group.toml").read_text())
    assert any(isinstance(value, list) and value and isinstance(value[0], str)
               for value in document["server"].values()), "the shipped file has a list of strings to write"
    assert tomllib.loads(toml_dumps(document)) == document


def test_the_follower_apply_benchmark_applies_its_entries() -> None:
    assert one_round(entries(50, 1_700_000_000_000), 50) > 0
