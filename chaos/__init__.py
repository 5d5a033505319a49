"""Jepsen-style fault injection against real raftmq clusters (docs/chaos.md).

One module per part, as Jepsen splits it: `history` (append-only `invoke` then `ok` / `fail` /
`info` records), `checker` (a pure function of a history), `generator` (a seeded schedule of
operations and faults), `client` (the workload's producers and consumers), `nemesis` (faults
on real processes), `deployment` (the cluster under test), `run` (one run and its directory).
"""
