"""MESSAGE and CONNECTED frames carry the Raft term of the leader that wrote them
(`raftmq-term`), so a client that has seen a higher term can tell a deposed leader's frames; a
producer cannot set it."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest
import stomp

from raftmq.embedded import EmbeddedBroker

pytestmark = pytest.mark.integration
WAIT = 10


class Frames(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.connected: queue.Queue[Any] = queue.Queue()
        self.messages: queue.Queue[Any] = queue.Queue()

    def on_connected(self, frame: Any) -> None:
        self.connected.put(frame)

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)


def test_frames_carry_the_leaders_term_and_a_sender_cannot_forge_it(tmp_path: Path) -> None:
    with EmbeddedBroker(nodes=3, data_dir=tmp_path) as broker:
        leader = broker.wait_for_leader()
        term = int(broker.status(leader)["term"])
        address = broker.addresses[broker.node_ids.index(leader)]
        conn = stomp.Connection12([address], timeout=WAIT, reconnect_attempts_max=1)
        frames = Frames()
        conn.set_listener("t", frames)
        conn.connect(wait=True)
        try:
            assert frames.connected.get(timeout=WAIT).headers["raftmq-term"] == str(term)
            conn.subscribe("/queue/term", id="1", ack="auto")
            conn.send("/queue/term", "forged", headers={"raftmq-term": "999999"})
            message = frames.messages.get(timeout=WAIT)
            assert message.body == "forged" and message.headers["raftmq-term"] == str(term)
        finally:
            conn.disconnect()
