"""Which tests share a worker (tests/conftest.py's scheduler), and which start first."""

from __future__ import annotations

# Tests run on five workers (pytest-xdist, pyproject.toml). These share something a second
# worker must not touch at the same time, so each group runs on one worker, one test at a time:
# - spark: one session-scoped SparkSession (and its `audited` fixture) for the whole package;
# - netns: network namespaces, bridges and 10.99.x.x addresses of the chaos harness (the other
#   chaos tests run on loopback addresses and free ports, beside anything; a test outside this
#   group that creates a namespace network fails, `_namespaces_only_in_their_group`);
# - presets: `raftmq up --preset` starts clusters on the presets' fixed ports (and a single node
#   on its default MQTT port, 1883, which the default preset's n1 uses too).
# (Our own scheduler: xdist 3.8's `loadgroup` renames test ids, which pytest 9 no longer allows.)
WORKER_GROUPS = {
    "tests/spark_audit/": "spark",
    "tests/chaos/test_netns.py": "netns",
    "tests/chaos/test_nemeses.py::test_a_leader_cut_off_in_its_namespace": "netns",
    "tests/chaos/test_nemeses.py::test_a_member_cut_off_by_a_partition": "netns",
    "tests/chaos/test_chaos_runs.py::test_a_run_under_kills_pauses_and_partitions": "netns",
    "tests/chaos/test_chaos_families.py::test_a_short_run_under_each_nemesis_is_valid[packet]": "netns",
    "tests/ops/test_hosts_rehearsal.py": "netns",
    "tests/embedded/test_edge_processes.py": "netns",
    "tests/ops/test_ops_up_cluster.py": "presets",
    "tests/ops/test_ops_up_supervised.py": "presets",
    "tests/ops/test_ops_symmetric_features.py": "presets",
    "tests/server/test_mqtt_node.py::test_a_single_node_serves_mqtt_on_1883": "presets",  # a single node's default port
}
# Tests under a group's prefix that share nothing with its group (the spark package's tests that
# start no SparkSession and need none of its session runs, or start a JVM of their own): any worker
# runs them, beside the group (tests/spark_audit/conftest.py refuses one that asks for the session).
UNGROUPED = (
    "tests/spark_audit/test_cli.py::test_the_jvm_output_goes_to_a_log",
    "tests/spark_audit/test_cli.py::test_a_directory_that_is_no_run",
    "tests/spark_audit/test_audit_story.py",
    "tests/spark_audit/test_replay.py",
    "tests/spark_audit/test_replay_byte_limits.py",
    "tests/spark_audit/test_snapshot_replay.py",
    "tests/spark_audit/test_synth.py",
)
# Long tests outside the groups (real chaos runs of 15-30 s each, an audit in a JVM of its own,
# MQTT through five leader kills)
# start before the rest, so the last tests to run are short ones and no worker waits long for
# the others at the end.
START_EARLY = ("tests/chaos/", "tests/spark_audit/test_cli.py::test_the_jvm_output_goes_to_a_log",
               "tests/server/test_mqtt_failover.py")


def worker_group(nodeid: str) -> str | None:
    if nodeid.startswith(UNGROUPED):
        return None
    for prefix, group in WORKER_GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return None


# What one worker makes once for the spark group (WORKER_GROUPS): a test outside
# the group that asked for one would make it again on its own worker, minutes of CPU.
GROUP_FIXTURES = frozenset({"spark", "audited", "group_run", "cluster_run", "elastic_runs", "limits_run", "mqtt_run"})


class UngroupedSparkTest(RuntimeError):
    """A test outside the spark group asked for what the group makes once."""


def check_grouped(nodeid: str, fixturenames: list[str]) -> None:
    asked = sorted(GROUP_FIXTURES.intersection(fixturenames))
    if asked and worker_group(nodeid) != "spark":
        raise UngroupedSparkTest(f"{nodeid}: asks for {', '.join(asked)} outside the spark group (WORKER_GROUPS)")
