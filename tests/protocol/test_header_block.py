"""A message's user headers as one block (raftmq.protocol.header_block): what the parser keeps of
a SEND, the translator proposes, the core reads and a MESSAGE carries, held to the pairs the
eager reading of the same frame gives, in every version and for any header text. An ACK's or
NACK's text, kept whole by the parser the same way, is held to the eager reading too."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftmq.core.commands import Ack, Nack, Send
from raftmq.core.message_headers import read_headers
from raftmq.errors import ProtocolError
from raftmq.protocol import header_block as hb
from raftmq.protocol.codec import FrameParser, encode_frame
from raftmq.protocol.frame import Frame
from raftmq.server.stomp.translate import FrameTranslator

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRICKY = st.sampled_from([":", "\n", "\r", "\\", "c", "n", "r", " ", "é"])
WORDS = st.sampled_from(["priority", "reply-to", "redelivered", "k"])
tricky = st.lists(st.one_of(TRICKY, WORDS, st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")),
                  max_size=8).map("".join)
NAMES = st.sampled_from(["k", "color", "priority", "expires", "persistent", "JMSXGroupID", "_AMQ_DUPL_ID",
                         "redelivered", "delivery-count", "message-id", "raftmq-term", "subscription", "ack"])
plain_value = st.text(alphabet=st.characters(blacklist_characters=":\n\r\\\0", blacklist_categories=("Cs",)),
                      max_size=8)


@PROPERTY
@given(st.lists(st.tuples(tricky.filter(bool), tricky), max_size=6))
def test_a_block_gives_back_every_pair_in_order(pairs: list[tuple[str, str]]) -> None:
    block = hb.block_of(pairs)
    assert hb.pairs_of(block) == tuple(pairs)
    assert block.count("\n") == len(pairs) and block.count(":") == len(pairs)  # one line, one colon each
    for name, value in pairs:
        assert hb.first(block, name) == next(v for n, v in pairs if n == name)  # the first occurrence
        assert hb.has(block, name)
    assert hb.header_dict(block) == {name: hb.first(block, name) for name, _ in pairs}
    assert hb.without(block, {"k"}) == hb.block_of([p for p in pairs if p[0] != "k"])


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(["persistent", "k", "xpersistent"]), st.one_of(tricky, st.sampled_from(
    ["true", "TRUE", "tru", "truee", "true\\", "\\true", "tr:ue"]))), max_size=5),
    st.sampled_from(["true", "false", "t", "persistent"]))
def test_a_value_compared_in_place_is_the_first_value_compared(pairs: list[tuple[str, str]], expected: str) -> None:
    block = hb.block_of(pairs)
    for name in ("persistent", "k", "absent"):
        assert hb.first_is(block, hb.key(name), expected) is (hb.first(block, name) == expected), (block, name)


def test_first_finds_a_name_only_at_the_start_of_a_line() -> None:
    block = hb.block_of([("xpriority", "1"), ("note", "priority:2"), ("priority", "3")])
    assert hb.first(block, "priority") == "3"
    assert hb.first(hb.block_of([("note", "priority:2")]), "priority") is None


def send_frame(pairs: list[tuple[str, str]], version: str) -> Frame:
    headers = [("destination", "/queue/q"), *pairs, ("receipt", "r-1")]
    [frame] = FrameParser(version=version).feed(encode_frame(Frame("SEND", headers, b"body"), version))
    return frame


def eager(frame: Frame) -> Frame:
    """The same frame with its headers read one by one (the parser's other way)."""
    return Frame(frame.command, list(frame.headers), frame.body)


@PROPERTY
@given(st.lists(st.tuples(NAMES, st.one_of(plain_value, tricky)), max_size=6), st.sampled_from(["1.0", "1.1", "1.2"]))
def test_the_parsers_block_is_the_eager_readings_headers_without_the_transport_ones(
        pairs: list[tuple[str, str]], version: str) -> None:
    pairs = [(n, v.replace("\r", "")) if version != "1.2" else (n, v) for n, v in pairs]
    pairs = [(n, v) for n, v in pairs if version != "1.0" or "\n" not in v]
    frame = send_frame(pairs, version)
    assert frame.headers[1 : 1 + len(pairs)] == pairs
    if frame.block is not None:
        assert frame.block == hb.user_block(frame.headers)
    sends = [FrameTranslator("s", version, None).translate(f, 1) for f in (frame, eager(frame))]
    assert sends[0] == sends[1]
    send = sends[0]
    assert isinstance(send, Send) and send.receipt == "r-1" and send.destination == "/queue/q"
    assert hb.pairs_of(send.headers) == tuple(p for p in pairs if p[0] not in hb.STRIPPED)
    assert read_headers(send.headers) == read_headers(hb.block_of([p for p in pairs if p[0] not in hb.STRIPPED]))


def test_a_plain_send_is_kept_whole_and_a_producer_cannot_forge_the_servers_headers() -> None:
    data = (b"SEND\ndestination:/queue/q\nredelivered:true\nk:v\ndelivery-count:9\nmessage-id:forged\n"
            b"receipt:r\nraftmq-term:99\npersistent:true\n\nx\0")
    [frame] = FrameParser().feed(data)
    assert frame.text is not None and frame.block == "k:v\npersistent:true\n"
    send = FrameTranslator("s", "1.2", None).translate(frame, 1)
    assert isinstance(send, Send) and send.headers == "k:v\npersistent:true\n" and send.receipt == "r"
    # The eager reading (an escape in a header, or STOMP 1.0 with a colon in a value) strips the same.
    [escaped] = FrameParser().feed(data.replace(b"k:v", b"k:v\\c1"))
    assert escaped.block is None
    sent = FrameTranslator("s", "1.2", None).translate(escaped, 1)
    assert isinstance(sent, Send) and sent.headers == "k:v\\c1\npersistent:true\n"


def test_a_send_the_parser_cannot_keep_whole_is_read_eagerly() -> None:
    parser = FrameParser(version="1.0")
    [frame] = parser.feed(b"SEND\ndestination:/queue/q\ntime:12:30\n\n\0")  # 1.0: the first colon splits
    assert frame.block is None and frame.get("time") == "12:30"
    send = FrameTranslator("s", "1.0", None).translate(frame, 1)
    assert isinstance(send, Send) and send.headers == "time:12\\c30\n" and hb.first(send.headers, "time") == "12:30"


ACK_NAMES = st.sampled_from(["id", "message-id", "subscription", "transaction", "receipt", "k", "ack"])


def _translated(translator: FrameTranslator, frame: Frame) -> object:
    try:
        return translator.translate(frame, 1)
    except ProtocolError as exc:
        return ("refused", exc.message, exc.detail)


@PROPERTY
@given(st.lists(st.tuples(ACK_NAMES, st.one_of(plain_value, tricky)), max_size=5),
       st.sampled_from(["1.0", "1.1", "1.2"]), st.sampled_from(["ACK", "NACK"]))
def test_an_ack_read_from_its_kept_text_is_the_ack_its_eager_reading_gives(
        pairs: list[tuple[str, str]], version: str, command: str) -> None:
    pairs = [(n, v.replace("\r", "")) if version != "1.2" else (n, v) for n, v in pairs]
    pairs = [(n, v) for n, v in pairs if version != "1.0" or "\n" not in v]
    [frame] = FrameParser(version=version).feed(encode_frame(Frame(command, pairs, b""), version))
    assert frame.headers == pairs
    plain = all(":" not in v and "\\" not in v and "\r" not in v and "\n" not in v for _, v in pairs)
    assert (frame.text is not None) == (plain and bool(pairs)) and frame.block is None
    translator = FrameTranslator("s", version, None)
    answers = [_translated(translator, f) for f in (frame, eager(frame))]
    assert answers[0] == answers[1]
    if isinstance(answers[0], (Ack, Nack)):
        first = dict(reversed(pairs))
        assert answers[0].receipt == first.get("receipt") and answers[0].transaction is None
        expected_ids = (first["id"], None) if version == "1.2" else (None, first["message-id"])
        assert (answers[0].ack_id, answers[0].message_id) == expected_ids


def test_an_ack_is_kept_whole_and_read_without_header_pairs() -> None:
    [frame] = FrameParser().feed(b"ACK\nid:7\nreceipt:r-9\n\n\0")
    assert frame.text == "id:7\nreceipt:r-9\n" and frame._headers is None
    ack = FrameTranslator("s", "1.2", None).translate(frame, 1)
    assert isinstance(ack, Ack) and (ack.ack_id, ack.receipt) == ("7", "r-9")
    assert frame._headers is None  # the translator read the text, not the pairs
    [two_colons] = FrameParser(version="1.1").feed(b"ACK\nmessage-id:a:b\nsubscription:1\n\n\0")
    assert two_colons.text is None and two_colons.get("message-id") == "a:b"


def test_the_core_reads_persistent_without_regard_to_case() -> None:
    for value, persistent in (("true", True), ("TRUE", True), ("True", True), ("false", False), ("yes", False)):
        assert read_headers(hb.block_of([("persistent", value)]))[2] is persistent, value
