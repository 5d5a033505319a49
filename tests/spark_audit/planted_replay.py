"""A core bug planted in the audit's replay from the test side, to prove the conservation check
can fail: in one run, one message is accepted and never stored (its first `enter` is a fact;
nothing of it after that is). `planted_source` makes a `raftmq_node` data source whose replay has
the bug; registered in place of the audit's own, it reaches Spark's Python workers by value (this
module is pickled whole, not imported there)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, ClassVar

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType

from raftmq.core.message import Message
from raftmq.core.model import Store
from raftmq.core.store_observer import PUBLISHED
from spark_audit.replay import Replay
from spark_audit.sources import MemberPartition, NodeFactsReader, NodeFactsSource


class DropsOneEnqueue(Replay):
    """`lost` = (run, message id): in that run, the message is lost as soon as it is stored."""

    lost: ClassVar[tuple[str, str]] = ("", "")

    def _is_lost(self, message: Message) -> bool:
        return (self.run, message.message_id) == self.lost

    def entered(self, store: Store, message: Message, origin: str = PUBLISHED) -> None:
        if self._is_lost(message) and message.message_id in self.seen:
            return
        super().entered(store, message, origin)

    def left(self, store: Store, message: Message, outcome: str, session: str | None) -> None:
        if not self._is_lost(message):
            super().left(store, message, outcome, session)

    def contents(self) -> Iterator[tuple[Store, Message, bool]]:
        return ((store, message, in_flight) for store, message, in_flight in super().contents()
                if not self._is_lost(message))


def dropping(run: str, message_id: str) -> type[DropsOneEnqueue]:
    return type("DropsThisOne", (DropsOneEnqueue,), {"lost": (run, message_id)})


def planted_source(run: str, message_id: str) -> type[NodeFactsSource]:
    """A `raftmq_node` source whose replay loses `message_id` in `run`."""
    replay = dropping(run, message_id)

    class PlantedReader(NodeFactsReader):
        def rows(self, partition: MemberPartition, core: Any) -> Iterator[tuple[Any, ...]]:
            return replay(partition.run, partition.group, partition.node, core).read(
                partition.directory, partition.commit_bound, partition.reference)

    class PlantedSource(NodeFactsSource):
        def reader(self, schema: StructType) -> DataSourceReader:
            return PlantedReader(dict(self.options))

    return PlantedSource


cloudpickle.register_pickle_by_value(sys.modules[__name__])
