"""The composition root: builds nodes and groups from configuration and runs them in the
foreground. Nothing below `raftmq.app` imports it; the CLI and `raftmq.embedded` call it."""
