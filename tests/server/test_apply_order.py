"""The order in which a real group member executes one committed batch, recorded, against the one
written statement of it (the numbered steps in raftmq.replication.commit_log's docstring).

A durable single-member group runs in this process (RaftLog, pysyncobj, the body journal). A
consumer subscribes, a producer sends one message with a receipt, and each step of the shell
records itself when it runs: the Raft journal's fdatasync (tick thread), `BodyStore.begin`,
`Broker.apply`, the sessions' receipt/deliver, `BodyStore.end`, the producer's socket write and
the completion of the producer's proposal future. The steps are read from the docstring, so text and code cannot drift
apart without this test failing.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftmq.core.commands import Send
from raftmq.embedded import EmbeddedBroker
from raftmq.replication import commit_log
from tests.helpers.proxy import Proxy
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

STEP = re.compile(r"^(\d+)\. (\w+) -- ", re.MULTILINE)


def written_steps() -> list[str]:
    doc = commit_log.__doc__ or ""
    steps = STEP.findall(doc)
    assert [int(number) for number, _ in steps] == list(range(1, len(steps) + 1)), "numbered in order"
    return [name for _, name in steps]


class Trace:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.recording = False
        self.lock = threading.Lock()

    def record(self, step: str) -> None:
        if self.recording:
            with self.lock:
                self.events.append(step)

    def first(self, step: str) -> int:
        assert step in self.events, f"{step} never ran: {self.events}"
        return self.events.index(step)


def wrap(obj: Any, name: str, before: Callable[..., None] | None = None,
         after: Callable[..., None] | None = None) -> None:
    original = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(*args, **kwargs)
        return result

    setattr(obj, name, wrapper)


def test_a_member_executes_a_committed_batch_in_the_written_order(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    steps = written_steps()
    assert sorted(steps) == sorted(["durable", "references", "core", "effects", "bodies", "socket", "settled"])
    trace = Trace()
    fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        fdatasync(fd)
        if threading.current_thread() is not loop_thread:
            trace.record("durable")

    with EmbeddedBroker(data_dir=tmp_path) as broker:
        leader = broker.wait_for_leader()
        node = broker._running[leader].node
        loop_thread = broker._thread
        consumer = broker.client()
        subscription = consumer.subscribe("/queue/order", ack="client-individual")
        before = set(node.sessions)
        producer = broker.client()
        assert consumer.send("/queue/warm-up", b"x") is not None  # the subscription is applied
        [producer_session] = set(node.sessions) - before
        replica = node.replica
        assert replica.bodies is not None

        def install() -> None:
            def recorded(step: str, name: str, when: Callable[..., bool] = lambda *a: True) -> Callable[..., Any]:
                def method(target: Any, *args: Any, **kwargs: Any) -> Any:
                    if when(*args):
                        trace.record(step)
                    return getattr(target, name)(*args, **kwargs)

                return method

            # Proxies, not patches: the body store and the core may be compiled (raftmq.compiled).
            replica.bodies = Proxy(replica.bodies, begin=recorded("references", "begin"),  # type: ignore[assignment]
                                   end=recorded("bodies", "end"))
            replica.broker = Proxy(replica.broker,  # type: ignore[assignment]
                                   apply=recorded("core", "apply", when=lambda command: type(command) is Send))
            for session in node.sessions.values():
                wrap(session, "receipt", before=lambda *a: trace.record("effects"))
                wrap(session, "deliver", before=lambda *a: trace.record("effects"))
            connection = node.sessions[producer_session]
            queued: list[int] = []
            output = connection.output
            wrap(output, "_flush", before=lambda: queued.append(len(output._out)),
                 after=lambda: trace.record("socket") if queued.pop() and not output._out else None)
            # The commit log tells the producer's connection its proposal settled.
            wrap(connection.proposals, "settled", before=lambda *a: trace.record("settled"))
            trace.recording = True

        async def on_loop() -> None:
            install()

        monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
        broker._call(on_loop(), 5.0)
        assert producer.send("/queue/order", b"the message") is not None  # the RECEIPT arrived
        delivery = subscription.receive(timeout=10)
        assert delivery is not None and delivery.body == b"the message"
        # The RECEIPT may reach the client before the proposal settles (steps 6 and 7 are unordered).
        assert wait_until(lambda: "settled" in trace.events, 10.0), trace.events
        trace.recording = False

    events = trace.events
    first = {step: trace.first(step) for step in steps}
    # Steps 1-5 ran in the written order; steps 6 and 7 both after step 5, in either order (as
    # written). Step 4 ran twice (the RECEIPT, the MESSAGE) before the bodies were written.
    assert [first[step] for step in steps[:5]] == sorted(first[step] for step in steps[:5]), (steps, events)
    assert min(first[steps[5]], first[steps[6]]) > first[steps[4]], (steps, events)
    assert events[first["effects"]:first["bodies"]] == ["effects", "effects"], events
