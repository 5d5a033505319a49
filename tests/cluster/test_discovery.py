"""Groups found at run time (cluster.discovery_tables, raftmq.server.links.discovery): with a discovery file
on loopback here; with UDP multicast inside a network namespace in tests/cluster/test_discovery_udp.py.
A group that appears joins the links without a restart; one that disappears is shown down and
its bridge keeps retrying."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_cluster_connections import consume, send_all
from tests.helpers.cluster_harness import Cluster, sync, wait_for

pytestmark = pytest.mark.integration


def write_members(path: Path, cluster: Cluster, groups: list[str]) -> None:
    members = {g: [f"{h}:{p}" for h, p in cluster.addresses(g)] for g in groups}
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"groups": members}))
    temporary.replace(path)


def link(cluster: Cluster, group: str, to: str) -> dict[str, Any] | None:
    status = cluster.cluster_status(group) or {}
    return next((entry for entry in status.get("links", []) if entry["to"] == to), None)


def wait(predicate: Any, what: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what}"
        time.sleep(0.1)


@sync
async def test_a_group_added_to_the_discovery_file_joins_and_one_removed_is_shown_down(tmp_path: Path) -> None:
    members = tmp_path / "members.json"
    cluster = Cluster(tmp_path, ["g1", "g2", "g3"], discovery={"file": "members.json", "refresh_timeout_ms": 1500})
    write_members(members, cluster, ["g1", "g2"])
    try:
        cluster.start()
        wait(lambda: (link(cluster, "g1", "g2") or {}).get("state") == "connected", "g1 to find g2")
        assert link(cluster, "g1", "g3") is None  # not announced (yet)
        write_members(members, cluster, ["g1", "g2", "g3"])  # g3 appears: nobody restarts
        wait(lambda: (link(cluster, "g1", "g3") or {}).get("state") == "connected", "g1 to find g3")
        consumer = await cluster.client("g3")
        producer = await cluster.client("g1")
        try:
            got = asyncio.ensure_future(consume(consumer, "/queue/found", 100, 20))
            assert await wait_for(
                lambda: "/queue/found" in (cluster.cluster_status("g1") or {}).get("bindings", {}), 10)
            await send_all(producer, "/queue/found", [f"f{i}".encode() for i in range(100)])
            assert sorted(frame.body for frame in await got) == sorted(f"f{i}".encode() for i in range(100))
        finally:
            await consumer.disconnect()
            await producer.disconnect()
        write_members(members, cluster, ["g1", "g3"])  # g2 disappears (and stops)
        cluster.groups["g2"].close()
        wait(lambda: (link(cluster, "g1", "g2") or {}).get("presence") == "down", "g1 to show g2 down")
        entry = link(cluster, "g1", "g2")
        assert entry is not None and entry["state"] in ("retrying", "connecting", "failed")
        assert (link(cluster, "g1", "g3") or {}).get("presence") == "up"
    finally:
        cluster.close()
