"""The `transactions` workload's clients, on `/queue/chaos-tx`.

- A producer runs transactions: BEGIN, k SENDs (unique values `p<n>-<seq>`, each also its
  `_AMQ_DUPL_ID`; k from 1 to 4), then COMMIT with a receipt, or now and then ABORT. One
  history op per transaction, `f` `txn`, value `{"id", "values", "abort"}`: `ok` at the
  COMMIT's RECEIPT (all of it must be stored); `fail` when it was aborted, or its connection
  broke before the COMMIT was written (the broker rolls it back with the session: none of it
  may be stored); `info` when the COMMIT was written and its RECEIPT never came (all or none).
- A consumer (client-individual) gathers deliveries and acknowledges them in transactions:
  BEGIN, ACK×k, COMMIT (`f` `ack-txn`, value `{"id", "values"}`), or now and then ABORT,
  after which it acknowledges the same deliveries again in its next transaction. Crashes (the
  connection aborted, maybe mid-transaction) roll its open transaction back; the broker
  redelivers. A value delivered again after an `ok` `ack-txn` that acknowledged it was consumed
  twice.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from chaos.checker import QueueResult
from chaos.client import close_quietly, connect, crash, crash_some, node_of
from chaos.history import FAIL, INFO, INVOKE, OK, History, Op
from chaos.transactions_checker import check_transactions
from chaos.workload import Workload
from raftmq.client.failover import FailoverClient
from raftmq.client.failover_subscription import Delivery
from raftmq.errors import BrokerRefused, ClientError, TransactionRolledBack

DESTINATION = "/queue/chaos-tx"
ABORT_ODDS = 0.15
ACK_BATCH = 5
ACK_EVERY_S = 0.05


class TransactionalProducer:
    def __init__(self, name: str, url: str, history: History, interval_s: float, rng: random.Random) -> None:
        self.name, self.url, self.history, self.interval_s, self.rng = name, url, history, interval_s, rng
        self.seq = 0

    async def run(self, stop: asyncio.Event) -> None:
        client = await connect(self.url, stop)
        if client is None:
            return
        try:
            for number in range(1 << 30):  # bounded by `stop`; the count only names transactions
                if stop.is_set():
                    break
                await self.transaction(client, f"{self.name}-t{number}")
        finally:
            await close_quietly(client)

    async def transaction(self, client: FailoverClient, txid: str) -> None:
        size = self.rng.randint(1, 4)
        values = [f"{self.name}-{self.seq + i}" for i in range(size)]
        self.seq += size
        abort = self.rng.random() < ABORT_ODDS
        record = {"id": txid, "values": values, "abort": abort}
        self.history.record(self.name, INVOKE, "txn", record)
        committing = False
        try:
            await client.begin(txid)
            for value in values:
                await client.send(DESTINATION, value.encode(), [("_AMQ_DUPL_ID", value)], receipt=False,
                                  transaction=txid)
                await asyncio.sleep(self.interval_s / 2)  # a failover may strike between SENDs
            if abort:
                await client.abort(txid)
                self.history.record(self.name, FAIL, "txn", record, error="aborted")
            else:
                committing = True
                await client.commit(txid)
                self.history.record(self.name, OK, "txn", record, node=node_of(client))
        except (TransactionRolledBack, BrokerRefused) as exc:
            self.history.record(self.name, FAIL, "txn", record, error=str(exc))
        except ClientError as exc:
            # Before the COMMIT was written the broker can only roll it back; after, unknown.
            self.history.record(self.name, INFO if committing else FAIL, "txn", record, error=str(exc))
        await asyncio.sleep(self.interval_s / 2)


class TransactionalConsumer:
    def __init__(self, name: str, url: str, history: History, rng: random.Random) -> None:
        self.name, self.url, self.history, self.rng = name, url, history, rng
        self.client: FailoverClient | None = None
        self.last_delivery = time.monotonic()
        self.pending: list[Delivery] = []

    async def start(self, stop: asyncio.Event) -> bool:
        self.client = client = await connect(self.url, stop)
        if client is None:
            return False

        def on_message(frame: Delivery) -> None:
            self.last_delivery = time.monotonic()
            self.history.record(self.name, OK, "receive", frame.body.decode(errors="replace"), node=node_of(client),
                                redelivered=frame.get("redelivered") == "true")
            self.pending.append(frame)

        client.subscribe(DESTINATION, ack="client-individual", prefetch=10, callback=on_message)
        return True

    async def acknowledge(self, stop: asyncio.Event) -> None:
        """Acknowledge what arrived, in transactions, until `stop` (after the drain)."""
        for number in range(1 << 30):  # bounded by `stop`
            if stop.is_set():
                break
            await asyncio.sleep(ACK_EVERY_S)
            client = self.client
            if client is None or not self.pending or not client.is_connected:
                continue
            await self.transaction(client, f"{self.name}-a{number}")

    async def transaction(self, client: FailoverClient, txid: str) -> None:
        batch, self.pending = self.pending[:ACK_BATCH], self.pending[ACK_BATCH:]
        record: dict[str, Any] = {"id": txid, "values": []}
        self.history.record(self.name, INVOKE, "ack-txn", record)
        committing = False
        try:
            await client.begin(txid)
            acked = [frame for frame in batch if client.ack_nowait(frame, transaction=txid)]
            # Deliveries of a connection that broke cannot be acknowledged: the broker redelivers them.
            record = {"id": txid, "values": [frame.body.decode(errors="replace") for frame in acked]}
            if self.rng.random() < ABORT_ODDS:
                await client.abort(txid)
                self.pending = acked + self.pending  # still delivered to us: acknowledge them next time
                self.history.record(self.name, FAIL, "ack-txn", record, error="aborted")
            else:
                committing = True
                await client.commit(txid)
                self.history.record(self.name, OK, "ack-txn", record)
        except (TransactionRolledBack, BrokerRefused) as exc:
            self.history.record(self.name, FAIL, "ack-txn", record, error=str(exc))
        except ClientError as exc:
            self.history.record(self.name, INFO if committing else FAIL, "ack-txn", record, error=str(exc))

    def crash(self) -> None:
        crash(self.client)

    async def close(self) -> None:
        if self.client is not None:
            await close_quietly(self.client)


class TransactionsWorkload(Workload):
    """Transactional producers and consumers on one queue (one group, or spread over several)."""

    name = "transactions"
    summary = "BEGIN / SEND×k / COMMIT or ABORT, and ACKs in transactions (atomicity, lost, unexpected)"

    async def start(self, stop: asyncio.Event) -> None:
        env = self.env
        rng = random.Random(env.seed)
        self.consumers = [TransactionalConsumer(f"c{i}", env.urls[i % len(env.urls)], env.history,
                                                random.Random(rng.random())) for i in range(env.concurrency)]
        self._acks = [asyncio.get_running_loop().create_task(c.acknowledge(stop)) for c in self.consumers]
        for consumer in self.consumers:
            await consumer.start(stop)

    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        env = self.env
        rng = random.Random(env.seed + 1)
        producers = [TransactionalProducer(f"p{i}", env.urls[i % len(env.urls)], env.history, env.interval_s,
                                           random.Random(rng.random())) for i in range(env.concurrency)]
        return [*(p.run(stop) for p in producers), crash_some(self.consumers, random.Random(env.seed), stop)]

    @property
    def last_delivery(self) -> float:
        return max(c.last_delivery for c in self.consumers)

    async def close(self) -> None:
        # `stop` is set: each ends after its current transaction (whose RECEIPT may never come).
        _, late = await asyncio.wait(self._acks, timeout=15)
        for task in late:
            task.cancel()
        await asyncio.gather(*self._acks, return_exceptions=True)
        for consumer in self.consumers:
            await consumer.close()

    @staticmethod
    def check(history: Iterable[Op]) -> QueueResult:
        return check_transactions(history)
