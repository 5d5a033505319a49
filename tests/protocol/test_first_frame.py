"""A peer's first frame read whole, and where it ends (`first_frame`), and a header line added to
a client's first frame with every other byte kept (`with_header_line`): what session mobility
reads and writes of raw STOMP, done by the codec rather than by hand beside it."""

from __future__ import annotations

import pytest

from raftmq.errors import ProtocolError
from raftmq.protocol.codec import FrameParser, first_frame
from raftmq.protocol.frame import with_header_line


def test_the_first_frame_and_where_it_ends() -> None:
    connected = b"CONNECTED\nversion:1.2\nsession:n1:a:1\n\n\0"
    after = b"MESSAGE\ndestination:/queue/a\n\nx\0"
    found = first_frame(b"\n\r\n" + connected + after)
    assert found is not None
    frame, end = found
    assert (frame.command, frame.get("session")) == ("CONNECTED", "n1:a:1")
    assert end == 3 + len(connected)  # the heart-beat EOLs before it, then the frame with its NUL


def test_a_body_with_a_nul_inside_its_length_is_read_whole() -> None:
    error = b"ERROR\nmessage:refused\ncontent-length:5\n\na\0b\0c\0"
    found = first_frame(error + b"CONNECTED\n\n\0")
    assert found is not None and found[0].body == b"a\0b\0c" and found[1] == len(error)


def test_not_whole_yet_and_no_frame_at_all() -> None:
    assert first_frame(b"") is None
    assert first_frame(b"CONNECTED\nversion:1.2\n\n") is None  # its NUL is still to come
    with pytest.raises(ProtocolError):
        first_frame(b"HELLO\n\n\0")


def test_a_header_line_goes_after_the_command_and_nothing_else_moves() -> None:
    connect = b"CONNECT\naccept-version:1.2\nlogin:a\\cb\n\n\0"  # an escaped colon, kept as it was
    marked = with_header_line(b"\r\n" + connect + b"SEND\ndestination:/q\n\nx\0", "raftmq.relayed", "true")
    assert marked == (b"\r\nCONNECT\nraftmq.relayed:true\naccept-version:1.2\nlogin:a\\cb\n\n\0"
                      b"SEND\ndestination:/q\n\nx\0")
    first, second = FrameParser().feed(marked)
    assert first.get("raftmq.relayed") == "true" and second.body == b"x"
    assert with_header_line(b"CONNE", "raftmq.relayed", "true") == b"CONNE"
