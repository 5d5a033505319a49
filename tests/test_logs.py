"""raftmq.logs in this process: handlers, levels, rendering, slow fsyncs, no print()."""

from __future__ import annotations

import ast
import asyncio
import io
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner

import raftmq
from raftmq.cli import main
from raftmq.logs import LEVEL_ENV, REDACTED, configure_logging, our_handlers, parse_level, reset_logging
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.storage import journal as journal_module
from raftmq.storage.journal import Journal
from raftmq.storage.records import Record

RAFTMQ_DIR = Path(raftmq.__file__).parent


@pytest.fixture(autouse=True)
def clean_logging() -> Iterator[None]:
    reset_logging()
    yield
    reset_logging()


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_calling_configure_again_does_not_duplicate_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "logs" / "node.jsonl"  # the directory is created
    configure_logging(json_path=path, console=False)
    configure_logging(json_path=path, console=False)
    assert len(our_handlers()) == 2  # one file, one console
    structlog.get_logger("raftmq.test").info("test.once", n=1)
    lines = json_lines(path)
    assert [line["event"] for line in lines] == ["test.once"]
    line = lines[0]
    assert list(line)[:4] == ["timestamp", "level", "logger", "event"]
    assert line["level"] == "info" and line["logger"] == "raftmq.test" and line["n"] == 1
    assert line["timestamp"].endswith("Z")  # ISO 8601 in UTC
    console = capsys.readouterr().err.splitlines()
    assert len(console) == 1 and console[0].startswith("timestamp=") and "event='test.once'" in console[0]

    reset_logging()
    assert our_handlers() == []
    assert not any(getattr(h, "_raftmq_handler", False) for h in logging.getLogger().handlers)


def test_stdlib_records_of_libraries_reach_the_same_handlers(tmp_path: Path) -> None:
    path = tmp_path / "node.jsonl"
    configure_logging(json_path=path, console=False)
    logging.getLogger("pysyncobj").warning("connection to %s lost", "peer1")

    async def failing() -> None:
        raise RuntimeError("boom in a task")

    loop = asyncio.new_event_loop()
    try:
        # asyncio reports an exception nobody retrieved through its stdlib logger.
        loop.call_exception_handler({"message": "Task exception was never retrieved",
                                     "exception": RuntimeError("boom")})
    finally:
        loop.close()
    by_logger = {line["logger"]: line for line in json_lines(path)}
    assert by_logger["pysyncobj"]["event"] == "connection to peer1 lost"
    assert by_logger["pysyncobj"]["level"] == "warning"
    assert by_logger["asyncio"]["level"] == "error"
    assert "RuntimeError: boom" in by_logger["asyncio"]["exception"]


def test_exceptions_stay_one_line_on_a_plain_console(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(console=False)
    try:
        raise ValueError("bad thing")
    except ValueError:
        structlog.get_logger("raftmq.test").exception("test.failed")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "ValueError: bad thing" in lines[0] and "event='test.failed'" in lines[0]


def test_console_is_pretty_exactly_when_stderr_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    for stream, pretty in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        configure_logging()  # console=None: decided by stderr
        structlog.get_logger("raftmq.test").info("test.render", field="v")
        out = stream.getvalue()
        assert "test.render" in out
        assert ("\x1b[" in out) is pretty, out  # colour codes
        assert out.startswith("timestamp=") is not pretty, out


def test_level_filters_and_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEVEL_ENV, "WARNING")
    assert parse_level(None) == logging.WARNING
    assert parse_level("debug") == logging.DEBUG  # an explicit level wins over the environment
    path = tmp_path / "node.jsonl"
    configure_logging(json_path=path, console=False)
    log = structlog.get_logger("raftmq.test")
    log.info("test.hidden")
    log.warning("test.shown")
    logging.getLogger("pysyncobj").info("hidden too")
    assert [line["event"] for line in json_lines(path)] == ["test.shown"]

    configure_logging(json_path=path, console=False, level="debug")  # loggers follow a reconfiguration
    log.debug("test.debug_now")
    assert json_lines(path)[-1]["event"] == "test.debug_now"

    monkeypatch.setenv(LEVEL_ENV, "loud")
    with pytest.raises(ValueError, match=r"\$RAFTMQ_LOG_LEVEL: unknown log level 'loud'"):
        configure_logging(console=False)


