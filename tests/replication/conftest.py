"""Fixtures of the pysyncobj wing's regression tests (tests/replication/test_pysyncobj_*.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftmq.replication.pysyncobj.patches import apply_module_fixes
from tests.helpers.raft_members import Members
from tests.helpers.unfixed import syncobj_class, unfixed_from_environment


@pytest.fixture
def unfixed() -> Iterator[frozenset[str]]:
    """The fixes named in RAFTMQ_TEST_DISABLE_FIX, undone for the members a test builds
    (tests/helpers/unfixed.py). pysyncobj's module-level names are process-wide: ours are put
    back for the tests that follow."""
    yield unfixed_from_environment()
    apply_module_fixes()


@pytest.fixture
def group(tmp_path: Path, unfixed: frozenset[str]) -> Iterator[Members]:
    members = Members(tmp_path, syncobj_class(unfixed))
    yield members
    members.stop_all()
