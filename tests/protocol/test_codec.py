"""Unit tests of the STOMP frame parser and encoder, one rule at a time."""

from __future__ import annotations

import pytest
import stomp.utils as stomp_utils

from raftmq.errors import FrameTooLarge, ProtocolError
from raftmq.protocol.codec import HEARTBEAT, FrameParser, encode_frame
from raftmq.protocol.frame import Frame
from raftmq.protocol.limits import Limits
from raftmq.protocol.negotiation import negotiate_version


def parse_all(data: bytes, version: str = "1.2", limits: Limits = Limits()) -> list[Frame]:
    return FrameParser(limits, version).feed(data)


def parse_bytewise(data: bytes, version: str = "1.2", limits: Limits = Limits()) -> list[Frame]:
    parser = FrameParser(limits, version)
    frames: list[Frame] = []
    for i in range(len(data)):
        frames += parser.feed(data[i : i + 1])
    assert parser.buffered == 0
    return frames


SEND = b"SEND\ndestination:/queue/a\nreceipt:r1\n\nhello\0"


# --- framing ----------------------------------------------------------------------------


def test_parses_command_headers_and_body() -> None:
    (frame,) = parse_all(SEND)
    assert frame == Frame("SEND", [("destination", "/queue/a"), ("receipt", "r1")], b"hello")


def test_frame_without_headers_or_body() -> None:
    assert parse_all(b"DISCONNECT\n\n\0") == [Frame("DISCONNECT")]


def test_crlf_line_endings() -> None:
    data = b"SEND\r\ndestination:/queue/a\r\nreceipt:r1\r\n\r\nhello\0"
    assert parse_all(data) == parse_all(SEND)
    assert parse_bytewise(data) == parse_all(SEND)


def test_mixed_line_endings() -> None:
    data = b"SEND\r\ndestination:/queue/a\nreceipt:r1\r\n\nhello\0"
    assert parse_all(data) == parse_all(SEND)


def test_crlf_without_headers() -> None:
    assert parse_all(b"DISCONNECT\r\n\r\n\0") == [Frame("DISCONNECT")]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_bare_carriage_return_inside_a_value_is_kept(version: str) -> None:
    (frame,) = parse_all(b"MESSAGE\nx:a\rb\r\n\n\0", version)
    assert frame.headers == [("x", "a\rb")]


def test_body_keeps_its_own_line_endings() -> None:
    (frame,) = parse_all(b"SEND\n\n\r\n\nx\n\0")
    assert frame.body == b"\r\n\nx\n"


def test_header_value_keeps_colons_and_spaces() -> None:
    # ActiveMQ sends raw colons in message ids; STOMP values are never trimmed.
    (frame,) = parse_all(b"MESSAGE\nmessage-id:ID:host-1:1:1\nx: padded \n\n\0")
    assert frame.headers == [("message-id", "ID:host-1:1:1"), ("x", " padded ")]


def test_several_frames_in_one_chunk() -> None:
    frames = parse_all(SEND + b"DISCONNECT\nreceipt:7\n\n\0" + SEND)
    assert [f.command for f in frames] == ["SEND", "DISCONNECT", "SEND"]


def test_partial_frame_is_kept_until_complete() -> None:
    parser = FrameParser()
    assert parser.feed(SEND[:10]) == []
    assert parser.buffered == 10
    assert parser.feed(SEND[10:] + SEND[:3]) == parse_all(SEND)
    assert parser.buffered == 3
    assert parser.feed(SEND[3:]) == parse_all(SEND)
    assert parser.buffered == 0


def test_every_split_point_gives_the_same_frames() -> None:
    stream = (
        b"\n"
        + SEND
        + b"\r\n"
        + b"SEND\r\ncontent-length:5\r\nx:a\\cb\r\n\r\nab\0cd\0\n"
        + b"MESSAGE\nsubscription:1\n\n\0"
        + b"\r\n\n"
    )
    expected = parse_all(stream)
    assert len(expected) == 3
    for cut in range(len(stream) + 1):
        parser = FrameParser()
        assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) == expected, cut
        assert parser.heartbeats == 5
    for first in range(0, len(stream), 7):
        for second in range(first, len(stream), 11):
            parser = FrameParser()
            got = parser.feed(stream[:first]) + parser.feed(stream[first:second]) + parser.feed(stream[second:])
            assert got == expected, (first, second)
    assert parse_bytewise(stream) == expected


