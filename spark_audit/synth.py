"""Synthetic run directories for benchmarks and tests: groups whose members' files are written
with raftmq's own encoders, a client history to match, and anomalies planted at known places.

A `GroupLog` plays a group's leader: it proposes commands, applies them to a broker core to
learn what a leader learns (the ack ids of deliveries, which consumers to ack for), and writes
the same entries to every member. `make_run` drives a queue workload through it.

    python -m spark_audit.synth OUT --groups 3 --messages 1000000 [--plant]

writes OUT/<name>/ (a run directory `raftmq audit` reads) and OUT/<name>/planted.json, which
lists each planted anomaly with the check that must find it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Command, Connect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect
from raftmq.protocol.header_block import block_of
from spark_audit.member_files import NOOP, command_of, write_bodies, write_entries

QUEUE = "/queue/synth"


class GroupLog:
    """A group's committed log, built by playing its leader."""

    def __init__(self, core: CoreConfig) -> None:
        self.broker = Broker(core)
        self.term = 1
        self.entries: list[tuple[int, int, list[Command] | None]] = [(1, 1, None)]  # the first leader's no-op

    @property
    def last_index(self) -> int:
        return self.entries[-1][0]

    def propose(self, commands: Sequence[Command]) -> list[Effect]:
        """Append one entry and apply it as every member will; the effects a leader would see."""
        index = self.last_index + 1
        self.entries.append((index, self.term, list(commands)))
        effects: list[Effect] = []
        self.broker.begin_entry(index)  # the core holds body references, as in a group
        for command in commands:
            effects += self.broker.apply(command)
        return effects

    def new_leader(self) -> None:
        self.term += 1
        self.entries.append((self.last_index + 1, self.term, None))

    def write(self, member: str) -> None:
        raft = [(index, term, NOOP if commands is None else command_of(commands))
                for index, term, commands in self.entries]
        write_entries(member, raft, commit_index=self.last_index)
        write_bodies(member, [(index, term, commands) for index, term, commands in self.entries if commands])


@dataclass
class Planted:
    check: str
    where: str
    items: list[str] = field(default_factory=list)


@dataclass
class SynthRun:
    path: Path
    planted: list[Planted]
    records: int  # journal records written, all members


def _group_file(name: str, members: int, base_port: int, dedup_cache: int) -> str:
    lines = ["[group]", f'name = "{name}"', f'data_dir = "data/{name}"', "", "[core]",
             f"dedup_cache_size = {dedup_cache}"]
    for i in range(members):
        port = base_port + 3 * i
        lines += ["", "[[node]]", f'id = "n{i + 1}"', f'client = "127.0.0.1:{port}"',
                  f'raft = "127.0.0.1:{port + 1}"', f'admin = "127.0.0.1:{port + 2}"']
    return "\n".join(lines) + "\n"


def make_run(root: Path, name: str, *, groups: int = 3, members: int = 3, messages: int = 1000, producers: int = 4,
             consumers: int = 4, batch: int = 50, plant: bool = False, seed: int = 0) -> SynthRun:
    """A run directory of `groups` independent groups of `members` members, each with
    `messages` queue messages sent and consumed (`batch` commands per entry); with `plant`, one
    anomaly of each kind listed in `planted.json`."""
    rng = random.Random(seed)
    run = root / name
    (run / "topology").mkdir(parents=True, exist_ok=True)
    group_names = [f"g{i + 1}" for i in range(groups)]
    dedup_cache = 64 if plant else 100_000  # a window small enough to plant a retry past it
    topology = ["[topology]", f'name = "{name}"']
    for i, group in enumerate(group_names):
        (run / "topology" / f"{group}.toml").write_text(_group_file(group, members, 40000 + 100 * i, dedup_cache))
        topology += ["", "[[group]]", f'file = "{group}.toml"']
    (run / "topology" / "synth.toml").write_text("\n".join(topology) + "\n")
    (run / "run.json").write_text(json.dumps({"options": {"workload": "queue", "synthetic": True},
                                              "placed": str(run / "topology" / "synth.toml")}, indent=2))
    history: list[dict[str, Any]] = []
    planted: list[Planted] = []
    records = 0
    clock = 1_800_000_000.0
    for g, group in enumerate(group_names):
        core = CoreConfig(broker_name=group, dedup_cache_size=dedup_cache)
        log = GroupLog(core)
        now = int(clock * 1000)
        log.propose([Connect(f"{group}-p{p}", now) for p in range(producers)]
                    + [Connect(f"{group}-c{c}", now) for c in range(consumers)])
        log.propose([Subscribe(f"{group}-c{c}", "s", QUEUE, now, ACK_CLIENT_INDIVIDUAL) for c in range(consumers)])
        retry_of = f"{group}-p0-{messages // (4 * producers)}" if plant and g == 0 else None
        pending: list[Command] = []
        sent = 0
        seq = [0] * producers
        while sent < messages or pending:
            chunk: list[Command] = []
            while sent < messages and len(chunk) < batch:
                p = sent % producers
                value = f"{group}-p{p}-{seq[p]}"
                seq[p] += 1
                sent += 1
                chunk.append(Send(f"{group}-p{p}", QUEUE, block_of((("_AMQ_DUPL_ID", value),)), value.encode(), now))
                history.append({"process": f"{group}-p{p}", "type": "invoke", "f": "send", "value": value,
                                "time": clock})
                history.append({"process": f"{group}-p{p}", "type": "ok", "f": "send", "value": value, "time": clock})
                if retry_of is not None and sent == messages // 2:
                    # A producer retry past the dedup window: stored (and delivered) twice.
                    chunk.append(Send(f"{group}-p0", QUEUE, block_of((("_AMQ_DUPL_ID", retry_of),)),
                                      retry_of.encode(), now))
                    planted.append(Planted("stored_duplicates", f"{group}: a retry past the dedup window", [retry_of]))
                    planted.append(Planted("consumer_duplicates", f"{group}: its second delivery", [retry_of]))
            chunk.extend(pending[:batch])
            pending = pending[batch:]
            clock += 0.001
            now = int(clock * 1000)
            for effect in log.propose(chunk):
                if type(effect) is Deliver:
                    body = effect.message.body
                    value = _value_of(log, body)
                    history.append({"process": effect.session.split("-")[-1], "type": "ok", "f": "receive",
                                    "value": value, "time": clock, "redelivered": effect.redelivered})
                    pending.append(Ack(effect.session, now, ack_id=effect.ack_id))
        for m in range(members):
            member = run / "data" / group / f"n{m + 1}"
            log.write(str(member))
            records += sum(1 for _ in log.entries) + sum(
                1 for _i, _t, commands in log.entries if commands for c in commands if type(c) is Send)
            _leader_log(member, group, m, log.term)
        if plant and g == 0:
            planted += _plant_in_files(run, group, log)
    if plant:
        planted += _plant_in_history(history, rng)
    with open(run / "history.jsonl", "w") as f:
        for index, op in enumerate(history):
            f.write(json.dumps({"index": index, **op}) + "\n")
    (run / "nemesis.jsonl").write_text("")
    (run / "planted.json").write_text(json.dumps([p.__dict__ for p in planted], indent=2) + "\n")
    return SynthRun(run, planted, records)


