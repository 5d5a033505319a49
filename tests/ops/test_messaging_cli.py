"""`raftmq send / receive / queue stat|purge` through click's CliRunner and as real processes,
against the shared single-node broker (`broker`) and an embedded broker (which has an admin
port for `queue stat`)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from raftmq.cli import main
from raftmq.embedded import EmbeddedBroker
from raftmq.ops.launcher import DeploymentState, NodeProcess, write_state
from raftmq.processes import free_ports, process_start_time

pytestmark = pytest.mark.integration

SUBPROCESS_TIMEOUT = 30.0
_queue_numbers = itertools.count(1)


def fresh_queue(prefix: str = "cli") -> str:
    """A queue no other test of this session uses (the broker fixture is shared)."""
    return f"/queue/{prefix}.{os.getpid()}.{next(_queue_numbers)}"


def run(*args: str, input: bytes | str | None = None) -> Result:  # noqa: A002 - click's name
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def url_of(broker: tuple[str, int]) -> str:
    host, port = broker
    return f"stomp://{host}:{port}"


def one_error_line(result: Result) -> str:
    """The command failed with exactly one line on stderr and no traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture(scope="module")
def embedded() -> Iterator[EmbeddedBroker]:
    # Its nodes log through the logging module (EmbeddedBroker.start), never into the captured
    # output of a CliRunner.invoke nor onto the terminal between tests.
    with EmbeddedBroker() as broker:
        yield broker


# -- send / receive against the shared node -----------------------------------------------------


