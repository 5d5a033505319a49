"""PySpark Python Data Sources over raftmq's files. Both yield Arrow record batches (columnar:
no row objects between Python and the JVM).

- `raftmq_node`: one partition per member; its files checked and its Raft entries listed,
  and, for the member with the longest log in each group (its reference), its snapshot and
  journal replayed (spark_audit.replay) into the fact table (spark_audit.facts).
- `raftmq_segments`: one partition per body-journal segment file (spark_audit.segments).

Options: `runs`, a JSON list of run directory paths. Partitions are planned on the driver from small
files only (listings and each member's stored commit index); executors read the journals, so
they need the run directories at the same paths (one machine, or a shared filesystem).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_audit.facts import FACT_SCHEMA_DDL
from spark_audit.segments import SEGMENT_COLUMNS, SEGMENT_SCHEMA_DDL

BATCH_ROWS = 8192  # rows per Arrow batch


class MemberPartition(InputPartition):
    def __init__(self, run_path: str, run: str, group: str, node: str, directory: str, commit_bound: int,
                 reference: bool) -> None:
        super().__init__(f"{run}/{group}/{node}")
        self.run_path, self.run, self.group, self.node = run_path, run, group, node
        self.directory, self.commit_bound, self.reference = directory, commit_bound, reference


class SegmentPartition(InputPartition):
    def __init__(self, run: str, group: str, node: str, path: str, last: bool) -> None:
        super().__init__(path)
        self.run, self.group, self.node, self.path, self.last = run, group, node, path, last


def _runs(options: dict[str, str]) -> list[Any]:
    from pathlib import Path

    from spark_audit.layout import read_run

    return [read_run(Path(path)) for path in json.loads(options["runs"])]


def _batches(rows: Iterator[tuple[Any, ...]], schema: Any) -> Iterator[Any]:
    from spark_audit.facts import to_batch

    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= BATCH_ROWS:
            yield to_batch(chunk, schema)
            chunk = []
    if chunk:
        yield to_batch(chunk, schema)


class NodeFactsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "raftmq_node"

    def schema(self) -> str:
        return FACT_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return NodeFactsReader(dict(self.options))


class NodeFactsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[MemberPartition]:
        from spark_audit.replay import last_journal_index, read_commit_index

        parts = []
        for run in _runs(self.options):
            for group in run.groups:
                members = [m for m in run.members if m.group == group]
                bound = max(read_commit_index(m.directory) for m in members)
                # The member with the longest log speaks for the group (ties: the lowest name).
                reference = min(members, key=lambda m: (-last_journal_index(m.directory), m.node))
                parts += [MemberPartition(run.path, run.name, group, m.node, m.directory, bound, m is reference)
                          for m in members]
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pathlib import Path

        from spark_audit.facts import arrow_schema
        from spark_audit.layout import core_configs, read_run

        assert isinstance(partition, MemberPartition)
        core = core_configs(read_run(Path(partition.run_path)))[partition.group]
        yield from _batches(self.rows(partition, core), arrow_schema())

    def rows(self, partition: MemberPartition, core: Any) -> Iterator[tuple[Any, ...]]:
        """The member's facts (spark_audit.replay.member_facts), `core` its group's settings."""
        from spark_audit.replay import member_facts

        return member_facts(partition.run, partition.group, partition.node, partition.directory, core,
                            partition.commit_bound, partition.reference)


class SegmentsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "raftmq_segments"

    def schema(self) -> str:
        return SEGMENT_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return SegmentsReader(dict(self.options))


class SegmentsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[SegmentPartition]:
        from spark_audit.segments import segment_files

        parts = []
        for run in _runs(self.options):
            for member in run.members:
                files = segment_files(member.directory)
                parts += [SegmentPartition(run.name, member.group, member.node, path, i == len(files) - 1)
                          for i, path in enumerate(files)]
        return parts or [SegmentPartition("", "", "", "", False)]  # Spark wants at least one

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from spark_audit.segments import segment_rows

        assert isinstance(partition, SegmentPartition)
        if not partition.path:
            return
        kinds = {"string": pa.string(), "long": pa.int64(), "int": pa.int32()}
        schema = pa.schema([(name, kinds[kind]) for name, kind in SEGMENT_COLUMNS])
        yield from _batches(segment_rows(partition.run, partition.group, partition.node, partition.path,
                                         partition.last), schema)


def register(spark: Any) -> None:
    spark.dataSource.register(NodeFactsSource)
    spark.dataSource.register(SegmentsSource)
