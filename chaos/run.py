"""One chaos run: start the cluster in a fresh run directory, run the workload while the
nemesis follows its schedule, heal everything, drain, check, and leave the evidence behind.

The run directory (`runs/<time>-<workload>-<nemeses>-s<seed>/` by default, named by the kinds
scheduled to strike, or `<n>-nemeses` past four) holds `run.json` (options, seed, topology, the
fault schedule; `nemeses_asked`, `faults_struck` (kind -> count of faults that struck),
`nemeses_not_struck` with `not_struck_why`, and `time_needed_for_all_s`: the `--time-limit`
under which the seed strikes every kind), `history.jsonl`, `nemesis.jsonl`,
`results.json` (the checker's verdict), `report.html`, `topology/` (the topology's files as the
nodes ran them: every node on an address of its own), `logs/` (every node's output, one file
per start, and `clients.log`: what the workloads' independent clients logged) and
`data/<group>/<node>/` (every node's journals and snapshots, written there by the nodes
themselves; `set-aside/` holds the files of members repaired after corruption). The Spark audit
reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import QueueResult
from chaos.client import QueueWorkload
from chaos.cross_group import CrossGroupWorkload, SharedQueueWorkload
from chaos.deployment import NODE_COMMAND, Deployment
from chaos.environment import Environment
from chaos.generator import NEMESES, TARGETS, Fault, schedule, time_needed_for_all
from chaos.history import FAIL, INVOKE, NEMESIS, OK, History, Op
from chaos.mqtt import MqttWorkload
from chaos.nemesis import Nemesis
from chaos.placement import shape, source_of
from chaos.report import faults_struck, write_report
from chaos.stale import StaleWorkload
from chaos.topic import TopicWorkload
from chaos.transactions import TransactionsWorkload
from chaos.workload import Env, NeedsCluster, Workload

WORKLOADS: dict[str, type[Workload]] = {
    w.name: w for w in (QueueWorkload, TopicWorkload, TransactionsWorkload, CrossGroupWorkload, SharedQueueWorkload,
                        StaleWorkload, MqttWorkload)
}
DRAIN_IDLE_S = 3.0  # the drain ends once no delivery came for this long,
DRAIN_AWAITED_S = 12.0  # or this long while acknowledged values are still awaited
DRAIN_MAX_S = 60.0


CLIENT_LOGGERS = ("stomp.py",)  # the independent clients' loggers (stomp.py logs errors itself)


@contextlib.contextmanager
def clients_logging_to(path: Path) -> Iterator[None]:
    """What the workloads' independent clients log goes to `path`, not the terminal: stomp.py's
    "error sending frame" with its traceback when a crash closes a socket under its heart-beat
    thread, say, is the workload's own doing and the history holds what the checker needs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    loggers = [(logging.getLogger(name), logging.getLogger(name).propagate) for name in CLIENT_LOGGERS]
    for logger, _ in loggers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in loggers:
            logger.removeHandler(handler)
            logger.propagate = propagate
        handler.close()


def draining(idle_s: float, awaited: int) -> bool:
    """Whether the drain goes on, `idle_s` after the latest delivery with `awaited` acknowledged
    values not delivered yet: a group killed near the end may need a restart, an election and its
    links' reconnection before what it holds flows again, longer than quiet alone would allow; a
    value truly lost costs the run DRAIN_AWAITED_S."""
    return idle_s < DRAIN_IDLE_S or (awaited > 0 and idle_s < DRAIN_AWAITED_S)


@dataclass(frozen=True)
class RunOptions:
    preset: str = "default"
    topology: str | None = None  # a topology or group file; overrides the preset
    workload: str = "queue"
    nemeses: tuple[str, ...] = ("kill",)
    time_limit_s: float = 30.0
    rate: float = 50.0  # sends per second, all producers together
    concurrency: int = 4  # producers, and as many consumers
    seed: int = 0
    out: Path = Path("runs")
    targets: tuple[str, ...] = TARGETS  # which members faults may hit (leader, one, minority, majority, all)
    backlog: bool = False  # consumers wait for the drain (the workloads that have consumers to hold back)
    node_command: tuple[str, ...] = ()  # how a node starts (argv before --config); () is deployment.NODE_COMMAND
    asked: tuple[str, ...] = ()  # the nemeses the user asked for, when `nemeses` holds only those that can strike


