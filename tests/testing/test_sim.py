"""The simulator: seeded runs pass, replay identically, and catch the bugs it exists for.

Each planted bug is a `Broker` subclass given to some replicas through `run(core_for=...)`:
one replica that drops a SEND, one whose effect order depends on a value local to it, state
kept outside the snapshot (caught only once a replica restarts), and bugs every replica shares
(an acknowledged SEND lost, an ACK settled as a NACK, no duplicate detection), which only the model's properties catch.
"""

from __future__ import annotations

import random
import zlib

import pytest

from raftmq.core.broker import Broker
from raftmq.core.commands import Ack, Command, Nack, Send
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Effect, Receipt
from raftmq.protocol.header_block import without
from raftmq.testing import sim
from raftmq.testing.fake_log import CoreFor, CoreKind, Faults
from raftmq.testing.sim import SimulationFailure, run
from tests.helpers.planted_core import PlantedCore

SEEDS = range(8)
STEPS = 400  # 8 x 400 = 3200 seeded steps, a few seconds


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_runs_keep_replicas_identical_and_the_properties(seed: int) -> None:
    result = run(seed, STEPS)
    assert result.steps == STEPS
    assert result.deliveries > 0 and result.acknowledged_sends > 0
    assert result.comparisons >= STEPS


def test_a_seed_replays_the_same_run() -> None:
    assert run(11, 200) == run(11, 200)
    assert run(11, 200).state_digest != run(12, 200).state_digest


def test_crashes_restart_from_snapshots_and_peer_snapshots() -> None:
    faults = Faults(snapshot=0.3, crash=0.3, restart=0.3, from_peer=0.5)
    result = run(21, 300, replicas=5, faults=faults)
    assert result.crashes > 5 and result.restarts >= result.crashes - 2
    assert result.peer_installs > 0 and result.replayed > 0 and result.snapshots > 0


def _only(index: int, kind: CoreKind) -> CoreFor:
    return lambda i: kind if i == index else Broker


def _failure(seed: int, steps: int, core_for: CoreFor, faults: Faults = Faults()) -> SimulationFailure:
    with pytest.raises(SimulationFailure) as caught:
        run(seed, steps, core_for=core_for, faults=faults)
    failure = caught.value
    assert failure.seed == seed
    text = str(failure)
    assert f"seed {seed}" in text
    assert f"replay: python -m raftmq.testing.sim --seed {seed} --steps {min(failure.step + 1, steps)}" in text
    return failure


class DropsOneSend(PlantedCore):
    """Loses the first SEND it applies."""

    dropped = False

    def apply(self, command: Command) -> list[Effect]:
        if isinstance(command, Send) and not self.dropped:
            self.dropped = True
            return []
        return self.core.apply(command)


def test_a_replica_that_drops_a_send_is_caught() -> None:
    failure = _failure(3, 200, _only(1, DropsOneSend), Faults(crash=0))
    assert "replica 1" in failure.reason
    assert failure.step < 20


class LocalOrder(PlantedCore):
    """Orders a command's effects by a value local to this replica (its object id)."""

    def apply(self, command: Command) -> list[Effect]:
        effects = self.core.apply(command)
        random.Random(id(self)).shuffle(effects)
        return effects


def test_an_effect_order_that_depends_on_the_replica_is_caught() -> None:
    failure = _failure(4, 300, _only(2, LocalOrder), Faults(crash=0))
    assert "replica 2 emitted other effects" in failure.reason


class ForgetsOnRestart(PlantedCore):
    """Counts SENDs in memory (not in its snapshot) and drops every 10th that asked for no
    receipt (which breaks no promise to the client): replicas agree until one restarts from
    a snapshot and counts from zero."""

    def __init__(self, config: CoreConfig = CoreConfig(), core: Broker | None = None) -> None:
        super().__init__(config, core)
        self.sends = 0

    def apply(self, command: Command) -> list[Effect]:
        if isinstance(command, Send):
            self.sends += 1
            if self.sends % 10 == 0 and command.receipt is None:
                return []
        return self.core.apply(command)


def test_state_outside_the_snapshot_is_caught_after_a_restart() -> None:
    every = lambda i: ForgetsOnRestart  # noqa: E731
    assert run(5, 300, core_for=every, faults=Faults(crash=0)).crashes == 0  # no restart: no difference
    failure = _failure(5, 300, every, Faults(snapshot=0.2, crash=0.1, restart=0.5))
    assert "replica" in failure.reason


class LosesReceiptedSends(PlantedCore):
    """Every replica alike: answers some queue SENDs with their RECEIPT but stores nothing."""

    def apply(self, command: Command) -> list[Effect]:
        if (
            isinstance(command, Send)
            and command.destination.startswith("/queue/")
            and command.receipt is not None
            and command.transaction is None
            and zlib.crc32(command.body) % 40 == 0  # type: ignore[arg-type]
        ):
            return [Receipt(command.session, command.receipt)]
        return self.core.apply(command)


def test_a_lost_acknowledged_send_is_caught_though_replicas_agree() -> None:
    failure = _failure(6, 300, lambda i: LosesReceiptedSends)
    assert "acknowledged SEND lost" in failure.reason


class AcksAsNacks(PlantedCore):
    """Every replica alike: settles an ACK as a NACK, so the message comes back."""

    def apply(self, command: Command) -> list[Effect]:
        if isinstance(command, Ack):
            command = Nack(
                command.session, command.now, command.ack_id, command.message_id,
                command.subscription, command.transaction, command.receipt,
            )
        return self.core.apply(command)


def test_a_redelivered_acknowledged_message_is_caught_though_replicas_agree() -> None:
    failure = _failure(7, 400, lambda i: AcksAsNacks)
    assert "after it was acknowledged" in failure.reason


class NoDuplicateDetection(PlantedCore):
    """Every replica alike: ignores `_AMQ_DUPL_ID`, so a retried SEND is stored twice."""

    def apply(self, command: Command) -> list[Effect]:
        if isinstance(command, Send):
            headers = without(command.headers, {"_AMQ_DUPL_ID"})
            command = Send(command.session, command.destination, headers, command.body, command.now,
                           command.transaction, command.receipt)
        return self.core.apply(command)


def test_a_retried_send_stored_twice_is_caught() -> None:
    failure = _failure(8, 500, lambda i: NoDuplicateDetection)
    assert "one SEND stored twice" in failure.reason


def test_the_command_line_prints_failing_seeds_and_exits_1(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert sim.main(["--seed", "1", "--seeds", "2", "--steps", "40"]) == 0
    assert "2 seeds x 40 steps, 3 replicas: 0 failed" in capsys.readouterr().out
    monkeypatch.setattr(sim, "_stock_core", _only(1, DropsOneSend))
    assert sim.main(["--seed", "1", "--seeds", "2", "--steps", "40"]) == 1
    out = capsys.readouterr().out
    assert "FAIL seed 1 at step" in out and "FAIL seed 2 at step" in out
    assert "replay: python -m raftmq.testing.sim --seed 1 --steps" in out
    assert "2 failed" in out
