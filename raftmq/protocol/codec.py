"""STOMP 1.0/1.1/1.2 frame codec, sans-I/O: `FrameParser.feed(bytes) -> [Frame]` and
`encode_frame(Frame) -> bytes`.

The parser sits on the broker's hot path, so it works on whole buffers with `bytes.find`,
one regex search per frame head and one UTF-8 decode per head; it never loops over bytes in
Python. Headers without a backslash (almost all of them) skip unescaping altogether.

Between `feed` calls the parser keeps only the unfinished frame. While that frame waits for
body bytes or for its NUL, a new chunk is appended to a bytearray and checked cheaply, so a
16 MiB body arriving in small chunks costs linear time, and every limit is enforced as soon
as the bytes that break it arrive.
"""

from __future__ import annotations

import re

from raftmq.errors import FrameTooLarge, ProtocolError
from raftmq.protocol.escaping import ESCAPING_MODES, RAW, UNESCAPED_COMMANDS, encode_header_line, unescaper_for
from raftmq.protocol.frame import ALL_COMMANDS, SUPPORTED_VERSIONS, Frame
from raftmq.protocol.header_block import STRIPPED_BY_LENGTH
from raftmq.protocol.limits import Limits
from raftmq.protocol.negotiation import negotiate_version

HEARTBEAT: bytes = b"\n"

# The end of the headers: the EOL of the last header (or command) line, then an empty line.
_BLANK_LINE = re.compile(rb"\n\r?\n")
# Heart-beats: EOLs between frames, including the EOLs a frame may have after its NUL.
_EOL_RUN = re.compile(rb"(?:\r?\n)+")
# More digits than this cannot be under any sane limit, and would be slow for int().
_MAX_LENGTH_DIGITS = 16
# Frames besides SEND whose plain header text is kept whole (their headers made when asked for):
# a consumer's per-message answers, read by `FrameTranslator` from the text.
_KEPT_WHOLE = frozenset({"ACK", "NACK"})

_DEFAULT_LIMITS = Limits()

_Head = tuple[str, list[tuple[str, str]] | None, int, int, str | None, str | None]


