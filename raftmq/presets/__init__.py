"""The group files `raftmq up --preset NAME` starts (package data, so an installed raftmq has
them): default.toml, five-node.toml and test.toml, equal to configs/group.toml, group5.toml and
test.toml, where they are documented."""
