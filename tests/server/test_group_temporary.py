"""Request/reply through a temporary queue on a real 3-member group: a stomp.py requester, a
responder on our own client; the queue is gone from every member once the requester leaves."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers.group_harness import Group, connect_leader
from tests.helpers.stomp_raw import connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_request_reply_on_one_group_and_the_queue_goes_with_its_connection(tmp_path: Path) -> None:
    group = Group(tmp_path)
    group.start()
    try:
        leader = group.leader()

        async def respond(count: int) -> None:
            client = await connect_leader(group.client_addresses())
            requests = client.subscribe("/queue/rpc", ack="client-individual")
            for _ in range(count):
                request = await asyncio.wait_for(requests.get(), 15)
                await client.send(request.header_dict()["reply-to"], request.body.upper(), receipt=True)
                client.ack_nowait(request)
            await client.disconnect(timeout=5)

        requester, heard = connect((group.members[leader].host, group.members[leader].client_port))
        requester.subscribe("/temp-queue/replies", id="replies", ack="auto")
        for word in ("ping", "pong"):
            requester.send("/queue/rpc", word, headers={"reply-to": "/temp-queue/replies"})
        asyncio.run(respond(2))
        answers = sorted(heard.message(timeout=10).body for _ in range(2))
        assert answers == ["PING", "PONG"]
        private = next(d for d in group.status(leader)["broker"]["destinations"] if d.startswith("/queue/$temp."))
        requester.disconnect()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            private in (group.status(node) or {"broker": {"destinations": {private: 1}}})["broker"]["destinations"]
            for node in group.members
        ):
            time.sleep(0.1)
        for node in group.members:
            assert private not in group.status(node)["broker"]["destinations"]
    finally:
        group.close()
