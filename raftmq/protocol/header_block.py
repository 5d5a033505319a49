"""A message's user headers as one block of text: how a SEND's headers travel from the frame into
the Raft entry, the core, the journal and the MESSAGE frames, without being taken apart.

The block is the header lines of a STOMP 1.2 frame, each `name:value\\n`, names and values
escaped as 1.2 escapes them (`\\\\`, `\\n`, `\\c`, `\\r`), repeats kept in the order sent; the
empty string is no headers. A 1.2 or 1.1 producer's headers that need no escaping (nearly all)
are their own block, as read from the socket, and a MESSAGE frame carries the block as it is
(1.0 and 1.1 consumers get it re-encoded only when it holds an escape).

Readers take the first occurrence of a repeated name, as STOMP says (`first`, `pairs_of` keeps
every one, in order). The headers that belong to the transport or to one hop (`STRIPPED`) are
never in a block: the edge removes them.
"""

from __future__ import annotations

from collections.abc import Iterable

# Headers of a SEND that belong to the transport or one hop, and those the server sets on a
# MESSAGE: never stored with a message, so a producer cannot make a first delivery look
# redelivered.
TRANSPORT_HEADERS = frozenset({"receipt", "transaction", "content-length", "destination", "message-id", "subscription",
                               "ack"})
STRIPPED = TRANSPORT_HEADERS | {"redelivered", "delivery-count", "raftmq-term"}
# STRIPPED's names by length: a line is compared in place only with the names of its name's length.
STRIPPED_BY_LENGTH: dict[int, tuple[str, ...]] = {
    length: tuple(sorted(name for name in STRIPPED if len(name) == length))
    for length in {len(name) for name in STRIPPED}
}

Pairs = tuple[tuple[str, str], ...]


def escape(text: str) -> str:
    """A header name or value as a block holds it (STOMP 1.2 escaping)."""
    if "\\" in text or "\n" in text or ":" in text or "\r" in text:
        return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")
    return text


def unescape(text: str) -> str:
    """The plain text of an escaped name or value (the block's own escapes only)."""
    if "\\" not in text:
        return text
    out = []
    i = 0
    end = len(text)
    while i < end:
        at = text.find("\\", i)
        if at < 0 or at + 1 >= end:
            out.append(text[i:])
            break
        out.append(text[i:at])
        code = text[at + 1]
        out.append("\n" if code == "n" else ":" if code == "c" else "\r" if code == "r" else code)
        i = at + 2
    return "".join(out)


def block_of(pairs: Iterable[tuple[str, str]]) -> str:
    """The block of plain (name, value) pairs, in their order, repeats kept."""
    return "".join([f"{escape(name)}:{escape(value)}\n" for name, value in pairs])


def user_block(pairs: Iterable[tuple[str, str]]) -> str:
    """The block of a message's headers as sent, without the STRIPPED ones."""
    return block_of([pair for pair in pairs if pair[0] not in STRIPPED])


def pairs_of(block: str) -> Pairs:
    """Every (name, value) of a block, plain, in order, repeats kept."""
    if not block:
        return ()
    lines = block.split("\n")
    lines.pop()  # the text after the last line's EOL: empty
    escaped = "\\" in block
    out = []
    for line in lines:
        name, _, value = line.partition(":")
        if escaped:
            name, value = unescape(name), unescape(value)
        out.append((name, value))
    return tuple(out)


def header_dict(block: str) -> dict[str, str]:
    """Name → value, the first occurrence of a repeated name winning."""
    out: dict[str, str] = {}
    for name, value in pairs_of(block):
        if name not in out:
            out[name] = value
    return out


def key(name: str) -> tuple[str, str]:
    """What `first_of` looks for: `name:` at the block's start, and after an EOL. Hot readers
    make theirs once."""
    head = escape(name) + ":"
    return head, "\n" + head


def _value_at(block: str, wanted: tuple[str, str]) -> int:
    """Where the value of the first line that `wanted` (`key(name)`) names starts, or -1."""
    head, line = wanted
    if block.startswith(head):
        return len(head)
    at = block.find(line)
    return at if at < 0 else at + len(line)


def first_of(block: str, wanted: tuple[str, str]) -> str | None:
    """The value of the first line that `wanted` (`key(name)`) names, plain, or None."""
    start = _value_at(block, wanted)
    if start < 0:
        return None
    value = block[start : block.find("\n", start)]
    return unescape(value) if "\\" in value else value


def first_is(block: str, wanted: tuple[str, str], expected: str) -> bool:
    """Whether the first line that `wanted` (`key(name)`) names holds exactly `expected`, compared
    where it stands: no value is sliced out. `expected` holds no character a block escapes
    (backslash, colon, line ends): then a value that was escaped has a backslash in the block and
    never matches, and one that matches reads as `expected` (`first_of`'s answer)."""
    start = _value_at(block, wanted)
    if start < 0:
        return False
    end = block.find("\n", start)
    return end - start == len(expected) and block.find(expected, start, end) == start


def first(block: str, name: str) -> str | None:
    """The value of the first `name` line of a block (plain), or None."""
    return first_of(block, key(name))


def has(block: str, name: str) -> bool:
    """Whether the block has a `name` line."""
    head, line = key(name)
    return block.startswith(head) or block.find(line) >= 0


def without(block: str, names: frozenset[str] | set[str]) -> str:
    """The block without the lines of `names`."""
    pairs = pairs_of(block)
    if all(name not in names for name, _ in pairs):
        return block
    return block_of([pair for pair in pairs if pair[0] not in names])
