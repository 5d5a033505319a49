"""A follower's apply path alone, in one process, no Raft and no network: Raft entries of the
4P×4C `raftmq bench` traffic (1 KiB persistent SENDs with receipts, client-individual ACKs),
decoded and applied by a `Replica` that serves no session, over a real body journal in a temp
dir (written, not fsynced: the fsync is a wait, not CPU). Prints CPU µs per message (one SEND
and its ACK), best of ROUNDS.

Every member pays this for every message; a follower pays little else besides receiving the
entry and appending it to its Raft journal (bench/cpu_budget.py measures the whole process).
Run it with PYTHONPATH=CHECKOUT from a cwd outside any checkout to compare two checkouts:

    PYTHONPATH=/tmp/before python bench/follower_apply.py 50000 3
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from types import SimpleNamespace
from typing import Any

import raftmq
from raftmq.clock import SystemClock
from raftmq.config import NodeConfig
from raftmq.core.broker import Broker
from raftmq.core.commands import Ack, Command, Connect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of
from raftmq.replication.command_codec import encode_rows
from raftmq.replication.entry_codec import decode_entry, encode_entry
from raftmq.server.replica.bodies import BodyStore
from raftmq.server.replica.state_machine import Replica
from raftmq.storage.journal import Journal

PRODUCERS = CONSUMERS = 4
PER_ENTRY = 16  # SENDs per entry (and as many ACKs): what a 4P×4C run batches, roughly


def entries(count: int, now: int) -> list[bytes]:
    """Encoded Raft entries carrying `count` messages: connects, subscribes, then SENDs and the
    ACKs of what the previous entry delivered, each connection's commands its own batch."""
    leader = Broker(CoreConfig())
    setup: list[Command] = [Connect(f"p{i}", now) for i in range(PRODUCERS)]
    setup += [Connect(f"c{i}", now) for i in range(CONSUMERS)]
    setup += [Subscribe(f"c{i}", "s", "/queue/bench", now, ack="client-individual", prefetch=100)
              for i in range(CONSUMERS)]
    for command in setup:
        leader.apply(command)
    out = [encode_entry([encode_rows(setup)])]
    bodies = [os.urandom(1024) for _ in range(PRODUCERS)]  # as `raftmq bench`: one random body per producer
    acks: list[Ack] = []
    seq = 0
    while seq < count:
        by_session: dict[str, list[Command]] = {}
        for _ in range(PER_ENTRY):
            producer = f"p{seq % PRODUCERS}"
            headers = (("persistent", "true"), ("bench-run", "r1"), ("bench-producer", producer),
                       ("bench-seq", str(seq)), ("bench-ts", str(now)))
            send = Send(producer, "/queue/bench", block_of(headers), bodies[seq % PRODUCERS], now, receipt=f"r{seq}")
            by_session.setdefault(producer, []).append(send)
            seq += 1
        for ack in acks:
            by_session.setdefault(ack.session, []).append(ack)
        acks = []
        for commands in by_session.values():
            for command in commands:
                for effect in leader.apply(command):
                    if isinstance(effect, Deliver) and effect.ack_id is not None:
                        acks.append(Ack(effect.session, now, ack_id=effect.ack_id))
        out.append(encode_entry([encode_rows(commands) for commands in by_session.values()]))
        now += 1
    return out


class _Follower(SimpleNamespace):
    """The node around a follower's replica: no sessions, never the leader."""

    def fail(self, reason: str) -> None:
        raise RuntimeError(reason)

    def replayed(self) -> None:
        pass


def one_round(encoded: list[bytes], messages: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        journal = Journal(directory)
        position = SimpleNamespace(index=0, term=1)
        commit_log: Any = SimpleNamespace(position=position, is_leader=False)
        host: Any = _Follower(config=NodeConfig(), commit_log=commit_log, sessions={}, clock=SystemClock(), name="n2",
                              awaiting_adoption={})
        replica = Replica(host, BodyStore(journal), None)
        gc.collect()
        started = time.process_time()
        for index, entry in enumerate(encoded, 1):
            position.index = index
            replica.apply(decode_entry(entry))
        elapsed = time.process_time() - started
        journal.close()
    return elapsed / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("count", type=int, nargs="?", default=50_000, help="messages per round (default 50000)")
    parser.add_argument("rounds", type=int, nargs="?", default=3, help="rounds; the best is reported (default 3)")
    args = parser.parse_args()
    encoded = entries(args.count, int(time.time() * 1000))
    times = [one_round(encoded, args.count) for _ in range(args.rounds)]
    print(f"{raftmq.__file__}: best {min(times):.2f} µs per message, all {' '.join(f'{t:.2f}' for t in times)}")


if __name__ == "__main__":
    main()
