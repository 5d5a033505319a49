from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import InProcessNode, NodeProcess


@pytest.fixture(scope="session")
def node_process() -> Iterator[NodeProcess]:
    """One real `python -m raftmq node` shared by the subprocess tests (each uses its own
    destinations). At the end it must stop cleanly on SIGTERM, without a traceback."""
    node = NodeProcess()
    try:
        yield node
        code = node.terminate()
        stderr = "".join(node.stderr_lines)
        assert code == 0, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        assert "broker.apply_failed" not in stderr and "client.internal_error" not in stderr, stderr[-3000:]
    finally:
        node.kill()


@pytest.fixture
def address(node_process: NodeProcess) -> tuple[str, int]:
    return node_process.address


@pytest.fixture
def inproc() -> Iterator[InProcessNode]:
    runner = InProcessNode()
    try:
        yield runner
    finally:
        runner.stop()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    """A started 3-member group of real node processes, killed by pid afterwards."""
    group = Group(tmp_path)
    try:
        group.start()
        yield group
    finally:
        group.close()