def test_cli_rejects_an_unknown_level() -> None:
    result = CliRunner().invoke(main, ["node", "--log-level", "loud"])
    assert result.exit_code == 2 and "Invalid value for '--log-level'" in result.output
    result = CliRunner().invoke(main, ["node"], env={LEVEL_ENV: "loud"})
    assert result.exit_code == 2 and "Invalid value for '--log-level'" in result.output


def test_credential_fields_are_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "node.jsonl"
    configure_logging(json_path=path, console=False)
    structlog.get_logger("raftmq.test").info("test.secret", password="hunter2", passcode="swordfish", login="bob")
    line = json_lines(path)[0]
    assert line["password"] == REDACTED and line["passcode"] == REDACTED and line["login"] == "bob"
    err = capsys.readouterr().err
    assert "hunter2" not in err and "swordfish" not in err and "bob" in err


def test_slow_body_journal_fsync_is_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "node.jsonl"
    configure_logging(json_path=path, console=False)
    real_fsync = os.fsync
    delay = 0.08

    def slow_fsync(fd: int) -> None:
        time.sleep(delay)
        real_fsync(fd)

    with Journal(tmp_path / "fast", fsync_slow_ms=10_000) as journal:
        journal.append_batch([Record(1, 1, 0, b"quick")])
        journal.sync()
    assert not [line for line in json_lines(path) if line["event"] == "journal.fsync_slow"]

    monkeypatch.setattr(journal_module.os, "fsync", slow_fsync)
    with Journal(tmp_path / "slow", fsync_slow_ms=50) as journal:
        journal.append_batch([Record(1, 1, 0, b"body")])
        journal.sync()
        segment = journal.segments()[0].path
    slow = [line for line in json_lines(path) if line["event"] == "journal.fsync_slow"]
    assert slow, json_lines(path)
    assert {line["file"] for line in slow} >= {segment}  # and its directory, new in this sync
    assert all(line["level"] == "warning" and line["duration_ms"] >= delay * 1000 and line["threshold_ms"] == 50
               for line in slow)


def test_slow_raft_journal_fsync_is_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "node.jsonl"
    configure_logging(json_path=path, console=False)
    raft_path = str(tmp_path / "raft.journal")
    journal = RaftJournal(raft_path)
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        time.sleep(journal_module.FSYNC_SLOW_MS / 1000 + 0.02)
        real_fdatasync(fd)

    try:
        monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
        journal.add(b"entry", 1, 1)
        journal.sync()
    finally:
        monkeypatch.setattr(os, "fdatasync", real_fdatasync)
        journal._destroy()
    slow = [line for line in json_lines(path) if line["event"] == "journal.fsync_slow"]
    assert len(slow) == 1 and slow[0]["file"] == raft_path
    assert slow[0]["duration_ms"] >= journal_module.FSYNC_SLOW_MS


@pytest.mark.integration
def test_no_print_calls_in_the_package() -> None:
    """CLI output goes through click.echo or a rich Console; everything else logs."""
    offenders = []
    for source in sorted(RAFTMQ_DIR.rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{source.relative_to(RAFTMQ_DIR.parent)}:{node.lineno}")
    assert offenders == []


def test_event_names_are_dotted() -> None:
    """Every structlog event of the package is `area.event`, lower case."""
    bad = []
    methods = {"debug", "info", "warning", "error", "exception", "critical"}
    for source in sorted(RAFTMQ_DIR.rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "log" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                name = node.args[0].value
                area, dot, event = name.partition(".")
                if not (dot and area.isidentifier() and area.islower()
                        and event.replace(".", "_").isidentifier() and event.islower()):
                    bad.append(f"{source.relative_to(RAFTMQ_DIR.parent)}:{node.lineno}: {name!r}")
    assert bad == []
