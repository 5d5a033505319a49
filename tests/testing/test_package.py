"""raftmq.testing: the pytest plugin's names load on use; the simulator needs neither pytest nor the server."""

from __future__ import annotations

import subprocess
import sys

import pytest

import raftmq.testing


def test_the_plugin_names_are_listed_and_load_on_use() -> None:
    assert {"pytest_configure", "raftmq_broker", "raftmq_client"} <= set(dir(raftmq.testing))
    assert callable(raftmq.testing.pytest_configure)


@pytest.mark.integration
def test_importing_the_simulator_imports_neither_pytest_nor_the_server() -> None:
    code = (
        "import sys, raftmq.testing.sim\n"
        "loaded = [m for m in ('pytest', 'raftmq.server', 'raftmq.embedded') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
