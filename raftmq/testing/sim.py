"""The deterministic simulator of the broker core: one seed, N replicas, every step checked.

`run(seed, steps)` derives everything from `random.Random(seed)`: the core's settings, the
clients and their commands (`workload`), the clock (a `ManualClock`), and the faults of the
fake log (snapshots, crashes, restarts; `fake_log`). Each step commits one batch of commands;
then every live replica's effects and snapshot bytes must equal the others' (and the core's
own invariant check, when it has one, must pass), and the effects must keep the protocol's
properties (`checker`). After the last step an audit browses every queue to check that no
acknowledged SEND was lost, restarts every crashed replica, and replays the whole log on a
fresh one, which must agree.

The first failure raises `SimulationFailure`, whose message names the seed, the step and the
command that replays it. From a shell::

    python -m raftmq.testing.sim --seeds 1000 [--steps N] [--seed FIRST]

prints a line per failing seed and a total, and exits 1 if any failed (docs/simulator.md).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from raftmq.clock import ManualClock
from raftmq.core.broker import Broker
from raftmq.core.commands import MAX_BROWSE_LIMIT, Browse, Command, Connect, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.effects import BrowseEnd, Deliver
from raftmq.testing.checker import Checker, Violation
from raftmq.testing.fake_log import CoreFor, CoreKind, Divergence, FakeLog, Faults
from raftmq.testing.workload import QUEUES, Workload

DEFAULT_STEPS = 500
DEFAULT_REPLICAS = 3
AUDITOR = "sim-auditor"


class SimulationFailure(AssertionError):
    """A seed broke determinism or a property; the message says how to replay it."""

    def __init__(self, seed: int, step: int, steps: int, replicas: int, reason: str) -> None:
        self.seed = seed
        self.step = step
        self.reason = reason
        where = f"step {step}" if step < steps else f"the final audit after step {steps - 1}"
        options = f"--seed {seed} --steps {min(step + 1, steps)}"
        if replicas != DEFAULT_REPLICAS:
            options += f" --replicas {replicas}"
        super().__init__(
            f"simulation failed: seed {seed}, {where}: {reason}\n"
            f"replay: python -m raftmq.testing.sim {options}"
        )


@dataclass(frozen=True, slots=True)
class Result:
    seed: int
    steps: int
    commands: int
    sends: int
    retries: int  # SENDs sent again after a lost connection (same _AMQ_DUPL_ID)
    duplicates: int  # of those, the ones whose first copy had been committed (the core drops them)
    deliveries: int
    acknowledged_sends: int  # audited at the end
    snapshots: int
    crashes: int
    restarts: int
    peer_installs: int
    replayed: int
    comparisons: int
    state_digest: str  # sha256 of the final snapshot bytes

    def summary(self) -> str:
        return (
            f"seed {self.seed}: {self.steps} steps, {self.commands} commands, {self.sends} sends "
            f"({self.retries} retried, {self.duplicates} duplicates), {self.deliveries} deliveries, "
            f"{self.crashes} crashes, {self.restarts} restarts ({self.peer_installs} from a peer's snapshot), "
            f"{self.snapshots} snapshots"
        )


def draw_config(rng: random.Random) -> CoreConfig:
    return CoreConfig(
        broker_name="sim",
        max_delivery_count=rng.randint(2, 5),
        dedup_cache_size=rng.choice((64, 1_000, 20_000)),
        default_prefetch=rng.randint(1, 5),
        selector_scan_limit=rng.choice((2, 16, 10_000)),
    )


def run(
    seed: int,
    steps: int = DEFAULT_STEPS,
    *,
    replicas: int = DEFAULT_REPLICAS,
    core_for: CoreFor | None = None,
    faults: Faults = Faults(),
) -> Result:
    """Simulate `steps` batches from `seed`; raise `SimulationFailure` on the first problem.
    `core_for(i)` is the broker class of replica i (tests plant bugs with it)."""
    rng = random.Random(seed)
    config = draw_config(rng)
    log = FakeLog(config, replicas, core_for or _stock_core)
    workload = Workload(rng, ManualClock(), config)
    checker = Checker(config)
    commands = 0
    step = 0
    try:
        for step in range(steps):
            log.step_faults(rng, faults)
            batch = workload.next_batch()
            effects = log.commit(batch)
            for command, out in zip(batch, effects):
                checker.observe(command, out)
            workload.observe(batch, effects)
            commands += len(batch)
        step = steps
        audited = _audit(log, checker, workload.now())
    except (Divergence, Violation) as error:
        raise SimulationFailure(seed, step, steps, replicas, str(error)) from error
    except Exception as error:  # the simulator's own model or clients lost track: still name the seed
        reason = f"{type(error).__name__} in the simulator: {error}"
        raise SimulationFailure(seed, step, steps, replicas, reason) from error
    counters = log.counters
    return Result(
        seed=seed,
        steps=steps,
        commands=commands,
        sends=workload.sends,
        retries=workload.retries,
        duplicates=checker.duplicates,
        deliveries=checker.deliveries,
        acknowledged_sends=audited,
        snapshots=counters.snapshots,
        crashes=counters.crashes,
        restarts=counters.restarts,
        peer_installs=counters.peer_installs,
        replayed=counters.replayed,
        comparisons=counters.checks,
        state_digest=hashlib.sha256(log.live()[0].state()).hexdigest(),
    )


def _stock_core(index: int) -> CoreKind:
    return Broker


def _audit(log: FakeLog, checker: Checker, now: int) -> int:
    """Browse what every queue holds (after a Tick moved what expired), check that no
    acknowledged SEND is missing, then bring every replica up and replay the log from scratch."""
    destinations = (*QUEUES, log.config.dead_letter_queue, log.config.expiry_queue)
    batch: list[Command] = [Tick(now), Connect(AUDITOR, now)]
    batch += [Browse(AUDITOR, f"audit-{i}", name, now, MAX_BROWSE_LIMIT) for i, name in enumerate(destinations)]
    effects = log.commit(batch)
    stored: dict[str, list[object]] = {}
    for command, out in zip(batch, effects):
        checker.observe(command, out)
        if isinstance(command, Browse):
            stored[command.destination] = [e.message.body for e in out if isinstance(e, Deliver)]
            if any(isinstance(e, BrowseEnd) and e.truncated for e in out):
                raise Violation(f"the audit could not see all of {command.destination} "
                                f"(over {MAX_BROWSE_LIMIT} messages)")
    audited = checker.audit(stored)
    log.restart_all()
    log.replay_from_scratch()
    return audited


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raftmq.testing.sim",
        description="Run the deterministic simulator of the broker core over a range of seeds.",
    )
    parser.add_argument("--seed", type=int, default=0, help="the (first) seed (default 0)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds, from --seed on (default 1)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"batches per seed (default {DEFAULT_STEPS})")
    parser.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS, help=f"replicas (default {DEFAULT_REPLICAS})")
    parser.add_argument("-v", "--verbose", action="store_true", help="a summary line for every seed")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1 or args.replicas < 1:
        parser.error("--seeds, --steps and --replicas must be at least 1")

    started = time.monotonic()
    failures: list[SimulationFailure] = []
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            result = run(seed, args.steps, replicas=args.replicas)
        except SimulationFailure as failure:
            failures.append(failure)
            first_line = failure.reason.splitlines()[0]
            _say(f"FAIL seed {seed} at step {failure.step}: {first_line}", flush=True)
            if len(failures) == 1 or args.verbose:
                _say(f"  {failure}".replace("\n", "\n  "), flush=True)
            continue
        if args.verbose:
            _say(result.summary(), flush=True)
    elapsed = time.monotonic() - started
    _say(
        f"{args.seeds} seeds x {args.steps} steps, {args.replicas} replicas: "
        f"{len(failures)} failed ({elapsed:.1f} s)"
    )
    return 1 if failures else 0


def _say(*parts: object, flush: bool = True) -> None:
    """One line of the command's report on stdout (the simulator runs without click or rich)."""
    sys.stdout.write(" ".join(str(part) for part in parts) + "\n")
    if flush:
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())

