"""The command codec against msgspec, per command: what moving the core's commands to msgspec
structs would save (raftmq does not depend on msgspec; this script alone needs it).

    pip install msgspec==0.22.0 && .venv/bin/python -m bench.msgspec_codec

One Raft-entry batch as the 4P×4C load makes them: 16 SENDs of 1 KiB with receipts and 16
client-individual ACKs. It times `command_codec.encode_batch` / `decode_batch` against a msgspec
encoder and a decoder into array-like tagged structs with the same fields, and building one
`Send` against building one struct; CPU µs per command, best of three rounds. It also checks that
msgspec writes the very bytes `encode_batch` writes: the journal format would not change.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from raftmq.core.commands import Ack, Command, Send
from raftmq.protocol.header_block import block_of
from raftmq.replication.command_codec import decode_batch, encode_batch

try:
    import msgspec
except ImportError:
    sys.exit("bench.msgspec_codec needs msgspec: pip install msgspec==0.22.0")

BODY = os.urandom(1024)
PER_BATCH = 16


class MSend(msgspec.Struct, array_like=True, tag=5, frozen=True):
    session: str
    destination: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    now: int
    transaction: str | None = None
    receipt: str | None = None


class MAck(msgspec.Struct, array_like=True, tag=6, frozen=True):
    session: str
    now: int
    ack_id: str
    message_id: str | None
    subscription: str | None
    transaction: str | None = None
    receipt: str | None = None


def batch() -> list[Command]:
    commands: list[Command] = []
    for i in range(PER_BATCH):
        commands.append(Send("s-1-abc", "/queue/bench", block_of((("persistent", "true"), ("priority", "4"))), BODY,
                             1_700_000_000_000 + i, None, f"r-{i}"))
        commands.append(Ack("s-2-def", 1_700_000_000_000 + i, f"a-{i}", f"m-{i}", "sub-0", None, None))
    return commands


def per_command(run: Callable[[], Any], commands: int, rounds: int = 3, seconds: float = 1.0) -> float:
    best = float("inf")
    for _ in range(rounds):
        count = 0
        started = time.process_time()
        while time.process_time() - started < seconds:
            run()
            count += 1
        best = min(best, (time.process_time() - started) / count / commands * 1e6)
    return best


def main() -> None:
    commands = batch()
    data = encode_batch(commands)
    decoder = msgspec.msgpack.Decoder(tuple[int, list[MSend | MAck]])
    encoder = msgspec.msgpack.Encoder()
    structs = decoder.decode(data)[1]
    if encoder.encode((1, structs)) != data:
        sys.exit("msgspec wrote other bytes than encode_batch")
    if [(s.session, s.now) for s in structs] != [(c.session, c.now) for c in commands]:
        sys.exit("msgspec decoded other commands")
    n = len(commands)
    rows = [
        ("decode a batch", per_command(lambda: decode_batch(data), n), per_command(lambda: decoder.decode(data), n)),
        ("encode a batch", per_command(lambda: encode_batch(commands), n),
         per_command(lambda: encoder.encode((1, structs)), n)),
        ("build one Send", per_command(lambda: Send("s", "/q", "", BODY, 1, None, "r"), 1),
         per_command(lambda: MSend("s", "/q", (), BODY, 1, None, "r"), 1)),
    ]
    print("msgspec writes the same bytes as command_codec")
    print(f"{'CPU µs per command':<22}{'raftmq':>10}{'msgspec':>10}")
    for label, ours, theirs in rows:
        print(f"{label:<22}{ours:>10.3f}{theirs:>10.3f}   ×{ours / theirs:.1f}")


if __name__ == "__main__":
    main()