class FrameParser:
    """Incremental STOMP frame parser.

    `feed` returns every frame completed by the bytes given so far and keeps the rest. On a
    `ProtocolError` the frames completed earlier in the same `feed` call are kept in
    `frames_before_error` (the server may act on them before answering with ERROR), and the
    parser refuses any further input.

    A CONNECT/STOMP frame switches the parser to the version `negotiate_version` picks from
    its `accept-version`, and a CONNECTED frame to its `version` header, so frames pipelined
    right behind them in the same chunk are read under the right escaping rules. Setting
    `version` afterwards (as the server and the client do) is harmless.
    """

    def __init__(self, limits: Limits = _DEFAULT_LIMITS, version: str = "1.2") -> None:
        self.limits = limits
        self.version = version
        self.heartbeats = 0
        self.frames_before_error: list[Frame] = []
        self._error: ProtocolError | None = None
        self._buf = bytearray()  # the unfinished frame; it starts at offset 0
        # A frame whose headers are parsed but whose body is incomplete: (command, headers,
        # offset of the body, content-length or -1 when NUL-terminated, the header text when it
        # was kept whole and a SEND's block, `Frame.text` and `Frame.block`; headers are then None).
        self._head: _Head | None = None
        self._need = 0  # buffered length that completes a content-length body
        self._scan = 0  # where to resume searching (for the empty line, or for the NUL)
        # Progress of the limit checks over an unfinished header block.
        self._checked = 0
        self._line_start = 0
        self._lines = 0

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, value: str) -> None:
        self._unescape = unescaper_for(value)  # raises ProtocolError for an unknown version
        self._version = value

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished frame held by the parser."""
        return len(self._buf)

    def unfinished(self) -> bytes:
        """The bytes of the unfinished frame, as they arrived (a session handed to another
        node passes them on, and the parser there reads the frame from its start)."""
        return bytes(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._error is not None:
            raise ProtocolError(f"connection already failed: {self._error.message}", self._error.detail)
        if not data:
            return []
        frames: list[Frame] = []
        try:
            buf = self._buf
            if buf:
                buf += data
                if not self._may_complete(buf):
                    return frames
                chunk = bytes(buf)
                buf.clear()
            else:
                chunk = data if isinstance(data, bytes) else bytes(data)
            pos = self._parse(chunk, frames)
        except ProtocolError as err:
            self.frames_before_error = frames
            self._error = err
            raise
        if pos < len(chunk):
            self._buf += memoryview(chunk)[pos:]
        return frames

    def _may_complete(self, buf: bytearray) -> bool:
        """Whether the buffered bytes might finish the pending frame; enforces limits if not."""
        head = self._head
        if head is not None:
            if head[3] >= 0:
                return len(buf) >= self._need
            if buf.find(b"\0", self._scan) >= 0:
                return True
            self._check_unterminated_body(buf, 0, head[2])
            self._scan = len(buf)
            return False
        if buf[0] == 13:  # a CR that may be half of a CRLF heart-beat
            return True
        if _BLANK_LINE.search(buf, self._scan) is not None:
            return True
        self._check_partial_head(buf, 0)
        return False

    def _parse(self, buf: bytes, frames: list[Frame], stop_after: int = 0) -> int:
        """Parse complete frames from `buf` (pending frame at offset 0); return bytes consumed.
        With `stop_after`, at most that many frames (the rest is left unread)."""
        limits = self.limits
        end = len(buf)
        pos = 0
        # A head is unpacked into locals and boxed as a tuple only when its frame stays
        # unfinished (`self._head`): compiled, the locals are C values, the tuple an object.
        pending = self._head
        self._head = None
        while pos < end:
            if pending is None:
                first = buf[pos]
                if first == 10 or first == 13:
                    eols = _EOL_RUN.match(buf, pos)
                    if eols is None:
                        if pos + 1 == end:
                            break  # a lone CR: wait for its LF
                        raise ProtocolError("carriage return without line feed between frames")
                    self.heartbeats += buf.count(b"\n", pos, eols.end())
                    pos = eols.end()
                    continue
                blank = _BLANK_LINE.search(buf, pos + self._scan)
                if blank is None:
                    self._check_partial_head(buf, pos)
                    break
                if self._checked:
                    self._scan = self._checked = self._line_start = self._lines = 0
                command, headers, body_offset, length, text, block = self._parse_head(
                    buf, pos, blank.start(), blank.end())
            else:
                command, headers, body_offset, length, text, block = pending
                pending = None
            body_start = pos + body_offset
            if length < 0:
                nul = buf.find(b"\0", max(body_start, pos + self._scan))
                if nul < 0:
                    self._check_unterminated_body(buf, pos, body_offset)
                    self._scan = end - pos
                    self._head = (command, headers, body_offset, length, text, block)
                    break
                if nul - body_start > limits.max_body_bytes or nul - pos > limits.max_frame_bytes:
                    raise FrameTooLarge("frame body exceeds the size limit")
                body_end = nul
            else:
                body_end = body_start + length
                if body_end >= end:
                    self._need = body_end + 1 - pos
                    self._head = (command, headers, body_offset, length, text, block)
                    break
                if buf[body_end] != 0:
                    raise ProtocolError("frame does not end with NUL after content-length octets")
            frames.append(Frame(command, headers, buf[body_start:body_end], text, block))
            if command in UNESCAPED_COMMANDS and headers is not None:
                self._switch_version(command, headers)
            pos = body_end + 1
            self._scan = 0
            if stop_after and len(frames) >= stop_after:
                break
        if pending is not None:  # nothing to read it from
            self._head = pending
        return pos

    def _parse_head(self, buf: bytes, start: int, eol: int, body_start: int) -> _Head:
        """Decode command and headers in buf[start:eol]; body_start is after the empty line.

        A SEND whose lines hold no backslash, no CR and one colon each (nearly every SEND) is
        not taken apart: its text is kept whole and its block is that text without the
        transport lines (raftmq.protocol.header_block); its headers are made when asked for.
        An ACK or NACK such as that keeps its text whole too (no block)."""
        limits = self.limits
        text_end = eol + 1  # the text keeps its last line's EOL
        if buf[eol - 1] == 13:
            eol -= 1
        if body_start - start > limits.max_frame_bytes:
            raise FrameTooLarge("frame headers exceed the frame size limit")
        if eol - start > limits.max_header_line_bytes:
            for line in buf[start:eol].split(b"\n"):
                if len(line) - line.endswith(b"\r") > limits.max_header_line_bytes:
                    raise FrameTooLarge(f"header line longer than {limits.max_header_line_bytes} bytes")
        try:
            text = buf[start:text_end].decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("frame headers are not valid UTF-8") from None
        # Counted in the text (its last line's EOL included): compiled, `bytes.count` and
        # `bytes.find` with bounds each build a tuple of their arguments.
        if text.count("\n") - 1 > limits.max_headers:
            raise FrameTooLarge(f"more than {limits.max_headers} headers")
        if "\0" in text:
            raise ProtocolError("NUL in frame headers")
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        newline = text.find("\n")
        # Every message's frames named by a constant (a slice would be a new string each).
        if newline == 4 and text.startswith("SEND"):
            command = "SEND"
        elif newline == 3 and text.startswith("ACK"):
            command = "ACK"
        else:
            command = text[:newline]
        if command not in ALL_COMMANDS:
            raise ProtocolError(f"unknown command {command[:40]!r}")
        if newline + 1 == len(text):
            return command, [], body_start - start, -1, None, None
        rest = text[newline + 1 :]
        plain = "\\" not in rest and "\r" not in rest
        block: str | None = None
        kept = False  # the text kept whole: headers made from it when asked for
        if plain and command == "SEND":
            block = _send_block(rest)
            kept = block is not None
        elif plain and command in _KEPT_WHOLE:
            kept = _plain_lines(rest)
        headers: list[tuple[str, str]] | None = None
        if not kept:
            lines = rest.split("\n")
            lines.pop()  # after the last EOL
            pairs = [line.partition(":") for line in lines]
            headers = [(name, value) for name, colon, value in pairs if colon and name]
            if len(headers) != len(pairs):
                raise _bad_header_line(next(n + c + v for n, c, v in pairs if not (c and n)))
            unescape = self._unescape
            if unescape is not None and "\\" in rest and command not in UNESCAPED_COMMANDS:
                headers = [
                    (unescape(name), unescape(value)) if "\\" in name or "\\" in value else (name, value)
                    for name, value in headers
                ]
        length = -1
        # The first content-length line wins. Escapes cannot produce any of its letters, so the
        # raw text finds it faster than a walk over the headers.
        found = rest.find("content-length:")
        while found > 0 and rest[found - 1] != "\n":
            found = rest.find("content-length:", found + 1)
        if found >= 0:
            value = rest[found + 15 : rest.find("\n", found)]
            try:
                length = self._content_length(value, body_start - start)
            except ProtocolError as exc:
                exc.receipt = _first(headers if headers is not None else Frame(command, None, b"", rest).headers,
                                     "receipt")
                raise
        if not kept:
            return command, headers, body_start - start, length, None, None
        return command, None, body_start - start, length, rest, block

    def _content_length(self, value: str, head_size: int) -> int:
        if not (value.isascii() and value.isdigit()):
            raise ProtocolError(f"invalid content-length {value[:40]!r}")
        if len(value) > _MAX_LENGTH_DIGITS and len(value.lstrip("0")) > _MAX_LENGTH_DIGITS:
            raise FrameTooLarge("content-length exceeds the body size limit")
        length = int(value)
        if length > self.limits.max_body_bytes:
            raise FrameTooLarge(f"content-length {length} exceeds the body size limit")
        if head_size + length > self.limits.max_frame_bytes:
            raise FrameTooLarge(f"content-length {length} exceeds the frame size limit")
        return length

    def _check_unterminated_body(self, buf: bytes | bytearray, start: int, body_offset: int) -> None:
        size = len(buf) - start
        if size - body_offset > self.limits.max_body_bytes or size > self.limits.max_frame_bytes:
            raise FrameTooLarge("frame body exceeds the size limit")

    def _check_partial_head(self, buf: bytes | bytearray, start: int) -> None:
        """Limits over a header block whose empty line has not arrived; resumes where it left."""
        limits = self.limits
        end = len(buf)
        if end - start > limits.max_frame_bytes:
            raise FrameTooLarge("frame headers exceed the frame size limit")
        checked = start + self._checked
        # A frame that skipped its empty line would otherwise swallow the frames behind it.
        if buf.find(b"\0", checked, end) >= 0:
            raise ProtocolError("NUL before the end of the frame headers")
        line_start = start + self._line_start
        lines = self._lines
        newline = buf.find(b"\n", checked, end)
        while newline >= 0:
            length = newline - line_start
            if length and buf[newline - 1] == 13:
                length -= 1
            if length > limits.max_header_line_bytes:
                raise FrameTooLarge(f"header line longer than {limits.max_header_line_bytes} bytes")
            lines += 1
            if lines > limits.max_headers + 1:  # the command line is not a header
                raise FrameTooLarge(f"more than {limits.max_headers} headers")
            line_start = newline + 1
            newline = buf.find(b"\n", line_start, end)
        if end - line_start > limits.max_header_line_bytes + 1:  # +1: a CR may start the EOL
            raise FrameTooLarge(f"header line longer than {limits.max_header_line_bytes} bytes")
        self._checked = end - start
        self._line_start = line_start - start
        self._lines = lines
        self._scan = max(0, end - start - 2)  # the empty line may straddle this chunk's end

    def _switch_version(self, command: str, headers: list[tuple[str, str]]) -> None:
        if command == "CONNECTED":
            version = _first(headers, "version") or "1.0"
            if version in SUPPORTED_VERSIONS:
                self.version = version
            return
        try:
            self.version = negotiate_version(_first(headers, "accept-version"))
        except ProtocolError:
            pass  # the server refuses the CONNECT; the parser has nothing left to read


def first_frame(data: bytes, limits: Limits = _DEFAULT_LIMITS) -> tuple[Frame, int] | None:
    """The first whole frame at the start of `data` (heart-beat EOLs before it skipped), and the
    offset just past it; None while it is not whole yet. Raises ProtocolError (or FrameTooLarge)
    for bytes that are no frame. For a peer's first answer (a CONNECTED, an ERROR), whose bytes
    after it are not ours to read."""
    frames: list[Frame] = []
    end = FrameParser(limits)._parse(bytes(data), frames, 1)
    return (frames[0], end) if frames else None


def _send_block(text: str) -> str | None:
    """The block of a SEND's header text (each line `name:value\\n`, no escape, no CR): the text
    without its transport lines; None when a line is not one name, one colon and a value (the
    caller then reads the lines one by one, and refuses or unescapes as the version says).
    The text is walked in place: the block is the runs of lines between the cut ones."""
    if text.count(":") != text.count("\n"):
        return None  # with a colon after a name on every line (below): one colon each
    end = len(text)
    start = 0
    run = 0  # where the run of kept lines that `start` is in began
    runs: list[str] | None = None  # the runs before `run`, once a line was cut
    while start < end:
        eol = text.find("\n", start)
        colon = text.find(":", start, eol)
        if eol < 0 or colon <= start:
            return None
        names = STRIPPED_BY_LENGTH.get(colon - start)
        if names is not None and _names_one_of(text, start, colon, names):
            if runs is None:
                runs = []
            if run < start:
                runs.append(text[run:start])
            run = eol + 1
        start = eol + 1
    if runs is None:
        return text
    if run < end:
        runs.append(text[run:end])
    return "".join(runs)


def _names_one_of(text: str, start: int, colon: int, names: tuple[str, ...]) -> bool:
    """Whether the name in `text[start:colon]` is one of `names` (each that long): compared in
    place, no slice made (`find` with bounds is a C call when compiled; `startswith` with a
    start is not)."""
    for name in names:
        if text.find(name, start, colon) == start:
            return True
    return False


def _plain_lines(text: str) -> bool:
    """Whether every line of a header text is `name:value\\n` with one colon and a name: the
    lines `Frame.headers` makes from the kept text are then the ones a full parse would make."""
    if text.count(":") != text.count("\n"):
        return False  # with a colon after a name on every line (below): one colon each
    end = len(text)
    start = 0
    while start < end:
        eol = text.find("\n", start)
        if eol < 0 or text.find(":", start, eol) <= start:
            return False
        start = eol + 1
    return True


def _first(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _bad_header_line(line: str) -> ProtocolError:
    return ProtocolError(f"header line without a name and a colon: {line[:60]!r}")


def encode_frame(frame: Frame, version: str = "1.2") -> bytes:
    """The wire bytes of `frame` for a peer speaking `version`, NUL included.

    Headers are escaped for the version (never for CONNECT/STOMP/CONNECTED). A non-empty body
    always gets a `content-length`; one the frame carries is rewritten to the body's real
    length and never repeated. A header the version cannot represent raises ProtocolError.
    """
    command = frame.command
    if command not in ALL_COMMANDS:
        raise ProtocolError(f"cannot encode unknown command {command[:40]!r}")
    body = frame.body
    headers = frame.headers
    mode = ESCAPING_MODES.get(version)
    if mode is None:
        raise ProtocolError(f"unsupported STOMP version {version!r}")
    if command in UNESCAPED_COMMANDS:
        mode = RAW
    text = _escape_mode_text(headers, mode) if mode != RAW else _raw_text(headers)
    if "content-length:" in text:
        text = _with_true_content_length(headers, len(body), mode)
    elif body:
        text += f"content-length:{len(body)}\n"
    try:
        head = f"{command}\n{text}\n".encode("utf-8")
    except UnicodeEncodeError as err:
        raise ProtocolError(f"cannot encode header text as UTF-8: {err.reason}") from None
    return head + body + b"\0"


def _with_true_content_length(headers: list[tuple[str, str]], body_length: int, mode: str) -> str:
    lines = []
    seen = False
    for name, value in headers:
        if name == "content-length":
            if seen:
                continue
            seen = True
            value = str(body_length)
        lines.append(encode_header_line(name, value, mode) + "\n")
    if not seen and body_length:
        lines.append(f"content-length:{body_length}\n")
    return "".join(lines)


def _escape_mode_text(headers: list[tuple[str, str]], mode: str) -> str:
    """Header lines for 1.1/1.2, escaping all headers at once.

    Names and values are joined with NUL and \x01 as stand-ins for ':' and EOL, so escaping
    is a few C-level replaces over the whole block; NUL cannot occur in a header, and a block
    that holds a stray \x01 (or any header the mode cannot carry) goes header by header.
    """
    count = len(headers)
    block = "".join([f"{name}\0{value}\x01" for name, value in headers])
    if (
        block.count("\0") != count
        or block.count("\x01") != count
        or block.startswith("\0")
        or "\x01\0" in block
        or (mode == "1.1" and "\r\x01" in block)
    ):
        return "".join([encode_header_line(name, value, mode) + "\n" for name, value in headers])
    block = block.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    if mode == "1.2":
        block = block.replace("\r", "\\r")
    return block.replace("\0", ":").replace("\x01", "\n")


def _raw_text(headers: list[tuple[str, str]]) -> str:
    """Header lines for 1.0 and for CONNECT/STOMP/CONNECTED frames, which are never escaped."""
    count = len(headers)
    text = "".join([f"{name}:{value}\n" for name, value in headers])
    if (
        text.count(":") == count
        and text.count("\n") == count
        and "\0" not in text
        and "\r\n" not in text
        and not text.startswith(":")
        and "\n:" not in text
    ):
        return text
    # Colons in values are fine here; let the per-header check sort them from real problems.
    return "".join([encode_header_line(name, value, RAW) + "\n" for name, value in headers])
