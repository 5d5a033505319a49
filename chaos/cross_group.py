"""The `cross-group` workload (a cluster of groups joined by cluster connections): producers
send to `/queue/chaos-x` on the first group only, consumers read it on the other groups, so
every value crosses a bridge (store and forward, or redistribution). Now and then a consumer
migrates: it closes (its unacknowledged deliveries go back), reconnects to another group's
URL and subscribes again, so its backlog must follow it. Consumers also crash, as in `queue`.
Recorded as `migrate` `invoke` / `ok` with `{"from", "to"}` (group indexes); checked like the
queue workload (lost, unexpected, stored duplicates across groups).

The `shared-queue` workload is the same with producers and consumers on every group (one hot
queue spread over the cluster, as LOCAL_FIRST serves it): most values stay in the group that
received them, and they cross where a group's consumers are full, crashed or gone.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

from chaos.client import Consumer, Producer, QueueWorkload, crash_some
from chaos.history import INVOKE, OK

DESTINATION = "/queue/chaos-x"
MIGRATE_EVERY_S = 3.0


class CrossGroupWorkload(QueueWorkload):
    """Producers on the first group, consumers on the others that migrate between them; the
    queue workload's drain, close and checker."""

    name = "cross-group"
    summary = "producers on the first group, consumers on the others that migrate (needs a cluster)"
    min_groups = 2
    everywhere = False  # producers and consumers on every group (shared-queue), else as above

    def _consumer_groups(self) -> list[int]:
        """The groups consumers may live on (indexes into env.urls)."""
        return list(range(len(self.env.urls))) if self.everywhere else list(range(1, len(self.env.urls)))

    async def start(self, stop: asyncio.Event) -> None:
        env = self.env
        self.stop_all = stop  # a migrated consumer lives until the drain is over, not until the load stops
        groups = self._consumer_groups()
        self.where = [groups[i % len(groups)] for i in range(env.concurrency)]  # each consumer's group
        self.consumers = [Consumer(f"c{i}", env.urls[g], env.history, DESTINATION) for i, g in enumerate(self.where)]
        for consumer in self.consumers:
            await consumer.start(stop)

    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        env = self.env
        producers = [Producer(f"p{i}", env.urls[i % len(env.urls) if self.everywhere else 0], env.history,
                              env.interval_s, DESTINATION)
                     for i in range(env.concurrency)]
        return [*(p.run(stop) for p in producers), crash_some(self.consumers, random.Random(env.seed), stop),
                self.migrate(random.Random(env.seed + 1), stop)]

    async def migrate(self, rng: random.Random, stop: asyncio.Event) -> None:
        """Every few seconds one consumer moves to another group (not the first, unless
        `everywhere`), until `stop`."""
        env = self.env
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(0.5, 1.5) * MIGRATE_EVERY_S)
            if stop.is_set():
                break
            i = rng.randrange(len(self.consumers))
            choices = [g for g in self._consumer_groups() if g != self.where[i]] or [self.where[i]]
            target = rng.choice(choices)
            consumer, move = self.consumers[i], {"from": self.where[i], "to": target}
            env.history.record(consumer.name, INVOKE, "migrate", move)
            await consumer.close()
            consumer.url, self.where[i] = env.urls[target], target
            await consumer.start(self.stop_all)
            env.history.record(consumer.name, OK, "migrate", move)


class SharedQueueWorkload(CrossGroupWorkload):
    """One queue with producers and consumers on every group; consumers migrate and crash."""

    name = "shared-queue"
    summary = "producers and consumers on every group, one queue; consumers migrate (needs a cluster)"
    everywhere = True
