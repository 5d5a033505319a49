"""Jepsen-style fault injection against real raftmq clusters (docs/chaos.md).

One module per part, as Jepsen splits it: `history` (append-only `invoke` then `ok` / `fail` /
`info` records), `generator` (a seeded schedule of operations and faults), the workloads'
clients (`workload`, `client`, `topic`, `transactions`, `cross_group`), their checkers (pure
functions of a history), `nemesis` (faults on real processes, packets, files and clocks, through
`environment`: `netns`, `lazyfs`, `corrupt`, `clock`, `disk`), `deployment` (the cluster under
test) and `run` (one run and its directory).
"""
