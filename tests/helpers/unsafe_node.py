"""A raftmq node with a planted bug, for the chaos harness's own test (tests/chaos/test_chaos_runs.py):
the harness must catch a broker that loses what it acknowledged, or writes after it was deposed.

    python tests/helpers/unsafe_node.py BUG node --config GROUP.toml --node ID

plants BUG, then runs the ordinary `raftmq` command with the rest of the arguments. The broker
itself has no switch for either bug: they exist only in this file, which the tests hand to the
chaos deployment as its node command (`RunOptions.node_command`).

- `early-receipts`: a write-behind broker. A SEND's RECEIPT goes out at once and the SEND is
  proposed `EARLY_RECEIPT_DELAY_SECONDS` later, so a leader that dies meanwhile loses what it
  acknowledged.
- `no-fsync`: the Raft journal claims durability without fdatasync, so a power loss drops
  acknowledged entries.
- `no-lease`: the leader writes to its clients without asking whether its lease holds, so a
  leader stalled past the election timeout writes deliveries after a new leader took over.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

EARLY_RECEIPT_DELAY_SECONDS = 0.2


def plant_early_receipts() -> None:
    from raftmq.core.commands import Command, Send
    from raftmq.server.stomp.proposing import Proposals

    propose = Proposals._propose_now  # the one place a connection proposes

    def propose_after_receipting(self: Proposals, commands: list[Command]) -> None:
        if not any(isinstance(command, Send) for command in commands):
            propose(self, commands)
            return
        early = []
        for command in commands:
            if isinstance(command, Send) and command.receipt is not None:
                self.connection.receipt(command.receipt)  # type: ignore[attr-defined]
                command = Send(command.session, command.destination, command.headers, command.body, command.now,
                               command.transaction, None)
            early.append(command)
        self.host.loop.call_later(EARLY_RECEIPT_DELAY_SECONDS, propose, self, early)

    Proposals._propose_now = propose_after_receipting  # type: ignore[method-assign]


def plant_no_fsync() -> None:
    from raftmq.replication.pysyncobj import raft_journal

    def no_fdatasync(fd: int) -> None:
        pass

    assert callable(raft_journal.fdatasync)  # the seam RaftJournal.sync() calls
    raft_journal.fdatasync = no_fdatasync


def plant_no_lease() -> None:
    from raftmq.replication.raft_log import RaftLog

    def always(self: RaftLog) -> bool:
        return True

    RaftLog.holds_lease = always  # type: ignore[method-assign]  # what every write to a client asks


BUGS: dict[str, Callable[[], None]] = {"early-receipts": plant_early_receipts, "no-fsync": plant_no_fsync,
                                       "no-lease": plant_no_lease}


def command(bug: str) -> tuple[str, ...]:
    """The node command (argv up to `node`) of a node with BUG planted."""
    assert bug in BUGS, bug
    return (sys.executable, str(Path(__file__).resolve()), bug, "node")


def main(argv: list[str]) -> None:
    bug, *rest = argv
    BUGS[bug]()
    print(f"unsafe node: planted bug {bug!r} (tests/helpers/unsafe_node.py), never run it in production",
          file=sys.stderr, flush=True)
    from raftmq.cli import main as raftmq

    raftmq(rest, prog_name="raftmq")


if __name__ == "__main__":
    del sys.path[0]  # this folder: its modules are no top-level names for the node
    main(sys.argv[1:])