def test_feed_accepts_bytearray_and_memoryview() -> None:
    assert parse_all(bytearray(SEND)) == parse_all(SEND)  # type: ignore[arg-type]
    (frame,) = FrameParser().feed(memoryview(SEND))
    assert type(frame.body) is bytes


def test_body_is_bytes_when_parsed_from_buffered_chunks() -> None:
    frames = parse_bytewise(b"SEND\ncontent-length:3\n\nabc\0" + SEND)
    assert all(type(f.body) is bytes for f in frames)


# --- heart-beats ------------------------------------------------------------------------


def test_heartbeats_are_counted_and_produce_no_frame() -> None:
    parser = FrameParser()
    assert parser.feed(HEARTBEAT) == []
    assert parser.feed(b"\r\n\n") == []
    assert parser.heartbeats == 3
    assert parser.feed(SEND + b"\n\r\n" + SEND) == parse_all(SEND) * 2
    assert parser.heartbeats == 5


def test_crlf_heartbeat_split_between_feeds() -> None:
    parser = FrameParser()
    assert parser.feed(b"\r") == []
    assert parser.heartbeats == 0
    assert parser.feed(b"\n") == []
    assert parser.heartbeats == 1
    assert parser.buffered == 0


def test_carriage_return_without_line_feed_is_an_error() -> None:
    with pytest.raises(ProtocolError):
        parse_all(b"\rSEND\n\n\0")


# --- content-length ---------------------------------------------------------------------


def test_content_length_body_may_contain_nul() -> None:
    body = b"\0a\0\0b\0"
    data = b"SEND\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    assert parse_all(data)[0].body == body
    assert parse_bytewise(data)[0].body == body


def test_content_length_zero() -> None:
    assert parse_all(b"SEND\ncontent-length:0\n\n\0")[0].body == b""


def test_without_content_length_body_ends_at_first_nul() -> None:
    frames = parse_all(b"SEND\n\nab\0DISCONNECT\n\n\0")
    assert [(f.command, f.body) for f in frames] == [("SEND", b"ab"), ("DISCONNECT", b"")]


def test_missing_nul_after_content_length_body() -> None:
    with pytest.raises(ProtocolError):
        parse_all(b"SEND\ncontent-length:2\n\nabc\0")
    with pytest.raises(ProtocolError):
        parse_bytewise(b"SEND\ncontent-length:2\n\nabc\0")


@pytest.mark.parametrize("value", ["abc", "-1", "+5", " 5", "5 ", "1.0", "", "0x10", "\u0661", "5\\c"])
def test_invalid_content_length(value: str) -> None:
    data = f"SEND\ncontent-length:{value}\n\nabcde\0".encode()
    with pytest.raises(ProtocolError) as caught:
        parse_all(data)
    assert not isinstance(caught.value, FrameTooLarge)


def test_first_content_length_wins() -> None:
    (frame,) = parse_all(b"SEND\ncontent-length:3\ncontent-length:1\n\na\0b\0")
    assert frame.body == b"a\0b"
    assert frame.headers == [("content-length", "3"), ("content-length", "1")]


def test_header_named_like_content_length_is_not_content_length() -> None:
    (frame,) = parse_all(b"SEND\nx-content-length:3\n\nab\0")
    assert frame.body == b"ab"


def test_large_body_in_small_chunks() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    data = encode_frame(Frame("SEND", [("destination", "/queue/a")], body))
    parser = FrameParser()
    frames: list[Frame] = []
    for i in range(0, len(data), 1000):
        frames += parser.feed(data[i : i + 1000])
    assert frames == [Frame("SEND", [("destination", "/queue/a"), ("content-length", str(len(body)))], body)]