@dataclass
class Progress:
    elapsed_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)  # ok / fail / info / receive
    fault: str | None = None
    phase: str = "starting"


def run_directory(options: RunOptions, faults: list[Fault]) -> Path:
    """Named by the kinds scheduled to strike (not those asked for), in the order they come."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kinds = list(dict.fromkeys(fault.nemesis for fault in faults))
    named = "+".join(kinds) if len(kinds) <= 4 else f"{len(kinds)}-nemeses"
    return options.out / f"{stamp}-{options.workload}-{named or 'none'}-s{options.seed}"


def planned(options: RunOptions, faults: list[Fault]) -> dict[str, Any]:
    """What run.json says before the run: the kinds asked for, those scheduled, and the
    `--time-limit` this seed needs for every kind that can strike here."""
    return {
        "nemeses_asked": list(options.asked or options.nemeses),
        "nemeses_scheduled": dict(Counter(fault.nemesis for fault in faults)),
        "time_needed_for_all_s": time_needed_for_all(options.seed, list(options.nemeses), targets=options.targets),
    }


def struck_facts(options: RunOptions, faults: list[Fault], ops: list[Op]) -> dict[str, Any]:
    """What run.json says after the run: the faults that struck (kind -> count), the kinds
    asked for that did not, and why each did not."""
    struck = faults_struck(ops)
    scheduled = {fault.nemesis for fault in faults}
    needed = time_needed_for_all(options.seed, list(options.nemeses), targets=options.targets)
    failed = {op.f: op.error for op in ops if op.process == NEMESIS and op.type == FAIL and op.f in NEMESES}
    why: dict[str, str] = {}
    for kind in options.asked or options.nemeses:
        if kind in struck:
            continue
        if kind not in options.nemeses:
            why[kind] = "needs a cluster of groups: --preset symmetric, chain or symmetric-lite"
        elif kind not in scheduled:
            why[kind] = f"did not fit in {options.time_limit_s:g} s: seed {options.seed} needs --time-limit {needed}"
        elif kind in failed:
            why[kind] = f"could not be made: {failed[kind]}"
        else:
            why[kind] = "scheduled, but the run ended first (a heal before it ran long)"
    return {"faults_struck": struck, "nemeses_not_struck": list(why), "not_struck_why": why}


def group_count(options: RunOptions) -> int:
    """How many groups the options' deployment has (without starting or writing anything)."""
    return len(shape(source_of(options.preset, options.topology)))


def check_options(options: RunOptions) -> None:
    """`KeyError` for an unknown workload, `NeedsCluster` when it needs more groups."""
    workload = WORKLOADS[options.workload]
    if group_count(options) < workload.min_groups:
        raise NeedsCluster(f"the {workload.name} workload needs a cluster of at least {workload.min_groups} groups: "
                           "--preset symmetric, chain or symmetric-lite, or a --topology with several groups")
    if "drain" in options.nemeses and group_count(options) < 2:
        raise NeedsCluster("the drain nemesis needs a cluster of groups to drain into: "
                           "--preset symmetric, chain or symmetric-lite, or a --topology with several groups")


