"""Temporary queues and request/reply on real processes with stomp.py: a requester on g1
names `/temp-queue/...` in `reply-to`, a responder on g2 answers to the rewritten name and the
answer crosses back; RabbitMQ-style (no SUBSCRIBE) and ActiveMQ-style (SUBSCRIBE first) both
work; nobody else may consume the queue, and it is gone when its connection closes."""

from __future__ import annotations

import time
from typing import Any

import pytest
import stomp

from tests.helpers.cluster_harness import Cluster

pytestmark = pytest.mark.integration


class Responder(stomp.ConnectionListener):
    """Answers every request on /queue/requests to its reply-to, with the body reversed."""

    def __init__(self, connection: stomp.Connection12) -> None:
        self.connection = connection
        self.answered = 0

    def on_message(self, frame: Any) -> None:
        self.connection.send(frame.headers["reply-to"], frame.body[::-1])
        self.answered += 1


def connect(cluster: Cluster, group: str) -> tuple[stomp.Connection12, stomp.listener.TestListener]:
    connection = stomp.Connection12([cluster.addresses(group)[0]])
    listener = stomp.listener.TestListener()
    connection.set_listener("", listener)
    connection.connect(wait=True)
    return connection, listener


def wait_for(listener: stomp.listener.TestListener, count: int, timeout: float = 15.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while len(listener.message_list) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return listener.message_list


def test_request_reply_across_groups_with_temporary_queues(three_groups: Cluster) -> None:
    cluster = three_groups
    responder_connection, _ = connect(cluster, "g2")
    responder = Responder(responder_connection)
    responder_connection.set_listener("responder", responder)
    responder_connection.subscribe("/queue/requests", id="work", ack="auto")
    activemq, activemq_heard = connect(cluster, "g1")
    rabbit, rabbit_heard = connect(cluster, "g3")
    stranger, stranger_heard = connect(cluster, "g1")
    try:
        time.sleep(1.5)  # the responder's binding reaches the other groups
        activemq.subscribe("/temp-queue/answers", id="mine", ack="auto")
        time.sleep(1.0)  # and the temporary queue's binding reaches g2
        activemq.send("/queue/requests", "olleh", headers={"reply-to": "/temp-queue/answers"})
        [(headers, body)] = wait_for(activemq_heard, 1)
        assert body == "hello" and headers["subscription"] == "mine"
        private = headers["destination"]
        assert private.startswith("/queue/$temp.") and private.endswith(".answers")

        # RabbitMQ's way: no SUBSCRIBE; the reply-to subscribes the connection.
        rabbit.send("/queue/requests", "dlrow", headers={"reply-to": "/temp-queue/r"})
        [(headers, body)] = wait_for(rabbit_heard, 1)
        assert body == "world" and headers["subscription"] == "/temp-queue/r"

        # Only the owner consumes it.
        refusals: list[Any] = []
        stranger.set_listener("refusals", type("Refusals", (stomp.ConnectionListener,),
                                               {"on_error": lambda _self, frame: refusals.append(frame)})())
        stranger.subscribe(private, id="steal", ack="auto")
        deadline = time.monotonic() + 10
        while not refusals and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refusals and "another connection" in refusals[0].body and not stranger_heard.message_list

        g1 = cluster.groups["g1"]
        destinations = lambda: (g1.status("n1") or {}).get("broker", {}).get("destinations", {})  # noqa: E731
        deadline = time.monotonic() + 10
        while private not in destinations() and time.monotonic() < deadline:
            time.sleep(0.05)  # n1 may be a follower a moment behind
        assert private in destinations()
        # Its connection goes: the queue goes (the DISCONNECT's receipt may come after n1 applied it).
        activemq.disconnect()
        deadline = time.monotonic() + 10
        while private in destinations() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert private not in destinations()
        assert responder.answered == 2
    finally:
        for connection in (responder_connection, rabbit, stranger, activemq):
            if connection.is_connected():
                connection.disconnect()
