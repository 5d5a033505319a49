"""bench/profile_stages.py's reading of py-spy's raw stacks: which stage a sample is, idle
samples left out, and each thread's measured CPU shared among its busy stages."""

from __future__ import annotations

import pytest

from bench.profile_stages import IDLE, REST, cpu_by_stage, parse_raw, stage_of

RAW = "\n".join([
    # the event loop: a SEND parsed, then the core (compiled, seen with --native) under the replica
    "process 7:\"python -m raftmq node\";thread (7): MainThread;run (asyncio/runners.py:118);"
    "data_received (raftmq/server/stomp/connection.py:120);feed (raftmq/protocol/codec.py:90) 30",
    "thread (7): MainThread;apply (raftmq/server/replica/state_machine.py:80);"
    "CPyDef_broker___Broker___apply (abc__mypyc.cpython-311-x86_64-linux-gnu.so);"
    "PyObject_Call (libpython3.11.so) 10",
    "thread (7): MainThread;select (selectors.py:468) 60",
    # pysyncobj's tick thread: fsync, and waiting in its poll
    "thread (8): Thread-1;HardenedSyncObj._tick (raftmq/replication/pysyncobj/syncobj.py:200);"
    "RaftJournal.sync (raftmq/replication/pysyncobj/raft_journal.py:232) 5",
    "thread (8): Thread-1;SyncObj._onTick (pysyncobj/syncobj.py:600);PollPoller.poll (pysyncobj/poller.py:91) 95",
    "thread (8): Thread-1;run (threading.py:975) 5",
])


def test_each_sample_goes_to_the_stage_of_its_innermost_claimed_frame() -> None:
    stages = {tid + ":" + stage_of(stack): count for (tid, stack), count in parse_raw(RAW).items()}
    assert stages == {
        "7:frame parse": 30, "7:core": 10, f"7:{IDLE}": 60,
        "8:Raft journal fsync": 5, f"8:{IDLE}": 95, f"8:{REST}": 5,
    }


def test_a_threads_cpu_is_shared_among_its_busy_stages_only() -> None:
    cpu, samples = cpu_by_stage(parse_raw(RAW), {"7": 4.0, "8": 1.0})
    assert cpu["frame parse"] == pytest.approx(3.0) and cpu["core"] == pytest.approx(1.0)
    assert cpu["Raft journal fsync"] == pytest.approx(0.5) and cpu[REST] == pytest.approx(0.5)
    assert cpu[IDLE] == 0 and samples[IDLE] == 155
    assert sum(cpu.values()) == pytest.approx(5.0)
