"""Property tests of the STOMP codec: encode -> parse round trips in every version, chunking
never changes what is parsed, and no input makes the parser raise anything but ProtocolError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftmq.errors import ProtocolError
from raftmq.protocol.codec import FrameParser, encode_frame
from raftmq.protocol.frame import ALL_COMMANDS, SUPPORTED_VERSIONS, Frame
from raftmq.protocol.limits import Limits
from raftmq.protocol.negotiation import negotiate_version

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONNECT_COMMANDS = ("CONNECT", "STOMP", "CONNECTED")
OTHER_COMMANDS = tuple(sorted(ALL_COMMANDS - set(CONNECT_COMMANDS)))
# Characters that escaping and line splitting care about, drawn often next to arbitrary text.
TRICKY = st.sampled_from([":", "\n", "\r", "\\", "c", "n", "r", " ", "\x01", "é", "\u2028"])
tricky_text = st.text(alphabet=st.one_of(TRICKY, st.characters(blacklist_categories=("Cs",))), max_size=12)
bodies = st.one_of(st.just(b""), st.binary(max_size=64), st.binary(max_size=64).map(lambda b: b + b"\0" + b))


def is_representable(name: str, value: str, raw: bool, version: str) -> bool:
    """Whether a header can be written in `version` (raw: a frame that is never escaped)."""
    if not name or "\0" in name or "\0" in value:
        return False
    if raw or version == "1.0":
        return ":" not in name and "\n" not in name and "\n" not in value and not value.endswith("\r")
    return version == "1.2" or not value.endswith("\r")


def representable_header(raw: bool, version: str) -> st.SearchStrategy[tuple[str, str]]:
    return (
        st.tuples(tricky_text, tricky_text)
        .map(lambda h: (h[0].replace("\0", ""), h[1].replace("\0", "")))
        .filter(lambda h: h[0] != "content-length" and is_representable(h[0], h[1], raw, version))
    )


@st.composite
def frame_for(draw: st.DrawFn, version: str) -> Frame:
    command = draw(st.sampled_from(OTHER_COMMANDS + CONNECT_COMMANDS))
    raw = command in CONNECT_COMMANDS
    headers = draw(st.lists(representable_header(raw, version), max_size=6))
    if raw:
        # Frames that switch the parser's version say which one, or not (then 1.0 applies).
        name = "version" if command == "CONNECTED" else "accept-version"
        offered = draw(st.sampled_from([None, "1.0", "1.1", "1.2", "1.0,1.1,1.2", "1.1,1.0", "9.9"]))
        if offered is not None:
            headers.insert(0, (name, offered))
    return Frame(command, headers, draw(bodies))


def version_after(frame: Frame, version: str) -> str:
    """The version the parser reads the next frame with (see FrameParser's docstring)."""
    if frame.command == "CONNECTED":
        announced = frame.get("version") or "1.0"
        return announced if announced in SUPPORTED_VERSIONS else version
    if frame.command in ("CONNECT", "STOMP"):
        try:
            return negotiate_version(frame.get("accept-version"))
        except ProtocolError:
            return version
    return version


def expected_after_parse(frame: Frame) -> Frame:
    headers = list(frame.headers)
    if frame.body:
        headers.append(("content-length", str(len(frame.body))))
    return Frame(frame.command, headers, frame.body)


def feed_in_chunks(parser: FrameParser, data: bytes, cuts: list[int]) -> list[Frame]:
    frames: list[Frame] = []
    start = 0
    for cut in sorted(cuts) + [len(data)]:
        frames += parser.feed(data[start:cut])
        start = cut
    return frames


@PROPERTY
@given(st.data())
def test_encode_then_parse_round_trips_in_every_version(data: st.DataObject) -> None:
    version = data.draw(st.sampled_from(SUPPORTED_VERSIONS))
    stream = b""
    expected: list[Frame] = []
    heartbeats = 0
    current = version
    for _ in range(data.draw(st.integers(1, 4))):
        beats = data.draw(st.sampled_from([b"", b"\n", b"\r\n", b"\n\r\n"]))
        stream += beats
        heartbeats += beats.count(b"\n")
        frame = data.draw(frame_for(current))
        stream += encode_frame(frame, current)
        expected.append(expected_after_parse(frame))
        current = version_after(frame, current)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    parser = FrameParser(version=version)
    assert feed_in_chunks(parser, stream, cuts) == expected
    assert parser.heartbeats == heartbeats
    assert parser.buffered == 0
    assert parser.version == current


@PROPERTY
@given(
    st.sampled_from(SUPPORTED_VERSIONS),
    st.sampled_from(sorted(ALL_COMMANDS)),
    st.lists(st.tuples(tricky_text, st.one_of(tricky_text, st.just("x\0"))), max_size=4),
    bodies,
)
def test_encoder_refuses_exactly_the_headers_a_version_cannot_carry(
    version: str, command: str, headers: list[tuple[str, str]], body: bytes
) -> None:
    headers = [(name, value) for name, value in headers if name != "content-length"]
    # Leave out headers that would switch the parser's version; that is tested above.
    headers = [(name, value) for name, value in headers if name not in ("version", "accept-version")]
    if command == "CONNECT" or command == "STOMP":
        headers.insert(0, ("accept-version", version))
    elif command == "CONNECTED":
        headers.insert(0, ("version", version))
    frame = Frame(command, headers, body)
    raw = command in CONNECT_COMMANDS
    if all(is_representable(name, value, raw, version) for name, value in headers):
        assert FrameParser(version=version).feed(encode_frame(frame, version)) == [expected_after_parse(frame)]
    else:
        try:
            encode_frame(frame, version)
        except ProtocolError:
            return
        raise AssertionError("an unrepresentable header was encoded")


SMALL_LIMITS = Limits(max_frame_bytes=300, max_headers=4, max_header_line_bytes=40, max_body_bytes=120)


def outcome(stream: bytes, cuts: list[int] | None, version: str, limits: Limits) -> tuple[list[Frame], bool, int]:
    """(frames, whether it failed, heart-beats) of parsing `stream`, cut where `cuts` says."""
    parser = FrameParser(limits, version)
    frames: list[Frame] = []
    try:
        if cuts is None:
            frames = parser.feed(stream)
        else:
            start = 0
            for cut in sorted(cuts) + [len(stream)]:
                frames += parser.feed(stream[start:cut])
                start = cut
    except ProtocolError:
        return frames + parser.frames_before_error, True, -1
    return frames, False, parser.heartbeats


@st.composite
def mutated_streams(draw: st.DrawFn) -> bytes:
    """Valid frames with a few bytes inserted, deleted or replaced: reaches deep parser states."""
    version = "1.2"
    stream = bytearray()
    for _ in range(draw(st.integers(1, 3))):
        stream += draw(st.sampled_from([b"", b"\n", b"\r\n"]))
        frame = draw(frame_for(version))
        stream += encode_frame(frame, version)
        version = version_after(frame, version)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(stream)))
        junk = draw(st.sampled_from([b"\0", b"\n", b"\r", b":", b"\\", b"\xff", b"\r\n\r\n", b"9",
                                     b"content-length:1\n"]))
        how = draw(st.sampled_from(["insert", "delete", "replace"]))
        if how == "insert":
            stream[at:at] = junk
        elif how == "delete":
            del stream[at : at + len(junk)]
        else:
            stream[at : at + len(junk)] = junk
    return bytes(stream)


any_stream = st.one_of(st.binary(max_size=300), mutated_streams())


@PROPERTY
@given(
    any_stream,
    st.lists(st.integers(0, 400), max_size=10),
    st.sampled_from(SUPPORTED_VERSIONS),
    st.sampled_from([Limits(), SMALL_LIMITS]),
)
def test_any_bytes_parse_or_raise_protocol_error_the_same_however_chunked(
    stream: bytes, cuts: list[int], version: str, limits: Limits
) -> None:
    cuts = [min(cut, len(stream)) for cut in cuts]
    whole = outcome(stream, None, version, limits)  # anything but ProtocolError fails the test
    assert outcome(stream, cuts, version, limits) == whole


@settings(max_examples=30, deadline=None)
@given(mutated_streams(), st.sampled_from(SUPPORTED_VERSIONS))
def test_bytewise_feeding_matches_one_feed(stream: bytes, version: str) -> None:
    assert outcome(stream, list(range(len(stream))), version, SMALL_LIMITS) == outcome(
        stream, None, version, SMALL_LIMITS
    )
