"""Hypothesis drives a real 3-member group (sends, acks, nacks, kill -9 of followers and
leaders, loss of the majority, restarts) and checks every client-visible outcome against
`group_model.QueueModel`.

One group serves every example; each example uses its own queue. Producer and consumer are
`FailoverClient`s (leader redirects, resends of unreceipted SENDs with the same
`_AMQ_DUPL_ID`) on an event loop of their own thread, so they live through the faults as a
client process would. A SEND or ACK counts as done only when its RECEIPT arrived; anything else
(an error, a timeout, no majority) is recorded as unknown, never as done. The teardown of each
example restarts every member, closes the run's clients, waits until the leader holds no
session, drains the queue with a fresh consumer and checks the model, and the leader's
counters: nothing left in the queue, and exactly as many messages enqueued as ids delivered.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from raftmq.client import FailoverClient, FailoverSubscription, connect_failover
from raftmq.errors import ClientError
from tests.helpers.group_harness import Group, body_for
from tests.helpers.group_model import ModelViolation, QueueModel

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

BODY_SIZE = 200
PREFETCH = 8
# The client stops reading its socket (RECEIPTs included) while a subscription's queue is
# full, and by default that queue holds `prefetch` messages: with PREFETCH messages buffered,
# awaiting an ACK's RECEIPT before taking the next message would stall. The broker never has
# more than PREFETCH in flight to us, so a larger queue never fills.
QUEUE_SIZE = 8 * PREFETCH
SEND_TIMEOUT_MS = 3000  # the failover client fails a SEND without a RECEIPT after this long
MINORITY_SEND_WAIT = 1.0  # without a majority nothing can be receipted: wait less, then give up
ACK_TIMEOUT = 3.0
RULE_TIMEOUT = 8.0  # no rule's client work may take longer
FIRST_MESSAGE_WAIT = 0.7
NEXT_MESSAGE_WAIT = 0.3
DRAIN_IDLE = 0.8
DRAIN_TIMEOUT = 20.0
LEADER_WAIT = 3.0
SEED_MESSAGES = 4
# Client-individual acks, nacks and the consumers' breaks redeliver a message many times;
# the dead-letter queue would take it from the queue the model watches.
CORE_OVERRIDES = "[core]\nmax_delivery_count = 1000\n"

MACHINE_SETTINGS = settings(
    max_examples=5,
    stateful_step_count=12,
    deadline=None,
    database=None,
    # Shrinking replays whole examples against real processes: minutes. The failing step
    # sequence is printed without it.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much),
)

ACTIONS = ("ack", "ack", "ack", "nack", "keep")  # what the consumer does with each message


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    group = Group(tmp_path_factory.mktemp("stateful-group"))
    with open(group.config_path, "a") as config:
        config.write(CORE_OVERRIDES)
    try:
        group.start()
        group.leader(timeout=15)
        yield group
    finally:
        group.close()


def failover_url(group: Group) -> str:
    nodes = ",".join(f"stomp://{member.client}" for member in group.members.values())
    return (
        f"failover:({nodes})?randomize=false&initialReconnectDelay=10&maxReconnectDelay=200"
        f"&timeout={SEND_TIMEOUT_MS}&connectTimeout=1000"
    )


def alive_ids(group: Group) -> list[str]:
    return [node_id for node_id, member in group.members.items() if member.alive]


def find_leader(group: Group, timeout: float = LEADER_WAIT) -> str | None:
    """A live member that says it leads (the highest term if two do), or None after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = {node_id: group.status(node_id, timeout=0.5) for node_id in alive_ids(group)}
        leaders = [(s["term"], node_id) for node_id, s in statuses.items() if s and s["role"] == "leader"]
        if leaders:
            return max(leaders)[1]
        time.sleep(0.05)
    return None


