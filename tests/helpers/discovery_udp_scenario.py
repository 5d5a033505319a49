"""Run inside a network namespace by tests/cluster/test_discovery_udp.py (the namespace's
loopback carries the multicast, so nothing reaches a real network): three single-node groups
that find each other by UDP multicast announcements. Prints one JSON line of what it saw."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers.cluster_harness import Cluster

ADDRESS, PORT = "239.77.77.77", 9876


def link(cluster: Cluster, group: str, to: str) -> dict[str, Any]:
    status = cluster.cluster_status(group) or {}
    return next((entry for entry in status.get("links", []) if entry["to"] == to), {})


def until(predicate: Any, timeout: float = 20.0) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return round(time.monotonic() - started, 2)
        time.sleep(0.1)
    return None


def main(directory: Path, password: str | None) -> None:
    extra = {"cluster_user": "cluster", "cluster_password": password} if password else {}
    cluster = Cluster(directory, ["g1", "g2", "g3"],
                      broadcast={"group_address": ADDRESS, "group_port": PORT, "broadcast_period_ms": 200},
                      discovery={"group_address": ADDRESS, "group_port": PORT, "refresh_timeout_ms": 1500}, **extra)
    seen: dict[str, Any] = {}
    try:
        for name in ("g1", "g2"):
            cluster.groups[name].start()
        seen["g1_found_g2_s"] = until(lambda: link(cluster, "g1", "g2").get("state") == "connected")
        seen["g1_links_before_g3"] = sorted(entry["to"]
                                            for entry in (cluster.cluster_status("g1") or {}).get("links", []))
        cluster.groups["g3"].start()  # a group that appears: nobody restarts
        seen["g1_found_g3_s"] = until(lambda: link(cluster, "g1", "g3").get("state") == "connected")
        seen["g3_found_g1_s"] = until(lambda: link(cluster, "g3", "g1").get("state") == "connected")
        cluster.groups["g2"].close()  # one that disappears
        seen["g1_shows_g2_down_s"] = until(lambda: link(cluster, "g1", "g2").get("presence") == "down")
        seen["g1_g2_state"] = link(cluster, "g1", "g2").get("state")
    finally:
        cluster.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
