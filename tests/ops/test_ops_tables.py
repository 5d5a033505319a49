"""One table style for `raftmq status`, `raftmq queue stat` and `raftmq manage destinations |
connections | consumers` (raftmq.ops.tables): rich tables with the same box, a bold header of
lowercase names and the title above on the left, printed whole into a pipe. Each command runs
here against one fake admin port (/status and the management API)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.table import Table

from raftmq.cli import main
from raftmq.ops.cluster_view import cluster_table, links_table
from raftmq.ops.manage_cli import list_table
from raftmq.ops.messaging import destination_rows, stat_table
from raftmq.ops.status_view import render_status, summarise
from raftmq.ops.tables import HEADER_STYLE, TABLE_BOX, heading, print_tables
from raftmq.processes import free_ports
from tests.ops.test_ops_status_view import NODES, QUEUE, node_status

LONG = "/queue/a.rather.long.destination.name.that.a.pipe.must.not.cut"
ANSWERS = {
    "/status": node_status("leader", 3, 9, 9, {"/queue/orders": QUEUE, "/queue/a": QUEUE}),
    "/api/destinations": {"destinations": [{"destination": LONG, "depth": 3, "in_flight": 0, "consumers": 1,
                                            "enqueued": 3, "dequeued": 0, "dead_lettered": 0, "scheduled": 0}]},
    "/api/connections": {"connections": [{"session": "s-1", "peer": "127.0.0.1:5000", "login": None, "client_id": "app",
                                          "version": "1.2", "subscriptions": 1}]},
    "/api/consumers": {"consumers": [{"destination": "/queue/orders", "sub_id": "0", "session": "s-1",
                                      "selector": None, "ack": "client", "prefetch": 10, "in_flight": 2,
                                      "durable_name": None, "active": True}]},
}


@pytest.fixture
def admin() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            answer = ANSWERS.get(self.path)
            body = json.dumps(answer).encode()
            self.send_response(200 if answer is not None else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def tables_of(text: str) -> list[tuple[str, list[str]]]:
    """(title, headers) of every table printed, in order: a title line, then the box's top,
    the header row (┃) and the line under it (┡)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("┃"):
            assert lines[i - 1].startswith("┏") and lines[i + 1].startswith("┡"), text
            found.append((lines[i - 2].strip(), [cell.strip() for cell in line.split("┃")[1:-1]]))
    return found


def check_style(tables: list[tuple[str, list[str]]]) -> None:
    assert tables
    for title, headers in tables:
        assert title and not title.startswith(("┏", "│", "┃")), title  # every table has its title above it
        assert all(header == heading(header) for header in headers), headers  # lowercase words, no `_`


@pytest.mark.integration
def test_the_three_table_commands_print_one_style(admin: str, tmp_path: Path) -> None:
    raft, client = free_ports(2)
    group = tmp_path / "g1.toml"
    group.write_text(f'[group]\nname = "g1"\ndata_dir = "{tmp_path / "g1"}"\n\n[[node]]\nid = "n1"\n'
                     f'client = "127.0.0.1:{client}"\nraft = "127.0.0.1:{raft}"\nadmin = "{admin}"\n', encoding="utf-8")
    runner = CliRunner()
    outputs = {
        "status": runner.invoke(main, ["status", "--once", "--config", str(group)], catch_exceptions=False),
        "queue stat": runner.invoke(main, ["queue", "stat", "--admin", admin], catch_exceptions=False),
        **{f"manage {name}": runner.invoke(main, ["manage", name, "--admin", admin], catch_exceptions=False)
           for name in ("destinations", "connections", "consumers")},
    }
    for command, result in outputs.items():
        assert result.exit_code == 0, (command, result.output)
        check_style(tables_of(result.stdout))
    assert tables_of(outputs["queue stat"].stdout)[0][1] == ["destination", "type", "depth", "consumers", "in flight",
                                                            "enqueue rate", "dequeue rate", "enqueued", "dequeued",
                                                            "expired", "dead lettered"]
    assert tables_of(outputs["manage consumers"].stdout)[0][1][:3] == ["group", "destination", "sub id"]
    assert LONG in outputs["manage destinations"].stdout  # a pipe gets the whole table, not 80 columns of it


def test_every_table_is_made_alike() -> None:
    summary = summarise([(NODES[1], node_status("leader", 4, 9, 9, {"/queue/orders": QUEUE}))])
    made: list[Table] = [part for part in render_status(summary).renderables if isinstance(part, Table)]
    made.append(stat_table(destination_rows(summary), show_group=True))
    made += [list_table(name, []) for name in ("destinations", "connections", "consumers")]
    made += [links_table([{"from": "g1", "to": "g2", "state": "connected"}]),
             cluster_table({"/queue/orders": {"g1": {"depth": 1, "consumers": 0}, "g2": {"depth": 0, "consumers": 1}}})]
    assert len(made) == 8
    for table in made:
        assert (table.box, table.header_style, table.title_justify) == (TABLE_BOX, HEADER_STYLE, "left")
        assert table.title
    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=60)
    print_tables(made[-1], console=console)  # on a terminal: its width (60), headers bold
    assert "\x1b[1m" in console.file.getvalue()  # type: ignore[attr-defined]