def test_large_nul_terminated_body_in_small_chunks() -> None:
    body = b"x" * 300_000
    parser = FrameParser()
    frames = parser.feed(b"SEND\n\n")
    for i in range(0, len(body), 1000):
        frames += parser.feed(body[i : i + 1000])
    assert frames == []
    assert parser.feed(b"\0") == [Frame("SEND", [], body)]


# --- header escaping --------------------------------------------------------------------

ESCAPED = b"SEND\na\\cb:1\\n2\\r3\\\\4\\c\n\n\0"


def test_stomp_12_decodes_all_four_escapes() -> None:
    assert parse_all(ESCAPED, "1.2")[0].headers == [("a:b", "1\n2\r3\\4:")]


def test_stomp_11_rejects_cr_escape() -> None:
    with pytest.raises(ProtocolError):
        parse_all(ESCAPED, "1.1")
    (frame,) = parse_all(b"SEND\na\\cb:1\\n2\\\\4\\c\n\n\0", "1.1")
    assert frame.headers == [("a:b", "1\n2\\4:")]


def test_stomp_10_does_not_unescape() -> None:
    assert parse_all(ESCAPED, "1.0")[0].headers == [("a\\cb", "1\\n2\\r3\\\\4\\c")]


def test_escaped_backslash_before_escape_letter() -> None:
    # "\\\\n" is an escaped backslash followed by a literal n, not a newline.
    assert parse_all(b"SEND\nx:\\\\n\\\\\\n\n\n\0")[0].headers == [("x", "\\n\\\n")]


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest.mark.parametrize("header", [b"x:a\\tb", b"x:a\\", b"x\\:b", b"x:\\ ", b"x:\\\\\\"])
def test_undefined_escape_is_an_error(version: str, header: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_all(b"SEND\n" + header + b"\n\n\0", version)


@pytest.mark.parametrize("command", [b"CONNECT", b"STOMP", b"CONNECTED"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_connect_frames_are_never_unescaped(command: bytes, version: str) -> None:
    (frame,) = parse_all(command + b"\npasscode:a\\tb\\c\n\n\0", version)
    assert frame.get("passcode") == "a\\tb\\c"


# --- malformed frames -------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"FOO\n\n\0",  # unknown command
        b"send\n\n\0",  # commands are case-sensitive
        b"SEND \n\n\0",  # no trimming
        b"SEND\nnocolon\n\n\0",
        b"SEND\n:empty-name\n\n\0",
        b"SEND\nx:\xff\xfe\n\n\0",  # invalid UTF-8
        b"SEND\nx:\xed\xa0\x80\n\n\0",  # UTF-8-encoded surrogate
        b"SEND\nx:a\0b\n\n\0",  # NUL among the headers
        b"DISCONNECT\n\0",  # no empty line after the command
    ],
)
def test_malformed_frames(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_all(data)
    with pytest.raises(ProtocolError):
        parse_bytewise(data)


def test_utf8_headers_are_decoded() -> None:
    (frame,) = parse_all("SEND\ndestination:/queue/żółw\n\n\0".encode())
    assert frame.get("destination") == "/queue/żółw"


def test_repeated_headers_are_kept_in_order_and_first_wins() -> None:
    (frame,) = parse_all(b"MESSAGE\nfoo:1\nbar:x\nfoo:2\n\n\0")
    assert frame.headers == [("foo", "1"), ("bar", "x"), ("foo", "2")]
    assert frame.get("foo") == "1"
    assert frame.header_dict() == {"foo": "1", "bar": "x"}


def test_error_keeps_frames_before_it_and_poisons_the_parser() -> None:
    parser = FrameParser()
    with pytest.raises(ProtocolError):
        parser.feed(SEND + b"BOGUS\n\n\0" + SEND)
    assert parser.frames_before_error == parse_all(SEND)
    with pytest.raises(ProtocolError):
        parser.feed(SEND)


# --- limits -----------------------------------------------------------------------------


def test_frame_too_large_is_a_protocol_error() -> None:
    assert issubclass(FrameTooLarge, ProtocolError)


def test_header_count_limit() -> None:
    limits = Limits(max_headers=3)
    ok = b"SEND\na:1\nb:2\nc:3\n\n\0"
    assert len(parse_all(ok, limits=limits)[0].headers) == 3
    assert len(parse_bytewise(ok, limits=limits)[0].headers) == 3
    too_many = b"SEND\na:1\nb:2\nc:3\nd:4\n\n\0"
    with pytest.raises(FrameTooLarge):
        parse_all(too_many, limits=limits)
    with pytest.raises(FrameTooLarge):
        parse_bytewise(too_many, limits=limits)


def test_too_many_headers_detected_before_the_empty_line() -> None:
    parser = FrameParser(Limits(max_headers=3))
    with pytest.raises(FrameTooLarge):
        parser.feed(b"SEND\na:1\nb:2\nc:3\nd:4\ne")


def test_header_line_limit() -> None:
    limits = Limits(max_header_line_bytes=10)
    assert parse_all(b"SEND\nabcd:12345\r\n\n\0", limits=limits)  # 10 bytes, the CR is EOL
    assert parse_bytewise(b"SEND\nabcd:12345\r\n\n\0", limits=limits)
    with pytest.raises(FrameTooLarge):
        parse_all(b"SEND\nabcd:123456\n\n\0", limits=limits)
    with pytest.raises(FrameTooLarge):
        parse_bytewise(b"SEND\nabcd:123456\n\n\0", limits=limits)


def test_long_complete_header_line_fails_before_the_empty_line() -> None:
    with pytest.raises(FrameTooLarge):
        FrameParser(Limits(max_header_line_bytes=10)).feed(b"SEND\nabcd:123456\n")


def test_partial_header_checks_start_afresh_for_each_frame() -> None:
    parser = FrameParser(Limits(max_header_line_bytes=10))
    assert parser.feed(b"SEND\nab") == []
    assert len(parser.feed(b":1\n\n\0")) == 1
    with pytest.raises(FrameTooLarge):
        parser.feed(b"S" * 12)


def test_long_header_line_fails_before_it_ends() -> None:
    parser = FrameParser(Limits(max_header_line_bytes=8192))
    parser.feed(b"SEND\nx:")
    with pytest.raises(FrameTooLarge):
        for _ in range(20):  # 20 KiB, far less than the 16 MiB frame limit
            parser.feed(b"a" * 1024)


def test_long_command_line_fails_before_it_ends() -> None:
    with pytest.raises(FrameTooLarge):
        FrameParser(Limits(max_header_line_bytes=100)).feed(b"S" * 200)


def test_declared_content_length_over_limit_fails_at_once() -> None:
    parser = FrameParser(Limits(max_body_bytes=1000))
    with pytest.raises(FrameTooLarge):
        parser.feed(b"SEND\ncontent-length:1001\n\n")
    with pytest.raises(FrameTooLarge):
        FrameParser().feed(b"SEND\ncontent-length:99999999999999999999999999\n\n")


def test_a_body_over_the_limit_names_the_frames_receipt() -> None:
    with pytest.raises(FrameTooLarge) as refused:
        FrameParser(Limits(max_body_bytes=10)).feed(b"SEND\nreceipt:r\\c7\nreceipt:second\ncontent-length:11\n\n")
    assert refused.value.receipt == "r:7"  # unescaped, and the first header wins
    with pytest.raises(FrameTooLarge) as unnamed:
        FrameParser(Limits(max_body_bytes=10)).feed(b"SEND\ncontent-length:11\n\n")
    assert unnamed.value.receipt is None


def test_declared_content_length_over_frame_limit_fails_at_once() -> None:
    parser = FrameParser(Limits(max_frame_bytes=100))
    with pytest.raises(FrameTooLarge):
        parser.feed(b"SEND\ncontent-length:90\n\n")


def test_unterminated_body_over_limit_fails_while_streaming() -> None:
    parser = FrameParser(Limits(max_body_bytes=5000))
    parser.feed(b"SEND\n\n")
    with pytest.raises(FrameTooLarge):
        for _ in range(10):
            parser.feed(b"b" * 1000)


def test_nul_terminated_body_over_limit_in_one_chunk() -> None:
    with pytest.raises(FrameTooLarge):
        parse_all(b"SEND\n\n" + b"b" * 101 + b"\0", limits=Limits(max_body_bytes=100))
    assert parse_all(b"SEND\n\n" + b"b" * 100 + b"\0", limits=Limits(max_body_bytes=100))


def test_frame_size_limit_counts_headers() -> None:
    limits = Limits(max_frame_bytes=64)
    with pytest.raises(FrameTooLarge):
        parse_all(b"SEND\n" + b"x:" + b"y" * 70 + b"\n\n\0", limits=limits)
    with pytest.raises(FrameTooLarge):
        FrameParser(limits).feed(b"SEND\n" + b"x:y\n" * 20)


# --- versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [(None, "1.0"), ("1.0", "1.0"), ("1.1", "1.1"), ("1.0,1.1,1.2", "1.2"), ("1.2,1.0", "1.2"), (" 1.1 , 2.0", "1.1")],
)
def test_negotiate_version(header: str | None, expected: str) -> None:
    assert negotiate_version(header) == expected


@pytest.mark.parametrize("header", ["2.0", "", "1.3,0.9"])
def test_negotiate_version_without_common_version(header: str) -> None:
    with pytest.raises(ProtocolError, match="1.0,1.1,1.2"):
        negotiate_version(header)


def test_unknown_parser_version_is_refused() -> None:
    with pytest.raises(ProtocolError):
        FrameParser(version="1.3")
    parser = FrameParser()
    with pytest.raises(ProtocolError):
        parser.version = "2.0"
    assert parser.version == "1.2"


def test_version_set_after_connect_applies_to_later_frames() -> None:
    parser = FrameParser()
    parser.feed(b"CONNECT\naccept-version:1.2\n\n\0")
    parser.version = "1.0"
    assert parser.feed(b"SEND\nx:a\\tb\n\n\0")[0].get("x") == "a\\tb"


def test_frames_pipelined_behind_connect_use_the_negotiated_version() -> None:
    frames = FrameParser().feed(b"CONNECT\naccept-version:1.0\n\n\0SEND\nx:a\\tb\n\n\0")
    assert frames[1].get("x") == "a\\tb"
    frames = FrameParser().feed(b"CONNECT\n\n\0SEND\nx:a\\tb\n\n\0")  # no accept-version: 1.0
    assert frames[1].get("x") == "a\\tb"
    parser = FrameParser(version="1.0")
    frames = parser.feed(b"STOMP\naccept-version:1.1,1.2\n\n\0SEND\nx:a\\cb\n\n\0")
    assert frames[1].get("x") == "a:b"
    assert parser.version == "1.2"


def test_connect_without_common_version_leaves_parser_version() -> None:
    parser = FrameParser()
    assert len(parser.feed(b"CONNECT\naccept-version:9.9\n\n\0")) == 1
    assert parser.version == "1.2"


def test_connected_switches_the_client_parser() -> None:
    parser = FrameParser()
    frames = parser.feed(b"CONNECTED\nversion:1.1\n\n\0MESSAGE\nx:a\\cb\n\n\0")
    assert frames[1].get("x") == "a:b"
    assert parser.version == "1.1"
    with pytest.raises(ProtocolError):
        parser.feed(b"MESSAGE\nx:a\\rb\n\n\0")


# --- encoder ----------------------------------------------------------------------------


def test_encode_adds_content_length_for_a_body() -> None:
    data = encode_frame(Frame("SEND", [("destination", "/queue/a")], b"a\0b"))
    assert data == b"SEND\ndestination:/queue/a\ncontent-length:3\n\na\0b\0"


def test_encode_without_body_has_no_content_length() -> None:
    assert encode_frame(Frame("DISCONNECT", [("receipt", "1")])) == b"DISCONNECT\nreceipt:1\n\n\0"


def test_encode_rewrites_a_wrong_content_length_and_never_repeats_it() -> None:
    frame = Frame("MESSAGE", [("content-length", "99"), ("x", "1"), ("content-length", "7")], b"abc")
    data = encode_frame(frame)
    assert data == b"MESSAGE\ncontent-length:3\nx:1\n\nabc\0"
    assert data.count(b"content-length") == 1
    assert encode_frame(Frame("SEND", [("content-length", "5")])) == b"SEND\ncontent-length:0\n\n\0"


def test_encode_escapes_per_version() -> None:
    frame = Frame("MESSAGE", [("a:b", "1\n2\\3:")])
    assert encode_frame(frame, "1.2") == b"MESSAGE\na\\cb:1\\n2\\\\3\\c\n\n\0"
    assert encode_frame(frame, "1.1") == b"MESSAGE\na\\cb:1\\n2\\\\3\\c\n\n\0"
    assert encode_frame(Frame("MESSAGE", [("x", "a\rb")]), "1.2") == b"MESSAGE\nx:a\\rb\n\n\0"
    assert encode_frame(Frame("MESSAGE", [("x", "a\rb")]), "1.1") == b"MESSAGE\nx:a\rb\n\n\0"
    assert encode_frame(Frame("MESSAGE", [("x", "a:b\\c")]), "1.0") == b"MESSAGE\nx:a:b\\c\n\n\0"


def test_encode_never_escapes_connect_frames() -> None:
    frame = Frame("CONNECTED", [("version", "1.2"), ("server", "raftmq/0.1:x\\y")])
    data = encode_frame(frame, "1.2")
    assert data == b"CONNECTED\nversion:1.2\nserver:raftmq/0.1:x\\y\n\n\0"
    assert parse_all(data) == [frame]


@pytest.mark.parametrize(
    ("version", "command", "header"),
    [
        ("1.0", "MESSAGE", ("x", "a\nb")),  # 1.0 cannot carry a newline
        ("1.0", "MESSAGE", ("a:b", "x")),  # nor a colon in a name
        ("1.2", "CONNECTED", ("x", "a\nb")),  # CONNECTED is never escaped
        ("1.1", "MESSAGE", ("x", "ends in CR\r")),  # 1.1 has no \r escape
        ("1.0", "MESSAGE", ("x", "ends in CR\r")),
        ("1.2", "MESSAGE", ("", "empty name")),
        ("1.2", "MESSAGE", ("x", "nul\0")),
        ("1.2", "MESSAGE", ("x", "\ud800")),  # not encodable as UTF-8
    ],
)
def test_encode_refuses_unrepresentable_headers(version: str, command: str, header: tuple[str, str]) -> None:
    with pytest.raises(ProtocolError):
        encode_frame(Frame(command, [("destination", "/queue/a"), header]), version)


def test_encode_refuses_unknown_command_and_version() -> None:
    with pytest.raises(ProtocolError):
        encode_frame(Frame("BOGUS"))
    with pytest.raises(ProtocolError):
        encode_frame(Frame("SEND"), "1.3")


def test_encode_value_with_separator_stand_in_characters() -> None:
    # The encoder's bulk path uses NUL and \x01 internally; \x01 in a header must survive.
    frame = Frame("MESSAGE", [("x\x01", "\x01a\x01:")])
    for version in ("1.1", "1.2"):
        assert parse_all(encode_frame(frame, version), version) == [frame]


def test_round_trip_for_stomp_py_encoded_frames() -> None:
    frame = stomp_utils.Frame("SEND", {"destination": "/queue/a", "content-length": 3}, "a\0b")
    data = b"".join(stomp_utils.convert_frame(frame))
    (parsed,) = parse_all(data)
    assert parsed.body == b"a\0b"
    assert parsed.header_dict() == {"destination": "/queue/a", "content-length": "3"}
