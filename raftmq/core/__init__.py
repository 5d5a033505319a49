"""The broker core: a pure, deterministic state machine, `apply(command) -> effects`.

Nothing in this package touches a socket, a file, the clock, randomness or a logger: time and
ids arrive inside the commands, so every replica that applies the same commands in the same
order reaches the same state and the same effects. This is what Raft replicates.
"""
