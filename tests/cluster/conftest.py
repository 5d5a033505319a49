"""Fixtures of the cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cluster_harness import Cluster


def linked_groups(tmp_path: Path, **options: Any) -> Iterator[Cluster]:
    """Three single-node groups in a mesh (one cluster connection; `options` go to `Cluster`),
    started, links up; stopped by pid at the end. Fixtures yield from it."""
    made = Cluster(tmp_path, ["g1", "g2", "g3"], **options)
    try:
        made.start()
        made.wait_links()
        yield made
    finally:
        made.close()


@pytest.fixture
def three_groups(tmp_path: Path) -> Iterator[Cluster]:
    """Three single-node groups in a mesh, started, links up (`linked_groups`)."""
    yield from linked_groups(tmp_path)
