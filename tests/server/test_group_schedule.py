"""Scheduled delivery and the redelivery delay on a real 3-member group, through stomp.py:
the schedule is committed state, so a message scheduled on a leader that is then killed -9
is delivered once, on time, by the next leader; a NACKed message comes back only after its
configured delay."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import pytest

from tests.helpers.group_harness import Group, StompPyProducer, connect_leader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DELAY_MS = 4000


def test_scheduled_messages_survive_a_leader_kill_and_fire_once_each(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start()
        addresses = group.client_addresses()
        producer = StompPyProducer(addresses, "/queue/later", "sched", count=20,
                                   headers={"AMQ_SCHEDULED_DELAY": str(DELAY_MS)})
        sent_at = time.time()
        producer.run(timeout=30.0)
        assert producer.receipted == set(producer.ids), producer.errors
        status = group.status(group.leader())
        assert status is not None and status["broker"]["scheduled"] == {"/queue/later": 20}
        assert status["broker"]["destinations"].get("/queue/later", {"depth": 0})["depth"] == 0
        group.kill(group.leader())

        async def consume() -> list[tuple[float, dict[str, str]]]:
            client = await connect_leader(addresses)
            got: list[tuple[float, dict[str, str]]] = []
            client.subscribe(
                "/queue/later", ack="client-individual",
                callback=lambda frame: (got.append((time.time(), frame.header_dict())), client.ack_nowait(frame)))
            deadline = time.monotonic() + 30
            while len(got) < len(producer.ids) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # a copy stored twice would arrive meanwhile
            await client.disconnect(timeout=5)
            return got

        delivered = asyncio.run(consume())
        counts = collections.Counter(headers["_AMQ_DUPL_ID"] for _t, headers in delivered)
        assert counts == {message_id: 1 for message_id in producer.ids}
        # Never early: the committed clock released them, not a node that restarted its timer.
        assert min(at for at, _headers in delivered) >= sent_at + DELAY_MS / 1000 - 0.05
        assert not any(name.startswith("AMQ_SCHEDULED") for _t, headers in delivered for name in headers)
    finally:
        group.close()


def test_a_nacked_message_returns_after_the_redelivery_delay(tmp_path: Path) -> None:
    group = Group(tmp_path, core={"redelivery_delay_ms": 1500, "redelivery_multiplier": 2.0})
    try:
        group.start()

        async def scenario() -> list[float]:
            client = await connect_leader(group.client_addresses())
            arrivals: list[float] = []
            frames: asyncio.Queue[object] = asyncio.Queue()
            client.subscribe("/queue/retry", ack="client-individual", callback=frames.put_nowait)
            await client.send("/queue/retry", b"again", receipt=True)
            for _ in range(3):
                frame = await asyncio.wait_for(frames.get(), 15)
                arrivals.append(time.monotonic())
                client.nack_nowait(frame)
            await client.disconnect(timeout=5)
            return arrivals

        arrivals = asyncio.run(scenario())
        gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
        assert 1.4 <= gaps[0] < 2.5 and 2.9 <= gaps[1] < 4.5, gaps
    finally:
        group.close()