class ClientLoop:
    """An event loop on its own thread: the clients keep running (heart-beats, reconnects,
    sockets closing) while the test thread kills and restarts members, as a real client
    process would. Coroutines run here one at a time, the test thread waiting for each."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="stateful-clients", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(timeout):
                return await coro

        return asyncio.run_coroutine_threadsafe(bounded(), self.loop).result(timeout + 5)

    def close(self) -> None:
        async def cancel_the_rest() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(cancel_the_rest(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


class GroupMachine(RuleBasedStateMachine):
    """One example: one queue, one producer and one consumer, faults in between."""

    def __init__(self, group: Group, totals: dict[str, int]) -> None:
        super().__init__()
        self.group = group
        self.totals = totals
        self.model = QueueModel()
        self.tag = uuid.uuid4().hex[:8]
        self.destination = f"/queue/stateful-{self.tag}"
        self.next_id = 0
        self.clients = ClientLoop()
        self.producer: FailoverClient | None = None
        self.consumer: FailoverClient | None = None
        self.subscription: FailoverSubscription | None = None
        self.down: set[str] = set()  # members this example killed and did not restart

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = RULE_TIMEOUT) -> Any:
        return self.clients.run(coro, timeout)

    @property
    def up(self) -> list[str]:
        return [node_id for node_id in self.group.members if node_id not in self.down]

    # -- setup -------------------------------------------------------------------------------

    @initialize()
    def connect_and_seed(self) -> None:
        """Clients, and a few messages whatever the example's rules turn out to be (with few
        examples hypothesis also tries a near-empty run, or one without sends)."""

        async def connect() -> None:
            url = failover_url(self.group)
            self.producer = await connect_failover(url)
            self.consumer = await connect_failover(url)
            self.subscription = self.consumer.subscribe(
                self.destination, ack="client-individual", prefetch=PREFETCH, queue_size=QUEUE_SIZE
            )
            await self.subscription.receipt

        self.run(connect(), timeout=15)
        self.send_batch(SEED_MESSAGES)

    # -- producing ---------------------------------------------------------------------------

    @rule(count=st.integers(1, 6))
    def send(self, count: int) -> None:
        self.send_batch(count)

    def send_batch(self, count: int) -> None:
        assert self.producer is not None
        ids = [f"{self.tag}-{self.next_id + i}" for i in range(count)]
        self.next_id += count
        # Each SEND fails by itself after SEND_TIMEOUT_MS; the wait is a second bound.
        wait = SEND_TIMEOUT_MS / 1000 + 1 if len(self.down) < 2 else MINORITY_SEND_WAIT

        async def send_all() -> None:
            assert self.producer is not None
            futures: dict[str, asyncio.Future[Any]] = {}
            for message_id in ids:
                self.model.send_issued(message_id)
                try:
                    futures[message_id] = self.producer.send_nowait(
                        self.destination, body_for(message_id, BODY_SIZE),
                        [("_AMQ_DUPL_ID", message_id), ("persistent", "true")], receipt=True,
                    )
                except ClientError:
                    self.model.send_failed(message_id)
            if futures:
                await asyncio.wait(futures.values(), timeout=wait)
            for message_id, future in futures.items():
                if future.done() and not future.cancelled() and future.exception() is None:
                    self.model.send_receipted(message_id)
                else:
                    future.cancel()  # never resent after this: its outcome stays unknown
                    self.model.send_failed(message_id)

        self.run(send_all())

    # -- consuming ---------------------------------------------------------------------------

    @rule(actions=st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=6))
    def receive(self, actions: list[str]) -> None:
        async def take() -> None:
            assert self.consumer is not None and self.subscription is not None
            for position, action in enumerate(actions):
                wait = FIRST_MESSAGE_WAIT if position == 0 else NEXT_MESSAGE_WAIT
                try:
                    frame = await asyncio.wait_for(self.subscription.get(), wait)
                except TimeoutError:
                    return
                message_id = frame.get("_AMQ_DUPL_ID")
                ok = message_id is not None and frame.body == body_for(message_id, BODY_SIZE)
                self.model.delivery(message_id, frame.get("redelivered") == "true", ok)
                assert message_id is not None
                if action == "keep":
                    continue  # in flight until this connection ends, then redelivered
                acknowledge = self.consumer.ack if action == "ack" else self.consumer.nack
                try:
                    sent = await asyncio.wait_for(acknowledge(frame, receipt=True), ACK_TIMEOUT)
                except (ClientError, TimeoutError):
                    if action == "ack":
                        self.model.ack_failed(message_id)
                    return  # this connection is in trouble; keep the rule's time bounded
                # False: the connection that delivered it is gone, nothing was sent; the
                # broker redelivers it. A NACK's outcome changes no obligation of the model.
                if sent and action == "ack":
                    self.model.ack_receipted(message_id)

        self.run(take())

    # -- faults ------------------------------------------------------------------------------
    # Preconditions read `self.down`, which only the rules change: hypothesis requires the
    # same choices to lead to the same available rules, so never the processes' own state.

    @invariant()
    def no_member_crashed(self) -> None:
        for node_id in self.up:
            member = self.group.members[node_id]
            assert member.alive, (f"{node_id} exited by itself ({member.proc and member.proc.poll()}): "
                                  f"{member.stderr()[-2000:]}")

    @precondition(lambda self: not self.down)
    @rule(pick=st.integers(0, 1))
    def kill_follower(self, pick: int) -> None:
        leader = find_leader(self.group)
        followers = [node_id for node_id in self.up if node_id != leader]
        self.kill(followers[pick % len(followers)])

    @precondition(lambda self: not self.down)
    @rule()
    def kill_leader(self) -> None:
        leader = find_leader(self.group)
        self.kill(leader if leader is not None else self.up[0])  # none seen: still one member fewer
        self.totals["leader_kills"] += leader is not None

    @precondition(lambda self: len(self.down) == 1)
    @rule(pick=st.integers(0, 1))
    def kill_to_minority(self, pick: int) -> None:
        """The group loses its majority: nothing may be receipted until a member returns."""
        self.kill(self.up[pick])

    @precondition(lambda self: bool(self.down))
    @rule(pick=st.integers(0, 1))
    def restart(self, pick: int) -> None:
        node_id = sorted(self.down)[pick % len(self.down)]
        self.group.start(node_id)
        self.down.discard(node_id)
        self.totals["restarts"] += 1

    def kill(self, node_id: str) -> None:
        self.group.kill(node_id)
        self.down.add(node_id)
        self.totals["kills"] += 1

    # -- the end of an example ---------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if not self.model.failed:
                self.finish_and_check()
        finally:
            try:
                self.run(self.close_clients(), timeout=15)
            finally:
                self.clients.close()

    def finish_and_check(self) -> None:
        dead = [node_id for node_id, member in self.group.members.items() if not member.alive]
        if dead:
            self.group.start(*dead)
        self.down.clear()
        leader = self.group.leader(timeout=15)
        self.run(self.close_clients(), timeout=15)
        self.wait_no_sessions(leader)
        for message_id, redelivered, ok in self.run(self.drain(), timeout=DRAIN_TIMEOUT + 10):
            self.model.delivery(message_id, redelivered, ok, drain=True)
        leader = self.group.leader(timeout=15)
        self.wait_no_sessions(leader)
        status = self.group.status(leader)
        assert status is not None, f"{leader} does not answer /status"
        counters = status["broker"]["destinations"].get(self.destination, {"enqueued": 0, "depth": 0, "in_flight": 0})
        assert counters["depth"] == 0 and counters["in_flight"] == 0, f"the drain left messages behind: {counters}"
        self.model.check_final(stored_count=counters["enqueued"])
        for name, value in self.model.summary().items():
            self.totals[name] += value
        self.totals["examples"] += 1

    async def close_clients(self) -> None:
        for client in (self.producer, self.consumer):
            if client is not None:
                await client.close(timeout=5)
        self.producer = self.consumer = self.subscription = None

    def wait_no_sessions(self, leader: str, timeout: float = 10.0) -> None:
        """Until the leader holds no session: every consumer of the run gave its unacked
        messages back (closed, or swept after a leader change)."""
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = self.group.status(leader, timeout=1.0)
            if status is not None and status["broker"]["sessions"] == 0:
                return
            time.sleep(0.05)
        members = {
            node_id: (s["role"], s["sessions"], s["broker"]["sessions"], s["sessions_swept"]) if s else None
            for node_id in self.group.members
            for s in [self.group.status(node_id, timeout=1.0)]
        }
        raise AssertionError(
            f"sessions still open on {leader} after {timeout}s; per member (role, connections, sessions in "
            f"the core, swept): {members}; {leader}'s queues: {status and status['broker']['destinations']}"
        )

    async def drain(self) -> list[tuple[str | None, bool, bool]]:
        """Take everything left, acking each, until nothing arrives for DRAIN_IDLE s."""
        client = await connect_failover(failover_url(self.group))
        got: list[tuple[str | None, bool, bool]] = []
        try:
            subscription = client.subscribe(self.destination, ack="client-individual", prefetch=1000)
            await asyncio.wait_for(subscription.receipt, 5)
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while time.monotonic() < deadline:
                try:
                    frame = await asyncio.wait_for(subscription.get(), DRAIN_IDLE)
                except TimeoutError:
                    break
                message_id = frame.get("_AMQ_DUPL_ID")
                ok = message_id is not None and frame.body == body_for(message_id, BODY_SIZE)
                got.append((message_id, frame.get("redelivered") == "true", ok))
                client.ack_nowait(frame)
            else:
                raise AssertionError(f"the drain still received messages after {DRAIN_TIMEOUT}s")
        finally:
            await client.close(timeout=5)  # its DISCONNECT receipt: every ACK before it applied
        return got


def test_group_against_the_model(group: Group) -> None:
    totals: dict[str, int] = dict.fromkeys(
        ("examples", "kills", "leader_kills", "restarts", "sent", "receipted", "send_unknown", "acked",
         "ack_unknown", "deliveries", "redeliveries", "drained"), 0)
    started = time.monotonic()
    run_state_machine_as_test(lambda: GroupMachine(group, totals), settings=MACHINE_SETTINGS)
    print(f"stateful group: {time.monotonic() - started:.1f}s {totals}")
    # Not vacuous: messages went through the group and reached a consumer.
    assert totals["examples"] >= 1
    assert totals["receipted"] > 0 and totals["deliveries"] > 0, totals
    stderr = "".join(member.stderr() for member in group.members.values())
    assert "Traceback" not in stderr, stderr[-3000:]
    for node_id in alive_ids(group):
        status = group.status(node_id)
        assert status is not None, f"{node_id} does not answer /status"
        assert status["failure"] is None and status["apply_failures"] == 0 and status["internal_errors"] == 0, status


# -- the model itself: each check must catch what it is there for ------------------------------


def sent_model(*ids: str) -> QueueModel:
    model = QueueModel()
    for message_id in ids:
        model.send_issued(message_id)
    return model


def test_model_accepts_a_legal_history() -> None:
    model = sent_model("a", "b", "c", "d")
    model.send_receipted("a")
    model.send_receipted("b")
    model.send_failed("c")  # stored after all: delivered, kept in flight, redelivered in the drain
    model.send_failed("d")  # never stored
    model.delivery("a", False, True)
    model.ack_receipted("a")
    model.delivery("c", False, True)
    model.delivery("b", False, True)
    model.ack_failed("b")  # the ACK's outcome is unknown: the drain may or may not have it
    model.delivery("c", True, True, drain=True)
    model.check_final(stored_count=3)


@pytest.mark.parametrize(
    "story",
    [
        "receipted but never delivered",
        "receipted, delivered, not acked, missing from the drain",
        "delivered after its ACK was receipted",
        "stored twice",
        "wrong body",
        "unknown id",
        "enqueued more than delivered",
    ],
)
def test_model_catches_each_violation(story: str) -> None:
    model = sent_model("a", "b")
    model.send_receipted("a")
    with pytest.raises(ModelViolation):
        if story == "receipted but never delivered":
            model.check_final()
        elif story == "receipted, delivered, not acked, missing from the drain":
            model.delivery("a", False, True)
            model.check_final()
        elif story == "delivered after its ACK was receipted":
            model.delivery("a", False, True)
            model.ack_receipted("a")
            model.delivery("a", True, True, drain=True)
        elif story == "stored twice":
            model.send_failed("b")
            model.delivery("b", False, True)
            model.delivery("b", False, True, drain=True)
        elif story == "wrong body":
            model.delivery("a", False, False)
        elif story == "unknown id":
            model.delivery("z", False, True)
        elif story == "enqueued more than delivered":
            model.delivery("a", False, True, drain=True)
            model.check_final(stored_count=2)
    assert model.failed
