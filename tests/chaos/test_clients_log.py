"""What the workloads' independent clients log during a chaos run goes to the run's
`logs/clients.log`, not to the terminal under the run's summary."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chaos.run import clients_logging_to


def test_stomp_py_errors_go_to_the_runs_clients_log_and_not_to_the_terminal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stomp = logging.getLogger("stomp.py")
    path = tmp_path / "logs" / "clients.log"
    with caplog.at_level(logging.ERROR):
        with clients_logging_to(path):
            try:
                raise OSError(9, "Bad file descriptor")
            except OSError:
                stomp.exception("error sending frame")
        assert not [r for r in caplog.records if r.name == "stomp.py"]  # nothing propagated up
        text = path.read_text()
        assert "stomp.py ERROR error sending frame" in text and "Bad file descriptor" in text
        stomp.error("after the run")  # as before again: it propagates
        assert [r.getMessage() for r in caplog.records if r.name == "stomp.py"] == ["after the run"]
    assert "after the run" not in path.read_text()
