"""raftmq: a sharded STOMP 1.2 message broker in which every logical broker is a Raft group."""

__version__ = "0.1.0"
