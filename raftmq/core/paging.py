"""Paging: a store's messages beyond what dispatch needs, packed in compressed pages.

A store holds at most `2 × page_size` ready messages as `Message` objects (its head, where
dispatch, priority, selectors, groups and the expiry index work). A message that arrives while
the head is full, or while older messages are paged, joins the store's `Tail` instead: an open
list that is sealed into a page every `page_size` messages. A page is the messages' fields,
column by column, msgpack-packed and lz4-compressed (a few bytes per message: ids, headers and
timestamps repeat), kept by a `PageStore` under an opaque handle. The dispatcher pages the
oldest page back into the head when the head runs low, so messages leave in arrival order.

Pages are not part of the replicated *logic*: every replica pages the same messages at the same
command (the rules depend only on the state), but where a page lives is the member's business.
The core alone keeps them in memory (`MemoryPages`); a group member keeps them in page files
(`raftmq.server.replica.bodies`), so its memory does not grow with a backlog.

Expiry in the tail: each page knows its earliest expiry; a Tick rewrites only the pages with a
message due (`Tail.expire`), so a deep tail of messages that never expire costs nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

import lz4.block
import msgpack

from raftmq.core.message import Message, body_size
from raftmq.protocol.header_block import user_block


class PageStore(Protocol):
    """Where sealed pages live. Handles are the store's own; the core only hands them back,
    and a snapshot holds what `dump` gives for each (`load` turns it into a handle again)."""

    def put(self, blob: bytes) -> Any: ...

    def get(self, handle: Any) -> bytes: ...

    def drop(self, handle: Any) -> None: ...

    def dump(self, handle: Any) -> Any: ...

    def load(self, dumped: Any) -> Any: ...


class MemoryPages:
    """Pages kept in memory, compressed (the core on its own, the simulator, tests); a
    snapshot holds their bytes."""

    def __init__(self) -> None:
        self._blobs: dict[int, bytes] = {}
        self._next = 0

    def put(self, blob: bytes) -> int:
        self._next += 1
        self._blobs[self._next] = blob
        return self._next

    def get(self, handle: Any) -> bytes:
        return self._blobs[handle]

    def drop(self, handle: Any) -> None:
        del self._blobs[handle]

    def dump(self, handle: Any) -> Any:
        return self._blobs[handle]

    def load(self, dumped: Any) -> int:
        if not isinstance(dumped, (bytes, bytearray)):
            raise ValueError(f"a page kept in a body journal ({dumped!r}), and no journal to read it from")
        return self.put(bytes(dumped))

    def __len__(self) -> int:
        return len(self._blobs)


def encode_page(messages: list[Message]) -> bytes:
    """The messages' fields column by column, packed and compressed."""
    columns = (
        [m.message_id for m in messages],
        [m.destination for m in messages],
        [m.headers for m in messages],
        [m.body for m in messages],
        [m.priority for m in messages],
        [m.expires for m in messages],
        [m.timestamp for m in messages],
        [m.group for m in messages],
        [m.persistent for m in messages],
        [m.delivery_count for m in messages],
    )
    return bytes(lz4.block.compress(msgpack.packb(columns, use_bin_type=True)))


def decode_page(blob: bytes) -> list[Message]:
    # use_list=False: body references come back as the tuples they were. Headers are blocks, or
    # (a page written before blocks) tuples of pairs.
    columns = msgpack.unpackb(lz4.block.decompress(blob), raw=False, use_list=False)
    messages = [Message(*fields) if type(fields[2]) is str
                else Message(fields[0], fields[1], user_block(fields[2]), *fields[3:])
                for fields in zip(*columns, strict=True)]
    return messages


def journal_indexes(bodies: list[Any]) -> list[int]:
    """The raft indexes of the body-journal references among `bodies`, ascending, once each
    (a group's bodies are `(raft index, ordinal)`; the core's own are bytes)."""
    return sorted({int(body[0]) for body in bodies if isinstance(body, (tuple, list))})


class Page:
    """One sealed page: its handle in the page store, how many messages it holds, the earliest
    expiry among them (0: none expires), the raft indexes of the bodies it references and their size."""

    __slots__ = ("bytes", "count", "handle", "indexes", "min_expires")

    def __init__(self, handle: Any, count: int, min_expires: int, indexes: list[int], size: int) -> None:
        self.handle = handle
        self.count = count
        self.min_expires = min_expires
        self.indexes = indexes
        self.bytes = size  # its messages' body bytes


