"""The Spark part of the suite: one SparkSession for the session (`local[2]`, UI off, few
shuffle partitions), and real chaos runs made once, short, for the tests that audit real files."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark_audit.session import spark_session

    session = spark_session("local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


def _chaos_run(out: Path, **options: Any) -> Path:
    from chaos.run import RunOptions, run

    run_dir, result = run(RunOptions(out=out, time_limit_s=6.0, rate=40.0, **options))
    assert result.valid, f"the fixture's chaos run is not valid: {run_dir}"
    return run_dir


@pytest.fixture(scope="session")
def group_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the default preset (one group of three) under kills, left as it ended."""
    return _chaos_run(tmp_path_factory.mktemp("group-run"), preset="default", nemeses=("kill",), seed=11)


@pytest.fixture(scope="session")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of symmetric-lite (three single-node groups, bridges between them)."""
    return _chaos_run(tmp_path_factory.mktemp("cluster-run"), preset="symmetric-lite", nemeses=("kill",), seed=12)


def copy_run(source: Path, root: Path, name: str) -> Path:
    """A copy of a run directory under a new name (the audit names runs by directory)."""
    target = root / name
    shutil.copytree(source, target, symlinks=True)
    return target
