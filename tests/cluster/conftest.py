"""Fixtures of the cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cluster_harness import Cluster


@pytest.fixture
def three_groups(tmp_path: Path) -> Iterator[Cluster]:
    """Three single-node groups in a mesh (one cluster connection), started, links up; stopped
    by pid at the end."""
    made = Cluster(tmp_path, ["g1", "g2", "g3"])
    try:
        made.start()
        made.wait_links()
        yield made
    finally:
        made.close()