def earliest_expiry(messages: list[Message]) -> int:
    return min((m.expires for m in messages if m.expires), default=0)


class Tail:
    """A store's paged messages in arrival order: sealed pages, oldest first, then the open list.
    Their earliest expiry is kept as they come (a Tick asks for it and must not cost a pass over
    the pages), and worked out again only after messages leave."""

    __slots__ = ("_due", "bytes", "count", "open", "pages", "store")

    def __init__(self, store: PageStore) -> None:
        self.store = store
        self.pages: deque[Page] = deque()
        self.open: list[Message] = []
        self.count = 0
        self.bytes = 0  # body bytes of its messages
        self._due: int | None = 0  # the earliest expiry (0: none expires; None: to work out again)

    @classmethod
    def restored(cls, store: PageStore, pages: list[Page], open_: list[Message], count: int) -> Tail:
        """A tail as a snapshot held it; its earliest expiry is worked out when first asked for."""
        tail = cls(store)
        tail.pages.extend(pages)
        tail.open = open_
        tail.count = count
        tail.bytes = sum(page.bytes for page in pages) + sum(body_size(m.body) for m in open_)
        tail._due = None
        return tail

    def append(self, message: Message, page_size: int) -> None:
        self.open.append(message)
        expires = message.expires
        if expires and self._due is not None and (not self._due or expires < self._due):
            self._due = expires
        self.count += 1
        self.bytes += body_size(message.body)
        if len(self.open) >= page_size:
            self.seal()

    def seal(self) -> None:
        messages, self.open = self.open, []
        if messages:
            self.pages.append(self._page(messages))

    def _page(self, messages: list[Message]) -> Page:
        return Page(self.store.put(encode_page(messages)), len(messages), earliest_expiry(messages),
                    journal_indexes([m.body for m in messages]), sum(body_size(m.body) for m in messages))

    def take(self) -> list[Message]:
        """The oldest paged messages (a page, or the open list), out of the tail."""
        if self.pages:
            page = self.pages.popleft()
            messages = decode_page(self.store.get(page.handle))
            self.store.drop(page.handle)
        else:
            messages, self.open = self.open, []
        self._due = None
        self.count -= len(messages)
        self.bytes -= sum(body_size(m.body) for m in messages)
        return messages

    def messages(self) -> Iterator[Message]:
        """Every paged message in order, read only (decoded page by page)."""
        for page in list(self.pages):
            yield from decode_page(self.store.get(page.handle))
        yield from list(self.open)

    def drop(self) -> None:
        """Free every page (the store is going away or purged)."""
        for page in self.pages:
            self.store.drop(page.handle)
        self.pages.clear()
        self.open = []
        self._due = 0
        self.count = 0
        self.bytes = 0

    def min_expires(self) -> int:
        if self._due is None:
            self._due = min((e for e in (*(p.min_expires for p in self.pages), earliest_expiry(self.open)) if e),
                            default=0)
        return self._due

    def expire(self, now: int) -> list[Message]:
        """Take out every message whose expiry is at or before `now`, in order; only the pages
        holding one are rewritten."""
        expired: list[Message] = []
        self._due = None
        for page in self.pages:
            if page.min_expires and page.min_expires <= now:
                messages = decode_page(self.store.get(page.handle))
                kept = [m for m in messages if not m.expires or m.expires > now]
                expired += [m for m in messages if m.expires and m.expires <= now]
                self.store.drop(page.handle)
                replaced = self._page(kept)
                page.handle, page.count, page.min_expires, page.indexes, page.bytes = (
                    replaced.handle, replaced.count, replaced.min_expires, replaced.indexes, replaced.bytes)
        if self.pages and any(page.count == 0 for page in self.pages):
            for page in self.pages:
                if page.count == 0:
                    self.store.drop(page.handle)
            self.pages = deque(page for page in self.pages if page.count)
        if self.open and any(m.expires and m.expires <= now for m in self.open):
            expired += [m for m in self.open if m.expires and m.expires <= now]
            self.open = [m for m in self.open if not m.expires or m.expires > now]
        self.count -= len(expired)
        self.bytes -= sum(body_size(m.body) for m in expired)
        return expired
