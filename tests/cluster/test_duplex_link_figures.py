"""A duplex network connector's figures, on real processes: the group that did not open the link
shows what the opener pulled from it as forwarded, in `/status` and in `/metrics`, as the
group's own counter of what it put on the link says (raftmq.server.links.passive_link)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.test_network_connectors import Consumer, produce, wait_known, wait_total
from tests.helpers.cluster_harness import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def duplex(tmp_path: Path) -> Iterator[Cluster]:
    """g1 declares a duplex connector to g2: only g1 connects, both directions on its connection."""
    cluster = Cluster(tmp_path, ["g1", "g2"], network=[{"group": "g1", "to": "g2", "duplex": True}])
    try:
        cluster.start()
        cluster.wait_links(learners=["g1", "g2"])
        yield cluster
    finally:
        cluster.close()


def link(cluster: Cluster, group: str, to: str) -> dict[str, Any]:
    entries = (cluster.cluster_status(group) or {}).get("links", [])
    return next((entry for entry in entries if entry["to"] == to), {})


def forwarded_metric(cluster: Cluster, group: str, to: str) -> float | None:
    (member,) = cluster.groups[group].members.values()
    with urllib.request.urlopen(f"http://{member.host}:{member.admin_port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "raftmq_link_forwarded_total" and sample.labels.get("to_group") == to:
                return sample.value
    return None


def test_the_end_that_did_not_open_a_duplex_link_counts_what_went_over_it(duplex: Cluster) -> None:
    on_g1 = Consumer(duplex, "g1", "/queue/back")
    try:
        wait_known(duplex, "g2", "/queue/back", 1)
        produce(duplex, "g2", "/queue/back", 20)
        wait_total([on_g1], 20, 20)
        assert len(on_g1.bodies) == 20
        deadline = time.monotonic() + 10
        while link(duplex, "g2", "g1").get("forwarded") != 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        passive = link(duplex, "g2", "g1")
        assert passive["opened_by"] == "g1" and passive["forwarded"] == 20, passive
        assert (duplex.cluster_status("g2") or {})["forwarded"] == {"g1": 20}  # the group's own counter
        assert forwarded_metric(duplex, "g2", "g1") == 20
        assert link(duplex, "g1", "g2")["forwarded"] == 0  # the opener pushed nothing: g2 has no consumer
    finally:
        on_g1.close()
