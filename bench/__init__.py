"""Benchmark scripts for one-off sittings (docs/benchmarks.md), run from the repository root as
modules: `.venv/bin/python -m bench.side_by_side`. Two are run as files on purpose:
`bench/core_loop.py` and `bench/follower_apply.py` measure whichever checkout PYTHONPATH names,
and `-m` would put the current directory's raftmq ahead of it."""
