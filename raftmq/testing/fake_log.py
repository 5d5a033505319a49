"""A fake ordered commit log driving N replicas of the broker core, with crashes and snapshots.

It stands for what Raft guarantees and nothing more: one total order of command batches, which
every replica applies in full and in order. What Raft leaves to the state machine is what is
tested here: that replicas which apply the same batches reach the same state and emit the same
effects, also after a crash, a restart from a snapshot and a replay of the log after it.

After every committed batch `FakeLog.commit` compares, for every live replica, the effects of
each command (as plain values taken at apply time) and the snapshot bytes, and raises
`Divergence` on the first difference. A replica that restarts replays the log suffix after its
snapshot; its replayed effects are compared with the ones recorded when the batch was first
committed. Each snapshot taken is restored at once and must snapshot to the same bytes.

Only the core's public API is used: `Broker(config)`, `apply`, `snapshot` / `restore`, and
`check_invariants`. A test plants a bug with a core of its own that has that API (`CoreKind`),
usually one that wraps a real `Broker`: the compiled core is closed to subclasses.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack

from raftmq.core.broker import Broker
from raftmq.core.commands import Command
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Effect
from raftmq.hot_values import HotValue

Batch = tuple[Command, ...]
Record = tuple[Any, ...]


class Core(Protocol):
    """What the fake log asks of a replica's core (`Broker` has it)."""

    def apply(self, command: Command) -> list[Effect]: ...

    def snapshot(self) -> Any: ...


class CoreKind(Protocol):
    """How a replica's core is made, new or from a snapshot (the `Broker` class is one)."""

    def __call__(self, config: CoreConfig) -> Core: ...

    def restore(self, data: Any, config: CoreConfig) -> Core: ...


CoreFor = Callable[[int], CoreKind]


class Divergence(AssertionError):
    """Replicas that applied the same log disagree (state, effects), or a snapshot does not
    restore to the state it was taken from, or the core's own invariant check failed."""


# -- the core, through its public API --------------------------------------------------------


def snapshot_bytes(broker: Core) -> bytes:
    """The replicated state as bytes, as the node stores it (msgpack of `Broker.snapshot()`,
    or the bytes themselves once the core encodes its snapshots)."""
    data: Any = broker.snapshot()
    if isinstance(data, bytes):
        return data
    packed: bytes = msgpack.packb(data, use_bin_type=True)
    return packed


def restore_broker(kind: CoreKind, data: bytes, config: CoreConfig) -> Core:
    """A broker of class `kind` in the state `data` (from `snapshot_bytes`) describes."""
    encoded: Any = data
    if not isinstance(Broker(config).snapshot(), bytes):
        encoded = msgpack.unpackb(data, raw=False)
    return kind.restore(encoded, config)


def check_invariants(broker: Core) -> None:
    """Run the core's own consistency check (`Broker.check_invariants`); a core under test that
    has none (a planted stand-in) passes."""
    check = getattr(broker, "check_invariants", None)
    if callable(check):
        check()


