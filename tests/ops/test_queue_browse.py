"""`raftmq queue browse` (CliRunner) and the clients' browse, against the shared single-node
broker: the messages are shown in queue order and stay where they were."""

from __future__ import annotations

import itertools
import json
import os

import pytest
from click.testing import CliRunner, Result

from raftmq.cli import main
from raftmq.client.sync import Client

pytestmark = pytest.mark.integration

_numbers = itertools.count(1)


def fresh_queue() -> str:
    return f"/queue/browse.{os.getpid()}.{next(_numbers)}"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def url_of(broker: tuple[str, int]) -> str:
    return f"stomp://{broker[0]}:{broker[1]}"


def send(url: str, queue: str, body: str, *headers: str) -> None:
    options = [part for header in headers for part in ("-H", header)]
    result = run("send", queue, body, *options, "--url", url)
    assert result.exit_code == 0, result.output


def test_browse_shows_the_queue_in_order_and_consumes_nothing(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    send(url, queue, "low", "priority:1")
    send(url, queue, "first", "color:red")
    send(url, queue, "urgent", "priority:9")
    shown = run("queue", "browse", queue, "--url", url)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == "urgent\nfirst\nlow\n"
    assert shown.stderr == f"browsed 3 message(s) in {queue}\n"
    assert run("queue", "browse", queue, "--url", url).stdout == "urgent\nfirst\nlow\n"  # still there
    received = run("receive", queue, "--count", "3", "--json", "--url", url)
    records = [json.loads(line) for line in received.stdout.splitlines()]
    assert [r["body"] for r in records] == ["urgent", "first", "low"]
    assert all("redelivered" not in r["headers"] and r["headers"]["delivery-count"] == "1" for r in records)
    empty = run("queue", "browse", queue, "--url", url)
    assert empty.exit_code == 0 and empty.stdout == "" and empty.stderr == f"browsed 0 message(s) in {queue}\n"


def test_count_selector_json_and_headers(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    for i in range(5):
        send(url, queue, f"m{i}", f"n:{i}")
    limited = run("queue", "browse", queue, "--count", "2", "--url", url)
    assert limited.stdout == "m0\nm1\n"
    assert limited.stderr == f"browsed 2 message(s) in {queue}; more are waiting (at most --count 2 shown)\n"
    picked = run("queue", "browse", queue, "--selector", "n > 2", "--json", "--url", url)
    records = [json.loads(line) for line in picked.stdout.splitlines()]
    assert ([(r["body"], r["headers"]["n"], r["destination"]) for r in records]
            == [("m3", "3", queue), ("m4", "4", queue)])
    assert all("ack" not in r["headers"] and r["headers"]["delivery-count"] == "0" for r in records)
    with_headers = run("queue", "browse", queue, "--count", "1", "--show-headers", "--url", url)
    head, _, rest = with_headers.stdout.partition("\n\n")
    assert f"destination:{queue}" in head.splitlines() and "n:0" in head.splitlines()
    assert rest == "m0\n\n"
    # The purge that follows finds all five: browsing moved nothing.
    assert run("queue", "purge", queue, "--idle", "0.3", "--url", url).stdout == f"purged 5 message(s) from {queue}\n"


def test_browse_errors(broker: tuple[str, int]) -> None:
    url = url_of(broker)
    topic = run("queue", "browse", "/topic/x", "--url", url)
    assert topic.exit_code == 2 and "browse works on queues" in topic.stderr
    too_many = run("queue", "browse", "/queue/x", "--count", "10001", "--url", url)
    assert too_many.exit_code == 2 and "10001" in too_many.stderr
    bad_selector = run("queue", "browse", "/queue/x", "--selector", "a =", "--url", url)
    assert bad_selector.exit_code == 1
    lines = bad_selector.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the broker refused: invalid selector"), bad_selector.stderr


def test_sync_client_browse_returns_the_frames(broker: tuple[str, int]) -> None:
    queue, url = fresh_queue(), url_of(broker)
    with Client.connect(url) as client:
        for i in range(3):
            client.send(queue, f"b{i}")
        frames = client.browse(queue, 2)
        assert [frame.body for frame in frames] == [b"b0", b"b1"]
        assert [frame.body for frame in client.browse(queue)] == [b"b0", b"b1", b"b2"]
        subscription = client.subscribe(queue, "client-individual", prefetch=1)
        first = subscription.receive(timeout=5)
        assert first is not None and first.body == b"b0"
        # b0 is in flight now: a browse shows only what waits.
        assert [frame.body for frame in client.browse(queue, selector="priority = 4")] == [b"b1", b"b2"]
        subscription.close()