def test_send_three_then_receive_three(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    sent = run("send", queue, "hello", "--count", "3", "--url", url)
    assert sent.exit_code == 0, sent.output
    assert sent.stdout == f"sent 3 message(s) to {queue} (each confirmed by a RECEIPT)\n"
    received = run("receive", queue, "--count", "3", "--timeout", "5", "--url", url)
    assert received.exit_code == 0, received.output
    assert received.stdout == "hello\nhello\nhello\n"


def test_headers_are_sent_and_shown(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    assert run("send", queue, "first", "-H", "color:blue", "-H", "ratio:1:2", "--url", url).exit_code == 0
    assert run("send", queue, "second", "--header", "color:red", "--no-receipt", "--url", url).exit_code == 0
    shown = run("receive", queue, "--headers", "--url", url)
    assert shown.exit_code == 0, shown.output
    head, _, rest = shown.stdout.partition("\n\n")
    lines = head.splitlines()
    assert "color:blue" in lines and "ratio:1:2" in lines and f"destination:{queue}" in lines
    assert rest == "first\n\n"
    as_json = run("receive", queue, "--json", "--ack", "auto", "--url", url)
    assert as_json.exit_code == 0, as_json.output
    record = json.loads(as_json.stdout)
    assert record["body"] == "second" and record["destination"] == queue
    assert record["headers"]["color"] == "red"


def test_body_from_stdin_and_from_a_file(broker: tuple[str, int], tmp_path: Path) -> None:
    queue, url = fresh_queue(), url_of(broker)
    assert run("send", queue, "--url", url, input=b"line one\nline two").exit_code == 0
    binary = bytes(range(256))
    (tmp_path / "body.bin").write_bytes(binary)
    assert run("send", queue, "--file", str(tmp_path / "body.bin"), "--url", url).exit_code == 0
    result = run("receive", queue, "--count", "2", "--json", "--url", url)
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["body"] == "line one\nline two"
    assert "body" not in second and base64.b64decode(second["body_base64"]) == binary


def test_receive_reports_fewer_messages_than_asked(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    assert run("send", queue, "only", "--url", url).exit_code == 0
    result = run("receive", queue, "--count", "2", "--timeout", "0.3", "--url", url)
    assert result.stdout == "only\n"
    assert one_error_line(result) == f"received 1 of 2 message(s) from {queue}; none came within 0.3 s"
    drained = run("receive", queue, "--count", "0", "--timeout", "0.3", "--url", url)
    assert drained.exit_code == 0 and drained.stdout == ""


def test_purge_consumes_everything_and_says_how_many(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    assert run("send", queue, "junk", "--count", "25", "--url", url).exit_code == 0
    purged = run("queue", "purge", queue, "--idle", "0.3", "--url", url)
    assert purged.exit_code == 0, purged.output
    assert purged.stdout == f"purged 25 message(s) from {queue}\n"
    again = run("queue", "purge", queue, "--idle", "0.2", "--url", url)
    assert again.stdout == f"purged 0 message(s) from {queue}\n"


def test_purge_that_runs_out_of_time_says_so(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    assert run("send", queue, "junk", "--count", "5", "--url", url).exit_code == 0
    cut_short = run("queue", "purge", queue, "--timeout", "0.5", "--idle", "30", "--url", url)
    assert "stopped at the --timeout of 0.5 s before the queue stayed empty for 30 s" in one_error_line(cut_short)
    first = int(cut_short.stdout.split()[1])
    rest = run("queue", "purge", queue, "--idle", "0.3", "--url", url)
    assert rest.exit_code == 0
    assert first + int(rest.stdout.split()[1]) == 5


# -- queue stat, and the running local cluster as the default -------------------------------------


def stat_rows(result: Result) -> dict[str, list[str]]:
    lines = result.stdout.splitlines()
    header = next([cell.strip() for cell in line.split("┃")[1:-1]] for line in lines if line.startswith("┃"))
    assert header == ["destination", "type", "depth", "consumers", "in flight", "enqueue rate", "dequeue rate",
                      "enqueued", "dequeued", "expired", "dead lettered"]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    for row in rows:  # rates depend on timing: a number (msg/s) or "-" while the node is too young
        assert all(cell == "-" or float(cell) >= 0 for cell in row[5:7]), row
    return {row[0]: row[1:5] + row[7:] for row in rows}


def test_stat_shows_depth_and_counters_from_the_leader(embedded: EmbeddedBroker) -> None:
    queue, url, admin = fresh_queue("stat"), embedded.url, embedded.admin_addresses[0]
    assert run("send", queue, "m", "--count", "3", "--url", url).exit_code == 0
    before = run("queue", "stat", "--admin", admin)
    assert before.exit_code == 0, before.output
    assert stat_rows(before)[queue] == ["queue", "3", "0", "0", "3", "0", "0", "0"]
    assert run("receive", queue, "--count", "2", "--url", url).exit_code == 0
    as_json = json.loads(run("queue", "stat", "--admin", admin, "--json").stdout)
    (row,) = [row for row in as_json if row["destination"] == queue]
    assert (row["depth"], row["dequeued"], row["consumers"], row["in_flight"]) == (1, 2, 0, 0)
    assert run("queue", "purge", queue, "--idle", "0.3", "--url", url).stdout == f"purged 1 message(s) from {queue}\n"
    assert stat_rows(run("queue", "stat", "--admin", admin))[queue][1:] == ["0", "0", "0", "3", "3", "0", "0"]


def test_commands_default_to_the_running_local_cluster(embedded: EmbeddedBroker, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A state file as `raftmq up` writes it, whose one "node" is this very process (so the
    # liveness check by pid, start time and command line passes) serving the embedded broker.
    pid = os.getpid()
    argv = tuple(part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part)
    (client,) = [f"{host}:{port}" for host, port in embedded.addresses]
    node = NodeProcess("g1", "n1", client, "127.0.0.1:1", embedded.admin_addresses[0], pid,
                       process_start_time(pid) or 0, argv, str(tmp_path / "node.log"))
    state_dir = tmp_path / ".raftmq"
    state_dir.mkdir()
    write_state(DeploymentState("default", str(state_dir), (node,)))
    monkeypatch.chdir(tmp_path)
    queue = fresh_queue("local")
    assert run("send", queue, "to the local cluster").exit_code == 0
    assert stat_rows(run("queue", "stat"))[queue][:2] == ["queue", "1"]
    assert run("receive", queue).stdout == "to the local cluster\n"


def test_without_a_cluster_the_default_url_is_named_in_the_error(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (port,) = free_ports(1)
    topology = tmp_path / "group.toml"
    topology.write_text(f'[group]\nname = "g"\ndata_dir = "{tmp_path / "g"}"\n[[node]]\nid = "a"\n'
                        f'client = "127.0.0.1:{port}"\nraft = "127.0.0.1:{port + 1}"\n', encoding="utf-8")
    line = one_error_line(run("send", "/queue/x", "y", "--config", str(topology), "--connect-timeout", "5"))
    assert line.startswith(f"Error: cannot connect to failover:(stomp://127.0.0.1:{port}) (topology {topology}): ")
    stat = one_error_line(run("queue", "stat", "--config", str(topology)))
    assert "no admin address" in stat and "--admin" in stat


# -- errors ------------------------------------------------------------------------------------


def test_errors_are_one_line(broker: tuple[str, int], tmp_path: Path) -> None:
    (closed_port,) = free_ports(1)
    refused = one_error_line(run("send", "/queue/x", "y", "--url", f"stomp://127.0.0.1:{closed_port}"))
    assert refused.startswith(f"Error: cannot connect to stomp://127.0.0.1:{closed_port} (--url): ")
    assert "Connect call failed" in refused
    assert "unsupported scheme 'http'" in one_error_line(run("receive", "/queue/x", "--url", "http://127.0.0.1:1"))
    assert "expected host:port" in one_error_line(run("queue", "stat", "--admin", "nohost"))
    unreadable = run("send", "/queue/x", "--file", str(tmp_path / "missing.bin"), "--url", url_of(broker))
    assert "missing.bin: cannot read the body" in one_error_line(unreadable)
    invalid = one_error_line(run("send", "not-a-destination", "y", "--url", url_of(broker)))
    assert invalid.startswith("Error: the broker refused: invalid destination")
    missing_config = one_error_line(run("receive", "/queue/x", "--config", str(tmp_path / "nope.toml")))
    assert "nope.toml: file not found" in missing_config
    bad_header = run("send", "/queue/x", "y", "-H", "no-colon", "--url", url_of(broker))
    assert bad_header.exit_code == 2 and "expected NAME:VALUE" in bad_header.stderr
    topic_purge = run("queue", "purge", "/topic/x", "--url", url_of(broker))
    assert topic_purge.exit_code == 2 and "purge works on queues" in topic_purge.stderr
    both = run("send", "/queue/x", "y", "--file", "-", "--url", url_of(broker))
    assert both.exit_code == 2 and "not both" in both.stderr


# -- as real processes --------------------------------------------------------------------------


def raftmq(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:  # noqa: A002
    return subprocess.run([sys.executable, "-m", "raftmq", *args], input=input, capture_output=True,
                          timeout=SUBPROCESS_TIMEOUT, check=False)


def test_real_processes_pipe_a_body_through_the_broker(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue("proc"), url_of(broker)
    sent = raftmq("send", queue, "--url", url, "-H", "origin:stdin", input=b"piped body")
    assert sent.returncode == 0, sent.stderr
    received = raftmq("receive", queue, "--json", "--url", url)
    assert received.returncode == 0, received.stderr
    record = json.loads(received.stdout)
    assert record["body"] == "piped body" and record["headers"]["origin"] == "stdin"
    (closed_port,) = free_ports(1)
    failed = raftmq("receive", queue, "--url", f"stomp://127.0.0.1:{closed_port}")
    assert failed.returncode == 1
    assert failed.stdout == b""
    assert len(failed.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in failed.stderr
