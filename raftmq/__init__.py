"""raftmq: a sharded STOMP 1.2 message broker in which every logical broker is a Raft group."""

from raftmq import compiled

__version__ = "0.1.0"

# Before any hot module is imported: which build of them runs (raftmq.compiled).
compiled.choose()
