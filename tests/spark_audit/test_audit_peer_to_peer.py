"""`raftmq audit` reads the journals of embedded brokers that formed a network: three service
processes whose brokers found each other by signed multicast (inside a network namespace this
test creates), exchanged messages every way, and one of which was killed with -9, then came back
for what waited for it. Their data directories are RUN/data/<name>/; the audit replays each
group with the cluster view its embedded.json names and finds nothing (with the killed one left
dead, it finds what waits for it in its neighbour's store-and-forward queue: `bridges`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_audit.checks import CHECKS, CLIENT_CHECKS
from spark_audit.job import run_audit
from spark_audit.layout import read_run
from tests.helpers.multicast_namespace import loopback_namespace
from tests.helpers.service_peer import Peer, until

PASSWORD = "audit-secret"
EACH = 50



@pytest.mark.spark
@pytest.mark.integration  # service processes with embedded brokers, in a network namespace
@pytest.mark.slow  # half a minute on the spark worker, the suite's longest: `pytest -m slow` runs it
@pytest.mark.timeout(900)  # the session's SparkSession may start here
def test_a_mesh_of_embedded_brokers_one_killed_audits_clean(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    names = ("a", "b", "c")
    uri = "multicast://239.77.8.8:9877?group=audited&broadcastPeriod=300&refreshTimeout=3000"
    with loopback_namespace("rmqaud") as namespace:
        peers = {name: Peer(["ip", "netns", "exec", namespace], name, data, uri, PASSWORD) for name in names}
        try:
            assert until(lambda: all(len([s for s in p.links().values() if s == "connected"]) == 2
                                     for p in peers.values()), 20)
            for sender in names:
                for target in names:
                    if target != sender:
                        peers[sender].ask(f"send /queue/inbox.{target} {EACH} {sender}to{target}")
            assert until(lambda: all(len(p.received()) == 2 * EACH for p in peers.values()), 30)
            peers["c"].kill()
            peers["a"].ask(f"send /queue/inbox.c {EACH} waiting")  # waits in a's journal for c
            peers["a"].ask(f"send /queue/inbox.b {EACH} after")
            assert until(lambda: len(peers["b"].received()) == 3 * EACH, 30)
            peers["c"] = Peer(["ip", "netns", "exec", namespace], "c", data, uri, PASSWORD)  # back
            wanted = {f"waiting-{n}" for n in range(EACH)}
            assert until(lambda: wanted <= set(peers["c"].received()), 30)  # what waited for it moved
        finally:
            for peer in peers.values():
                peer.stop()
    result = run_audit(spark, [read_run(tmp_path)])
    (verdict,) = result.runs
    assert verdict.counts == {check: None if check in CLIENT_CHECKS else 0 for check in CHECKS}, result.findings
    assert verdict.read["groups"] == verdict.read["members"] == 3
    # Every message each broker stored, one killed -9 included: 6 × 50 exchanged, 50 for c, 50 after.
    assert verdict.read["body_records"] >= 8 * EACH
