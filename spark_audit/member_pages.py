"""A member's paged messages as the audit reads them: its snapshot names pages that are records
of its body journal (raftmq.core.paging, `BodyStore.put`); this page store finds them in the
member's segment files, read only, the way spark_audit.segments reads them (one batch per Raft
index, so a record's place in its batch is its ordinal). Pages the replay seals stay in memory."""

from __future__ import annotations

from typing import Any

from raftmq.core.paging import MemoryPages
from raftmq.errors import JournalCorrupt
from raftmq.storage.payload import KIND_PAGE
from raftmq.storage.records import decode_batch
from spark_audit.layout import segment_files


class MemberPages(MemoryPages):
    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory
        self._journal: dict[tuple[int, int], bytes] | None = None  # read on the first page asked for

    def get(self, handle: Any) -> bytes:
        if isinstance(handle, int):
            return super().get(handle)
        pages = self._journal if self._journal is not None else self._read()
        key = (int(handle[0]), int(handle[1]))
        if key not in pages:
            raise ValueError(f"{self._directory}: no page at raft index {key[0]} ordinal {key[1]} in its body journal")
        return pages[key]

    def drop(self, handle: Any) -> None:
        if isinstance(handle, int):
            super().drop(handle)

    def dump(self, handle: Any) -> Any:
        return super().dump(handle) if isinstance(handle, int) else [int(handle[0]), int(handle[1])]

    def load(self, dumped: Any) -> Any:
        if isinstance(dumped, (bytes, bytearray)):
            return super().load(dumped)
        return (int(dumped[0]), int(dumped[1]))

    def _read(self) -> dict[tuple[int, int], bytes]:
        pages: dict[tuple[int, int], bytes] = {}
        for path in segment_files(self._directory):
            with open(path, "rb") as f:
                data = f.read()
            offset = 0
            while offset < len(data):
                try:
                    header, records = decode_batch(data, offset)
                except (JournalCorrupt, ValueError):
                    break  # damage is the segments reader's finding; nothing past it is data
                for ordinal, record in enumerate(records):
                    if record.kind == KIND_PAGE:
                        pages[(record.raft_index, ordinal)] = record.payload
                offset += header.batch_size
        self._journal = pages
        return pages