def effect_record(effect: Effect) -> Record:
    """An effect as plain nested tuples, taken at once: a Deliver's message is mutable (its
    delivery count moves on with later deliveries), and replicas are compared by value."""
    record: Record = _plain(effect)
    return record


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(_plain(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, HotValue):  # records written out (raftmq.hot_values), not dataclasses
        return (type(value).__name__, *(_plain(getattr(value, name)) for name in value.__match_args__))
    if isinstance(value, (tuple, list)):
        return tuple(_plain(item) for item in value)
    return value


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two decoded snapshots first differ, as a path and the two values."""
    if type(a) is not type(b):
        return f"{path or '/'}: {a!r} != {b!r}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path or '/'} keys: {list(a)} != {list(b)}"
        for key in a:
            if a[key] != b[key]:
                return first_difference(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path or '/'} length {len(a)} != {len(b)}: {_short(a)} != {_short(b)}"
        for index, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}/{index}")
    return f"{path or '/'}: {_short(a)} != {_short(b)}"


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _decoded(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # bytes in another encoding: compare them as they are
        return data


# -- replicas --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    index: int  # log entries it covers
    data: bytes


class Replica:
    """One member: a broker (None while crashed), how much of the log it applied, and its
    latest snapshot, which survives a crash (it is on disk)."""

    def __init__(self, name: str, kind: CoreKind, config: CoreConfig) -> None:
        self.name = name
        self.kind = kind
        self.config = config
        self.broker: Core | None = kind(config)
        self.applied = 0
        self.snapshot: Snapshot | None = None

    @property
    def alive(self) -> bool:
        return self.broker is not None

    def apply(self, batch: Batch) -> tuple[list[list[Effect]], list[list[Record]]]:
        """Apply one batch; its effects, and their records taken right after each command."""
        broker = self.broker
        assert broker is not None, f"{self.name} is down"
        effects: list[list[Effect]] = []
        records: list[list[Record]] = []
        for command in batch:
            try:
                out = broker.apply(command)
            except Exception as error:
                raise Divergence(f"{self.name}: the core raised {type(error).__name__}: {error} "
                                 f"on {command!r}") from error
            effects.append(out)
            records.append([effect_record(effect) for effect in out])
        self.applied += 1
        return effects, records

    def state(self) -> bytes:
        assert self.broker is not None, f"{self.name} is down"
        return snapshot_bytes(self.broker)


# -- the log ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Faults:
    """Per-step probabilities of the seeded faults (`FakeLog.step_faults`)."""

    snapshot: float = 0.06  # each live replica takes a snapshot
    crash: float = 0.02  # one live replica crashes (while a majority stays up)
    restart: float = 0.2  # each crashed replica restarts
    from_peer: float = 0.3  # a restart installs a live peer's newer snapshot instead of its own


@dataclass(slots=True)
class Counters:
    snapshots: int = 0
    crashes: int = 0
    restarts: int = 0
    peer_installs: int = 0
    replayed: int = 0  # batches re-applied after restarts
    checks: int = 0  # byte-for-byte comparisons of two replicas' snapshots


@dataclass
class FakeLog:
    """The committed log and the replicas that apply it. `core_for(i)` is the broker class of
    replica i (a test plants a bug in one replica with it)."""

    config: CoreConfig
    replicas: int = 3
    core_for: CoreFor = lambda index: Broker
    entries: list[Batch] = field(default_factory=list)
    records: list[list[list[Record]]] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)

    def __post_init__(self) -> None:
        self.members = [Replica(f"replica {i}", self.core_for(i), self.config) for i in range(self.replicas)]

    def live(self) -> list[Replica]:
        return [member for member in self.members if member.alive]

    def commit(self, batch: Sequence[Command]) -> list[list[Effect]]:
        """Append `batch`, apply it on every live replica, compare them; the effects per command."""
        entry = tuple(batch)
        self.entries.append(entry)
        index = len(self.entries) - 1
        result: list[list[Effect]] | None = None
        for member in self.live():
            effects, records = member.apply(entry)
            if result is None:
                result = effects
                self.records.append(records)
            else:
                self._compare_records(member, index, records)
        assert result is not None, "no replica is up"
        self.compare_states()
        return result

    def compare_states(self) -> None:
        """Every live replica's snapshot bytes equal, and the core's invariants hold."""
        live = self.live()
        reference = live[0]
        expected = reference.state()
        for member in live:
            try:
                check_invariants(member.broker)  # type: ignore[arg-type]
            except Exception as error:
                raise Divergence(
                    f"{member.name}: the core's invariant check failed after log entry {len(self.entries) - 1}: "
                    f"{type(error).__name__}: {error}"
                ) from error
        for member in live[1:]:
            self.counters.checks += 1
            got = member.state()
            if got != expected:
                where = first_difference(_decoded(expected), _decoded(got))
                raise Divergence(
                    f"{member.name} and {reference.name} differ after log entry {len(self.entries) - 1}: {where}"
                )

    def _compare_records(self, member: Replica, index: int, records: list[list[Record]]) -> None:
        expected = self.records[index]
        if records == expected:
            return
        for position, (want, got) in enumerate(zip(expected, records)):
            if want != got:
                command = self.entries[index][position]
                raise Divergence(
                    f"{member.name} emitted other effects for log entry {index}, command {position} "
                    f"{command!r}:\n  expected {_short(want, 2000)}\n  got      {_short(got, 2000)}"
                )
        raise Divergence(f"{member.name} emitted other effects for log entry {index}")

    # -- faults ------------------------------------------------------------------------------

    def step_faults(self, rng: random.Random, faults: Faults) -> None:
        """Seeded snapshots, crashes and restarts before the next batch."""
        for member in self.members:
            if member.alive and rng.random() < faults.snapshot:
                self.take_snapshot(member)
        live = self.live()
        down = len(self.members) - len(live)
        if rng.random() < faults.crash and down + 1 <= (len(self.members) - 1) // 2:
            self.crash(rng.choice(live))
        for member in self.members:
            if not member.alive and rng.random() < faults.restart:
                peer = None
                if rng.random() < faults.from_peer:
                    newer = [m for m in self.live() if m.snapshot is not None and m.snapshot.index > _covered(member)]
                    peer = rng.choice(newer) if newer else None
                self.restart(member, peer)

    def take_snapshot(self, member: Replica) -> None:
        """Snapshot `member`; restoring the snapshot must give back the same bytes."""
        data = member.state()
        again = snapshot_bytes(restore_broker(member.kind, data, self.config))
        if again != data:
            where = first_difference(_decoded(data), _decoded(again))
            raise Divergence(f"{member.name}: a restored snapshot snapshots differently: {where}")
        member.snapshot = Snapshot(member.applied, data)
        self.counters.snapshots += 1

    def crash(self, member: Replica) -> None:
        """Lose everything in memory; the snapshot on disk stays."""
        member.broker = None
        member.applied = 0
        self.counters.crashes += 1

    def restart(self, member: Replica, peer: Replica | None = None) -> None:
        """Start `member` again from its snapshot (or `peer`'s, as Raft's InstallSnapshot
        does for a member behind a compaction) and replay the log after it, checking the
        replayed effects against the recorded ones."""
        source = peer.snapshot if peer is not None else member.snapshot
        if peer is not None:
            member.snapshot = source
            self.counters.peer_installs += 1
        if source is None:
            member.broker = member.kind(self.config)
            member.applied = 0
        else:
            member.broker = restore_broker(member.kind, source.data, self.config)
            member.applied = source.index
        self.counters.restarts += 1
        self.catch_up(member)

    def catch_up(self, member: Replica) -> None:
        while member.applied < len(self.entries):
            index = member.applied
            _, records = member.apply(self.entries[index])
            self.counters.replayed += 1
            self._compare_records(member, index, records)

    def restart_all(self) -> None:
        for member in self.members:
            if not member.alive:
                self.restart(member)
        self.compare_states()

    def replay_from_scratch(self) -> None:
        """A new replica that applies the whole log from an empty state must agree."""
        fresh = Replica("a replica replaying the whole log", self.core_for(0), self.config)
        self.catch_up(fresh)
        reference = self.live()[0]
        if fresh.state() != reference.state():
            where = first_difference(_decoded(reference.state()), _decoded(fresh.state()))
            raise Divergence(f"{fresh.name} differs from {reference.name}: {where}")


def _covered(member: Replica) -> int:
    return member.snapshot.index if member.snapshot is not None else 0
