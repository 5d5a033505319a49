"""STOMP header escaping per protocol version.

1.2 escapes `\\r \\n \\c \\\\`; 1.1 the same without `\\r`; 1.0 escapes nothing. CONNECT, STOMP
and CONNECTED frames are never escaped, in any version (both specs say so), so they use the
`RAW` mode whatever the negotiated version.

A header that a mode cannot carry (a newline in a raw value, a colon in a raw name, a value
ending in a bare CR where CR is not escaped, an empty name, a NUL anywhere) is refused with
`ProtocolError` rather than written: writing it would corrupt the frame or let one header
inject others.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from raftmq.errors import ProtocolError

RAW = "raw"  # no escaping: STOMP 1.0, and CONNECT/STOMP/CONNECTED frames in every version
ESCAPING_MODES = {"1.0": RAW, "1.1": "1.1", "1.2": "1.2"}

# Frames whose headers are never escaped, in any version.
UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})

_DECODE = {
    "1.2": {"r": "\r", "n": "\n", "c": ":", "\\": "\\"},
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
}
# A backslash and the character after it; an empty group means the text ended on a backslash.
_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)


def _unescaper(table: dict[str, str], version: str) -> Callable[[str], str]:
    def replace(match: re.Match[str]) -> str:
        try:
            return table[match.group(1)]
        except KeyError:
            raise ProtocolError(
                f"invalid escape sequence {match.group(0)!r} in a STOMP {version} header",
                detail="STOMP 1.2 allows \\r \\n \\c \\\\ in headers; STOMP 1.1 allows \\n \\c \\\\",
            ) from None

    singles = [("\\" + code, char) for code, char in table.items() if code != "\\"]

    def unescape(text: str) -> str:
        if "\\" not in text:
            return text
        if "\0" in text:  # NUL is the placeholder below; headers never hold one, so this is rare
            return _ESCAPE_SEQUENCE.sub(replace, text)
        # Non-overlapping left-to-right replacement pairs up a run of backslashes exactly as a
        # left-to-right escape reader does, so after this every backslash starts an escape.
        decoded = text.replace("\\\\", "\0")
        for escaped, char in singles:
            decoded = decoded.replace(escaped, char)
        if "\\" in decoded:
            return _ESCAPE_SEQUENCE.sub(replace, text)  # raises, naming the bad sequence
        return decoded.replace("\0", "\\")

    return unescape


_UNESCAPERS: dict[str, Callable[[str], str] | None] = {
    "1.0": None,
    "1.1": _unescaper(_DECODE["1.1"], "1.1"),
    "1.2": _unescaper(_DECODE["1.2"], "1.2"),
}


def unescaper_for(version: str) -> Callable[[str], str] | None:
    """The header decoder for `version` (None for 1.0, which does not escape)."""
    try:
        return _UNESCAPERS[version]
    except KeyError:
        raise ProtocolError(f"unsupported STOMP version {version!r}") from None


def unescape(text: str, version: str) -> str:
    """Decode one escaped header name or value; an undefined escape is a ProtocolError."""
    decode = unescaper_for(version)
    return text if decode is None else decode(text)


def _refuse(name: str, why: str) -> ProtocolError:
    return ProtocolError(f"cannot encode header {name[:60]!r}: {why}")


def encode_header_line(name: str, value: str, mode: str) -> str:
    """`name:value` escaped for `mode` (RAW, "1.1" or "1.2"), without the EOL.

    Raises ProtocolError for a header the mode cannot represent.
    """
    if not name:
        raise _refuse(name, "empty header name")
    if "\0" in name or "\0" in value:
        raise _refuse(name, "NUL in a header")
    if mode == "1.2":
        return f"{_escape12(name)}:{_escape12(value)}"
    # Neither 1.1 nor raw headers can escape CR, and a CR just before the EOL is read as
    # part of a CRLF line ending, so a value may not end in one.
    if value.endswith("\r"):
        raise _refuse(name, f"value ends in a carriage return, which STOMP {mode} cannot carry")
    if mode == "1.1":
        return f"{_escape11(name)}:{_escape11(value)}"
    if ":" in name or "\n" in name:
        raise _refuse(name, "colon or newline in a header name of an unescaped frame")
    if "\n" in value:
        raise _refuse(name, "newline in a header value of an unescaped frame")
    return f"{name}:{value}"


def _escape12(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")


def _escape11(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")


def escape(text: str, version: str) -> str:
    """Escape one header name or value for `version` (1.0 returns it unchanged)."""
    mode = ESCAPING_MODES.get(version)
    if mode is None:
        raise ProtocolError(f"unsupported STOMP version {version!r}")
    if mode == "1.2":
        return _escape12(text)
    if mode == "1.1":
        return _escape11(text)
    return text
