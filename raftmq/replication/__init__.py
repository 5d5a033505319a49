"""Replication of the broker core's commands: the command codec (pure) now; the Raft log later."""
