"""A real network partition (iptables DROP rules on one member's loopback address) cuts a
follower off and heals: the healthy leader keeps its leadership, its term and its clients.

Each member listens on its own loopback address (127.0.10.1-3) and sends its Raft traffic from
it, so two rules cut one member off from everyone. Needs root and iptables (.ci/run installs it).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from raftmq.client import connect
from tests.helpers.group_harness import Group, body_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

HOSTS = ["127.0.10.1", "127.0.10.2", "127.0.10.3"]


@contextmanager
def cut_off(host: str) -> Iterator[None]:
    iptables = shutil.which("iptables")
    assert iptables, "this test needs iptables (apt-get install -y iptables) and root"
    rules = [["INPUT", "-s", f"{host}/32", "-j", "DROP"], ["INPUT", "-d", f"{host}/32", "-j", "DROP"]]
    added = []
    try:
        for rule in rules:
            subprocess.run([iptables, "-w", "-I", *rule], check=True, capture_output=True, timeout=10)
            added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run([iptables, "-w", "-D", *rule], check=False, capture_output=True, timeout=10)


def test_a_healed_partition_leaves_the_leader_and_its_clients_alone(tmp_path: Path) -> None:
    group = Group(tmp_path, hosts=HOSTS)
    try:
        group.start()
        leader = group.leader()
        isolated = next(i for i in group.members if i != leader)
        before = group.status(leader)
        term, changes = before["term"], before["leader_changes"]

        async def scenario() -> None:
            member = group.members[leader]
            client = await connect(member.host, member.client_port)
            got: list[bytes] = []
            client.subscribe("/queue/partition", ack="client-individual", callback=lambda f: got.append(f.body))
            await client.send("/queue/partition", body_for("before"), receipt=True)
            with cut_off(group.members[isolated].host):
                # Several election timeouts, and past pysyncobj's connection timeout (1.5 s):
                # the cut-off member is first connected but deaf, then disconnected.
                await asyncio.sleep(3.0)
                assert group.status(leader)["role"] == "leader"
                await client.send("/queue/partition", body_for("during"), receipt=True)
            # The cut was real: the member noticed it no longer heard from its leader.
            assert "raft.leader_lost" in group.members[isolated].stderr(), group.members[isolated].stderr()[-2000:]
            await asyncio.sleep(3.0)  # reconnects, catches up; without pre-vote its term deposes the leader
            assert not client.closed.done(), f"the leader closed its client: {client.closed.result()}"
            await client.send("/queue/partition", body_for("after"), receipt=True)
            deadline = time.monotonic() + 5
            while len(got) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert len(got) == 3
            await client.disconnect()

        asyncio.run(scenario())
        statuses = {i: group.status(i) for i in group.members}
        assert statuses[leader]["role"] == "leader" and statuses[leader]["leader_changes"] == changes, statuses[leader]
        assert {s["term"] for s in statuses.values()} == {term}, {i: s["term"] for i, s in statuses.items()}
        group.wait_applied(isolated, statuses[leader]["applied_index"])
    finally:
        group.close()
