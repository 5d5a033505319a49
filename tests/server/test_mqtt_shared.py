"""Shared subscriptions (`$share/GROUP/FILTER`) with paho-mqtt, 3.1.1 and 5.0, against a node and
a group: the members compete for one copy of each message, a member's unacknowledged messages go
to another when it leaves, a kept session's place in the share collects while it is away, and the
next leader has the share its predecessor served."""

from __future__ import annotations

import queue
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from raftmq.embedded import EmbeddedBroker  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group, mqtt_node  # noqa: E402
from tests.helpers.paho_clients import Client, publish_all  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def port() -> Iterator[int]:
    yield from mqtt_node()


def drain(clients: list[Client], within: float = 1.0) -> list[tuple[int, bytes]]:
    """(which client, payload) of everything the clients got until none got anything for `within` s."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < within and time.monotonic() < deadline:
        for index, client in enumerate(clients):
            try:
                while True:
                    got.append((index, client.messages.get_nowait().payload))
                    quiet_since = time.monotonic()
            except queue.Empty:
                pass
        time.sleep(0.02)
    return got


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_the_members_of_a_share_compete_and_a_plain_subscriber_gets_everything(port: int, version: int) -> None:
    members = [Client(port, version, f"worker-{n}", keep=False) for n in range(3)]
    plain = Client(port, version, "watcher", keep=False)
    try:
        for member in members:
            member.subscribe("$share/workers/jobs/+", 1)
        plain.subscribe("jobs/+", 1)
        bodies = [f"job-{n}".encode() for n in range(30)]
        publish_all(port, "jobs/a", bodies)
        shared = drain(members)
        assert sorted(body for _who, body in shared) == sorted(bodies), "each job once to the share"
        assert set(Counter(who for who, _b in shared)) == {0, 1, 2}, "every member took some"
        assert sorted(m.payload for m in plain.received(30)) == sorted(bodies)
    finally:
        for client in (*members, plain):
            client.close()


def test_what_a_member_did_not_acknowledge_goes_to_another_when_it_leaves(port: int) -> None:
    silent = Client(port, 5, "silent", keep=False, manual_ack=True)
    silent.subscribe("$share/g/work", 1)
    publish_all(port, "work", [b"held"])
    [held] = silent.received(1)
    assert held.payload == b"held"
    other = Client(port, 5, "other", keep=False)
    try:
        other.subscribe("$share/g/work", 1)
        silent.client.disconnect()  # without a PUBACK
        silent.client.loop_stop()
        [again] = other.received(1)
        assert again.payload == b"held" and again.dup
    finally:
        other.close()


def test_a_kept_sessions_place_in_the_share_collects_while_it_is_away(port: int) -> None:
    keeper = Client(port, 4, "keeper", keep=True)
    keeper.subscribe("$share/g/kept/#", 1)
    keeper.close()
    publish_all(port, "kept/x", [b"one", b"two"])
    back = Client(port, 4, "keeper", keep=True)
    try:
        assert back.session_present
        assert sorted(m.payload for m in back.received(2)) == [b"one", b"two"]
        back.client.unsubscribe("$share/g/kept/#")
        time.sleep(0.3)
    finally:
        back.close()
    publish_all(port, "kept/x", [b"after the unsubscribe"])
    again = Client(port, 4, "keeper", keep=True)
    try:
        assert again.nothing_more(), "the share went with its last holder"
    finally:
        again.close()


def test_the_next_leader_serves_the_share_its_predecessor_served(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        first = Client(mqtt[leader], 5, "member", keep=True)
        first.subscribe("$share/g/r/#", 1)
        publish_all(mqtt[leader], "r/1", [b"before"])
        assert first.received(1)[0].payload == b"before"
        first.client.loop_stop()  # the client is cut off; its leader goes
        running.stop_node(leader)
        successor = running.wait_for_leader()
        publish_all(mqtt[successor], "r/2", [b"while away"])
        back = Client(mqtt[successor], 5, "member", keep=True)
        try:
            assert back.session_present
            assert [m.payload for m in back.received(1)] == [b"while away"]
            assert back.nothing_more()
        finally:
            back.close()
