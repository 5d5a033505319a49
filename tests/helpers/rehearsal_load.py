"""The client side of the hosts rehearsal (tests/ops/test_hosts_rehearsal.py), run inside the
client's network namespace so that it resolves the brokers by their host names:

    python -m tests.helpers.rehearsal_load --produce URL --consume URL --ca CA --login L
        --passcode-env VAR --queue Q --out RESULT.json --stop-file PATH

A producer sends receipted messages (each with its own `_AMQ_DUPL_ID`, sent again with the
same id while its outcome is unknown) until the stop file appears; a consumer on other groups
acknowledges every delivery. Afterwards it waits (bounded) until it received every receipted
message, and writes {"receipted": [...], "received": [...], "errors": N} to RESULT.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from raftmq.client.failover import connect_failover
from raftmq.errors import ClientError

RATE_PER_SECOND = 100
DRAIN_SECONDS = 60.0
RETRY_SECONDS = 120.0


async def produce(url: str, credentials: dict[str, str], queue: str, stop: Path, receipted: list[str]) -> int:
    client = await connect_failover(url, **credentials)
    errors = 0
    number = 0
    try:
        while not stop.exists():
            number += 1
            ident = f"m{number}"
            deadline = time.monotonic() + RETRY_SECONDS
            while True:
                try:
                    await client.send(queue, ident.encode(), headers=[("_AMQ_DUPL_ID", ident)], receipt=True)
                    receipted.append(ident)
                    break
                except ClientError:
                    errors += 1  # outcome unknown: the same id again, stored once
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            await asyncio.sleep(1 / RATE_PER_SECOND)
    finally:
        await client.close()
    return errors


async def consume(url: str, credentials: dict[str, str], queue: str, received: set[str], done: asyncio.Event) -> None:
    client = await connect_failover(url, **credentials)
    subscription = client.subscribe(queue, ack="client-individual")
    try:
        while not done.is_set():
            try:
                frame = await asyncio.wait_for(subscription.get(), 0.5)
            except TimeoutError:
                continue
            received.add(frame.body.decode())
            client.ack_nowait(frame)
    finally:
        await client.close()


async def main(arguments: argparse.Namespace) -> None:
    credentials = {"login": arguments.login, "passcode": os.environ[arguments.passcode_env], "ca_file": arguments.ca}
    receipted: list[str] = []
    received: set[str] = set()
    done = asyncio.Event()
    consumer = asyncio.create_task(consume(arguments.consume, credentials, arguments.queue, received, done))
    errors = await produce(arguments.produce, credentials, arguments.queue, Path(arguments.stop_file), receipted)
    deadline = time.monotonic() + DRAIN_SECONDS
    while not set(receipted) <= received and time.monotonic() < deadline and not consumer.done():
        await asyncio.sleep(0.2)
    done.set()
    await asyncio.wait_for(consumer, 15)
    Path(arguments.out).write_text(json.dumps({"receipted": receipted, "received": sorted(received), "errors": errors}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for option in ("--produce", "--consume", "--ca", "--login", "--passcode-env", "--queue", "--out", "--stop-file"):
        parser.add_argument(option, required=True)
    asyncio.run(main(parser.parse_args()))
