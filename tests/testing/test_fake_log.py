"""The fake log: replicas apply one order, restart from snapshots, and are compared byte for byte."""

from __future__ import annotations

import pytest

from raftmq.core.broker import Broker
from raftmq.core.commands import Ack, Command, Connect, Disconnect, Send, Subscribe, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect
from raftmq.protocol.header_block import block_of
from raftmq.testing.fake_log import Divergence, FakeLog, effect_record
from tests.helpers.planted_core import PlantedCore

CONFIG = CoreConfig(broker_name="log", max_delivery_count=3)


def send(session: str, n: int, now: int, **headers: str) -> Send:
    pairs = (("_AMQ_DUPL_ID", f"id-{n}"), *headers.items())
    return Send(session, "/queue/a", block_of(pairs), f"body-{n}".encode(), now, receipt=f"r{n}")


def test_a_crashed_replica_restarts_from_its_snapshot_and_replays_the_suffix() -> None:
    log = FakeLog(CONFIG, replicas=3)
    log.commit([Connect("p", 1), Connect("c", 1),
                Subscribe("c", "s", "/queue/a", 1, ack="client-individual", prefetch=2)])
    log.commit([send("p", n, 2, expires="50") for n in range(4)])
    member = log.members[1]
    log.take_snapshot(member)
    assert member.snapshot is not None and member.snapshot.index == 2
    log.crash(member)
    assert not member.alive and len(log.live()) == 2

    effects = log.commit([send("p", 1, 3), send("p", 9, 3), Tick(100)])  # a retried duplicate, a new one, expiry
    log.commit([Ack("c", 4, ack_id="1"), Disconnect("c", 5)])
    log.restart(member)
    assert member.alive and member.applied == 4
    assert log.counters.replayed == 2 and log.counters.restarts == 1
    log.compare_states()  # byte for byte with the replicas that never went down
    assert [e.message.body for e in effects[1] if isinstance(e, Deliver)] == []


def test_a_restart_can_install_a_peers_newer_snapshot() -> None:
    log = FakeLog(CONFIG, replicas=3)
    log.commit([Connect("p", 1), send("p", 1, 1)])
    log.crash(log.members[2])
    log.commit([send("p", 2, 2)])
    log.take_snapshot(log.members[0])
    log.commit([send("p", 3, 3)])
    log.restart(log.members[2], peer=log.members[0])
    assert log.members[2].applied == 3 and log.counters.replayed == 1 and log.counters.peer_installs == 1
    log.restart_all()
    log.replay_from_scratch()


class Forgetful(PlantedCore):
    """Ignores every second SEND to /queue/b."""

    def __init__(self, config: CoreConfig = CoreConfig(), core: Broker | None = None) -> None:
        super().__init__(config, core)
        self.seen = 0

    def apply(self, command: Command) -> list[Effect]:
        if isinstance(command, Send) and command.destination == "/queue/b":
            self.seen += 1
            if self.seen % 2 == 0:
                return []
        return self.core.apply(command)


def test_replicas_that_differ_are_named_with_the_log_entry() -> None:
    log = FakeLog(CONFIG, replicas=2, core_for=lambda i: Forgetful if i == 1 else Broker)
    log.commit([Connect("p", 1), Send("p", "/queue/b", "", b"x", 1)])
    with pytest.raises(Divergence, match=r"replica 1 and replica 0 differ after log entry 1: "):
        log.commit([Send("p", "/queue/b", "", b"y", 2)])


def test_effects_are_recorded_by_value_when_applied() -> None:
    log = FakeLog(CONFIG, replicas=1)
    log.commit([Connect("p", 1), Connect("c", 1), Subscribe("c", "s", "/queue/a", 1, ack="client-individual")])
    first = log.commit([send("p", 1, 2)])[0]
    record = effect_record(first[0])
    log.commit([Disconnect("c", 3), Connect("c2", 3), Subscribe("c2", "s", "/queue/a", 3, ack="client-individual")])
    deliver = first[0]
    assert isinstance(deliver, Deliver) and deliver.message.delivery_count == 2  # redelivered to c2 since
    assert record[0] == "Deliver" and record[4][0] == "Message"
    assert record[4][-1] == 1  # the message's delivery count as it was when the effect was made


class SelfChecking(PlantedCore):
    """A core with its own invariant check, which fails once a second session connects."""

    def check_invariants(self) -> None:
        assert len(self.session_ids()) < 2, "two sessions"


def test_the_cores_own_invariant_check_runs_on_every_replica() -> None:
    log = FakeLog(CONFIG, replicas=2, core_for=lambda i: SelfChecking)
    log.commit([Connect("a", 1)])
    with pytest.raises(Divergence, match=r"replica 0: the core's invariant check failed after log entry 1: "
                                         r"AssertionError: two sessions"):
        log.commit([Connect("b", 2)])
