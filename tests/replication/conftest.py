"""Fixtures of the pysyncobj wing's regression tests (tests/replication/test_pysyncobj_*.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftmq.replication.pysyncobj.patches import ALL_FIXES, Fixes, apply_module_fixes
from tests.helpers.raft_members import Members, fixes_from_environment


@pytest.fixture
def fixes() -> Iterator[Fixes]:
    """All fixes, less those named in RAFTMQ_TEST_DISABLE_FIX. pysyncobj's module-level names
    are process-wide: they are put back for the tests that follow."""
    yield fixes_from_environment()
    apply_module_fixes(ALL_FIXES)


@pytest.fixture
def group(tmp_path: Path, fixes: Fixes) -> Iterator[Members]:
    members = Members(tmp_path, fixes)
    yield members
    members.stop_all()