def run(options: RunOptions, on_progress: Callable[[Progress], None] | None = None) -> tuple[Path, QueueResult]:
    check_options(options)
    faults = schedule(options.seed, list(options.nemeses), options.time_limit_s, targets=options.targets)
    run_dir = run_directory(options, faults).resolve()
    run_dir.mkdir(parents=True)
    environment = Environment(run_dir, options.nemeses)
    source = source_of(options.preset, options.topology)
    facts: dict[str, Any] = {}
    try:
        topology = environment.place(source)
        facts = {
            "options": {**dataclasses.asdict(options), "out": str(options.out)},
            "topology": str(source),
            "placed": str(topology.source),
            "network": "namespaces" if environment.network is not None else "loopback",
            "groups": [spec.name for spec in topology.groups],
            "faults": [dataclasses.asdict(fault) for fault in faults],
            **planned(options, faults),
        }
        (run_dir / "run.json").write_text(json.dumps(facts, indent=2))
        deployment = Deployment(topology, run_dir, options.node_command or NODE_COMMAND)
        history = History(run_dir / "history.jsonl")
        progress = Progress()
        try:
            environment.prepare(deployment)
            deployment.start()
            for group in deployment.groups():
                deployment.leader(group, timeout=20)
            nemesis = Nemesis(deployment, history, faults, environment)
            with clients_logging_to(run_dir / "logs" / "clients.log"):
                asyncio.run(_workload(options, deployment, history, nemesis, progress, on_progress))
        finally:
            deployment.stop()
            history.close()
    finally:
        environment.teardown()
    result = WORKLOADS[options.workload].check(history.ops)
    with (run_dir / "nemesis.jsonl").open("w") as nemesis_log:
        for op in history.ops:
            if op.process == NEMESIS:
                nemesis_log.write(op.to_json() + "\n")
    (run_dir / "results.json").write_text(json.dumps(result.to_dict(), indent=2))
    facts.update(struck_facts(options, faults, history.ops))
    (run_dir / "run.json").write_text(json.dumps(facts, indent=2))
    write_report(run_dir / "report.html", run_dir.name, history.ops, result,
                 {"workload": options.workload, "seed": options.seed, "not_struck_why": facts["not_struck_why"]})
    return run_dir, result


async def _workload(options: RunOptions, deployment: Deployment, history: History, nemesis: Nemesis,
                    progress: Progress, on_progress: Callable[[Progress], None] | None) -> None:
    loop = asyncio.get_running_loop()
    env = Env(tuple(deployment.url(group) for group in deployment.groups()), history, options.concurrency,
              options.concurrency / max(options.rate, 0.001), options.seed, options.backlog,
              tuple(deployment.mqtt(group) for group in deployment.groups()))
    workload = WORKLOADS[options.workload](env)
    stop_producing, stop_all = asyncio.Event(), asyncio.Event()
    await workload.start(stop_all)
    started = time.monotonic()
    tasks = [loop.create_task(job) for job in workload.load(stop_producing)]
    nemesis.start(started)

    def report(phase: str) -> None:
        progress.phase, progress.fault = phase, nemesis.current
        progress.elapsed_s = round(time.monotonic() - started, 1)
        counts: dict[str, int] = {}
        for op in history.ops:
            if op.process == NEMESIS or op.type == INVOKE:
                continue
            if op.f == "receive" and op.type == OK:  # as the checker counts deliveries
                counts["receive"] = counts.get("receive", 0) + 1
            elif op.f in ("send", "txn"):
                counts[op.type] = counts.get(op.type, 0) + 1
        progress.counts = counts
        if on_progress is not None:
            on_progress(progress)

    while time.monotonic() - started < options.time_limit_s:
        report("running")
        await asyncio.sleep(0.5)
    stop_producing.set()
    report("healing")
    await loop.run_in_executor(None, nemesis.stop)  # joins the schedule, heals what is broken
    history.record(NEMESIS, OK, "heal", {"final": True})
    await asyncio.gather(*tasks, return_exceptions=True)
    await workload.before_drain(stop_all)
    report("draining")
    deadline = time.monotonic() + DRAIN_MAX_S
    while time.monotonic() < deadline and draining(time.monotonic() - workload.last_delivery, workload.awaited()):
        report("draining")
        await asyncio.sleep(0.25)
    stop_all.set()
    await workload.close()
    report("checking")


def summary_row(run_dir: Path, result: QueueResult) -> dict[str, Any]:
    """The checker's counts, and from run.json what struck and what did not."""
    facts = json.loads((run_dir / "run.json").read_text())
    return {"run": run_dir.name, **{k: v for k, v in result.to_dict().items() if not k.endswith("_values")},
            **{key: facts.get(key) for key in ("faults_struck", "nemeses_asked", "nemeses_not_struck", "not_struck_why",
                                               "time_needed_for_all_s")}}
