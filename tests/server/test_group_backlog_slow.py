"""A backlog of 1,000,000 messages of 1 KiB in a real 3-member group, default settings: every
member's memory stays under 256 MiB, a member killed and restarted holds the whole backlog again,
and a consumer drains it, each message once, each producer's in order. Marked slow: minutes, kept
out of the default suite (run it with `-m slow`); tests/server/test_group_paging.py is the
always-on version (3,000 messages in pages of 16)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.group_harness import Group, Producer, connect_leader

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

COUNT = 1_000_000
PRODUCERS = 4
RSS_LIMIT_MIB = 256


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def fill(addresses: list[tuple[str, int]], destination: str) -> list[Producer]:
    producers = [Producer(addresses, destination, f"p{n}", COUNT // PRODUCERS, window=100, size=1024)
                 for n in range(PRODUCERS)]
    await asyncio.gather(*(producer.run(timeout=1200) for producer in producers))
    return producers


async def drain(addresses: list[tuple[str, int]], destination: str, expected: int) -> list[str]:
    """Every message once, ack mode client (a cumulative ACK every 500), prefetch 1000."""
    client = await connect_leader(addresses)
    got: list[str] = []

    def on_message(frame: Any) -> None:
        got.append(frame.get("_AMQ_DUPL_ID"))
        if len(got) % 500 == 0 or len(got) == expected:
            client.ack_nowait(frame)

    client.subscribe(destination, ack="client", prefetch=1000, callback=on_message)
    deadline, seen = time.monotonic() + 1200, -1
    while len(got) < expected and time.monotonic() < deadline:
        await asyncio.sleep(2.0)
        if len(got) == seen:
            break  # nothing for 2 s
        seen = len(got)
    await asyncio.sleep(1.0)  # nothing more may come
    await client.disconnect(timeout=30)
    return got


def test_a_million_waiting_messages_in_bounded_memory(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start()
        leader = group.leader()
        addresses = group.client_addresses()
        destination = "/queue/backlog"
        producers = asyncio.run(fill(addresses, destination))
        for producer in producers:
            assert producer.receipted == set(producer.ids), producer.errors[-3:]
        target = group.status(leader)["applied_index"]
        for member in group.members:
            status = group.wait_applied(member, target, timeout=120)
            assert status["broker"]["destinations"][destination]["depth"] == COUNT
            assert rss_mib(int(status["pid"])) <= RSS_LIMIT_MIB, f"{member}: {rss_mib(int(status['pid'])):.0f} MiB"

        follower = next(m for m in group.members if m != leader)
        group.kill(follower)
        group.start(follower)
        back = group.wait_applied(follower, group.status(leader)["applied_index"], timeout=120)
        assert back["broker"]["destinations"][destination]["depth"] == COUNT

        got = asyncio.run(drain(addresses, destination, COUNT))
        assert len(got) == COUNT and len(set(got)) == COUNT
        for producer in producers:
            assert [i for i in got if i.startswith(producer.ids[0].split("-")[0] + "-")] == producer.ids
    finally:
        group.close()
