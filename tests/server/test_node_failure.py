"""A group's leader that fails (its body journal cannot be written: a full disk) stops the way
`raftmq node` stops it, and loses nothing its clients were told: the entries it keeps
committing after the failure, which it no longer applies, make deliveries in every member's
core that it never writes, so it hands no session over (the successor would take the session
as having received them): the sessions end, and what they held goes back to its queue for a
consumer. An in-process 3-member group with a real Raft log; the
failure is the body journal's write raising, as a full disk makes it raise."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cluster.group_file import GroupConfig, GroupMember
from raftmq.config import NodeConfig
from raftmq.embedded import EmbeddedBroker
from raftmq.processes import free_ports
from tests.helpers.stomp_raw import RawClient, RawFrame, frame_bytes, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def group_config(tmp_path: Path) -> GroupConfig:
    ports = free_ports(6)
    members = tuple(GroupMember(id=f"n{i + 1}", client=f"127.0.0.1:{ports[2 * i]}",
                                raft=f"127.0.0.1:{ports[2 * i + 1]}") for i in range(3))
    return GroupConfig(name="g", data_dir=str(tmp_path), members=members, server=NodeConfig())


class FullDisk:
    """The node's body store, whose journal writes now fail as on a full disk."""

    def __init__(self, store: object) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def end(self) -> None:
        raise OSError(28, "No space left on device")


def frames_until(client: RawClient, command: str, timeout: float) -> list[RawFrame]:
    """Frames read until one is `command`, or the socket closes, or `timeout` passes."""
    frames: list[RawFrame] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not client.closed:
        try:
            frame = client.read_frame(timeout=max(0.05, deadline - time.monotonic()))
        except TimeoutError:
            break
        frames.append(frame)
        if frame.command == command:
            break
    return frames


def test_a_leader_whose_body_journal_fails_hands_no_session_over_and_what_it_held_comes_back(tmp_path: Path) -> None:
    queue = unique("/queue/failing")
    with EmbeddedBroker(config=group_config(tmp_path)) as running:
        leader = running.wait_for_leader()
        follower = next(node for node in running.node_ids if node != leader)
        address = {node: address for node, address in zip(running.node_ids, running.addresses, strict=True)}
        # The consumer is relayed by a follower: a session handed over moves without a sound.
        consumer = RawClient(address[follower])
        consumer.connect()
        consumer.send(frame_bytes("SUBSCRIBE", {"id": "s", "destination": queue, "ack": "client-individual",
                                                "activemq.prefetchSize": "1", "receipt": "sub"}))
        assert consumer.read_frame().command == "RECEIPT"
        producer = running.client()
        producer.send(queue, b"first")
        first = consumer.read_frame()
        assert first.command == "MESSAGE" and first.body == b"first"
        producer.send(queue, b"second")  # waits behind the prefetch of one

        node = running._running[leader].node
        bodies = node.replica.bodies
        assert bodies is not None

        node.replica.bodies = FullDisk(bodies)  # type: ignore[assignment]
        producer.send(queue, b"third")  # its entry's bodies fail on the leader: it fails (fail-stop)
        deadline = time.monotonic() + 5
        while node.failure is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.failure is not None and "body journal" in node.failure
        # The ACK commits in an entry the failed leader does not apply: every core delivers
        # "second" to the consumer; only the failed leader would have written it.
        consumer.send(frame_bytes("ACK", {"id": first.headers["ack"]}))
        time.sleep(0.5)
        running.stop_node(leader)  # what `raftmq node` does once its node failed

        got = frames_until(consumer, "MESSAGE", timeout=5)
        if any(frame.command == "MESSAGE" for frame in got):
            raise AssertionError(f"the handed-over session carried on: {got}")
        # The session was ended (ERROR): what it held went back to the queue.
        assert consumer.closed or any(frame.command == "ERROR" for frame in got), got
        again = RawClient(address[running.wait_for_leader()])
        again.connect()
        again.send(frame_bytes("SUBSCRIBE", {"id": "s", "destination": queue, "ack": "auto"}))
        seen: list[bytes] = []
        for _ in range(2):
            seen += [frame.body for frame in frames_until(again, "MESSAGE", timeout=10) if frame.command == "MESSAGE"]
        assert sorted(seen) == [b"second", b"third"], seen