def _value_of(log: GroupLog, ref: Any) -> str:
    index, ordinal, _size = ref  # a BodyRef (raftmq.core.broker.Broker.begin_entry)
    commands = log.entries[index - 1][2]
    assert commands is not None and log.entries[index - 1][0] == index
    sends = [c for c in commands if type(c) is Send]
    return bytes(sends[ordinal].body).decode()


def _leader_log(member: Path, group: str, m: int, term: int) -> None:
    line = {"timestamp": "2026-01-01T00:00:00Z", "event": "raft.leader_changed", "node": f"n{m + 1}",
            "role": "leader" if m == 0 else "follower", "leader": f"{group}-n1", "term": term}
    (member / "raftmq.log.jsonl").write_text(json.dumps(line) + "\n")


def _plant_in_files(run: Path, group: str, log: GroupLog) -> list[Planted]:
    from spark_audit.member_files import rewrite_entry

    # One member's copy of a committed entry differs: replica divergence.
    index = next(i for i, _t, commands in log.entries[len(log.entries) // 3:]
                 if commands and any(type(c) is Send for c in commands))

    def changed(commands: list[Command]) -> list[Command]:
        first = next(i for i, c in enumerate(commands) if type(c) is Send)
        send = commands[first]
        assert type(send) is Send
        commands[first] = Send(send.session, send.destination, send.headers, b"changed on one member", send.now)
        return commands

    member = run / "data" / group / "n3"
    rewrite_entry(str(member), index, changed)
    # A second member claims leadership of a term that had one leader: two leaders in a term.
    claim = {"timestamp": "2026-01-01T00:00:01Z", "event": "raft.leader_changed", "node": "n2", "role": "leader",
             "leader": f"{group}-n2", "term": log.term}
    with open(run / "data" / group / "n2" / "raftmq.log.jsonl", "a") as f:
        f.write(json.dumps(claim) + "\n")
    return [Planted("divergence", f"{group}/n3: entry {index}", [str(index)]),
            Planted("leaders", f"{group}: n2 logs itself leader of term {log.term}", [str(log.term)])]


def _plant_in_history(history: list[dict[str, Any]], rng: random.Random) -> list[Planted]:
    """Edits from the end of the history backwards, so each position still means what it did."""
    receives = [i for i, op in enumerate(history) if op["f"] == "receive"]
    lost_at = receives[len(receives) // 5]
    dup_at = receives[len(receives) * 3 // 4]
    # order: one consumer's two consecutive first deliveries of one producer, swapped.
    window = receives[len(receives) // 2:len(receives) * 2 // 3]
    by_consumer: dict[str, list[int]] = {}
    for i in window:
        by_consumer.setdefault(history[i]["process"], []).append(i)
    consumer = rng.choice(sorted(by_consumer))
    positions = by_consumer[consumer]
    a, b = next((x, y) for x, y in zip(positions, positions[1:], strict=False)
                if _producer(history[x]["value"]) == _producer(history[y]["value"]))
    lost, duplicated, earlier = history[lost_at]["value"], history[dup_at]["value"], history[a]["value"]
    history.append({"process": "c0", "type": "ok", "f": "receive", "value": "never-sent-1",
                    "time": history[-1]["time"]})
    history.insert(dup_at + 1, dict(history[dup_at]))
    history[a]["value"], history[b]["value"] = history[b]["value"], history[a]["value"]
    del history[lost_at]
    return [Planted("lost", "a receive op removed from the history", [lost]),
            Planted("order", f"{consumer}: two first deliveries swapped", [earlier]),
            Planted("consumer_duplicates", "a receive op repeated", [duplicated]),
            Planted("unexpected", "a value received that no one sent", ["never-sent-1"])]


def _producer(value: str) -> str:
    return value.rsplit("-", 1)[0]


def main() -> None:
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Write a synthetic run directory for `raftmq audit`.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--name", default="synthetic")
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--messages", type=int, default=10_000, help="per group")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--plant", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    made = make_run(args.out, args.name, groups=args.groups, members=args.members, messages=args.messages,
                    batch=args.batch, plant=args.plant)
    print(f"{made.path}: {made.records:,} journal records, {len(made.planted)} planted anomalies, "
          f"{time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
