"""MESSAGE frames (raftmq.server.stomp.frames): what a consumer reads back, with the
subscription's head built once per connection and kept (`message_head`) or built each time."""

from __future__ import annotations

import pytest

from raftmq.config import NodeConfig
from raftmq.core.effects import Deliver
from raftmq.core.message import Message
from raftmq.protocol.codec import FrameParser
from raftmq.protocol.frame import Frame
from raftmq.protocol.header_block import pairs_of, user_block
from raftmq.server.stomp import frames
from raftmq.server.stomp.frames import message_frame, message_head


def read(data: bytes, version: str) -> Frame:
    [frame] = FrameParser(NodeConfig().limits, version).feed(data)
    return frame


def deliver(sub: str = "s1", destination: str = "/queue/a", headers: tuple[tuple[str, str], ...] = (),
            ack: str | None = "7", redelivered: bool = False, count: int = 1, body: bytes = b"hello") -> Deliver:
    message = Message("g1-42", destination, user_block(headers), body, delivery_count=count)  # as the edge stores it
    return Deliver("c1", sub, destination, message, ack, redelivered, count)


CASES = [
    deliver(),
    deliver(headers=(("k", "v"), ("persistent", "true")), redelivered=True, count=3),
    deliver(body=b""),
    deliver(headers=(("colon", "a:b"), ("eol", "x\ny"), ("back", "c\\d"))),  # escaped by encode_frame
    deliver(destination="/queue/a:b"),  # a head that needs escaping: never kept
    deliver(sub="s:1"),
    deliver(headers=(("redelivered", "true"), ("message-id", "forged"))),  # a producer's: not copied
    deliver(headers=(("名前", "値"),)),
]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_consumer_reads_the_delivery_back_whether_the_head_is_kept_or_not(version: str, case: int) -> None:
    effect = CASES[case]
    heads: dict[str, tuple[str, bytes]] = {}
    kept = [message_frame(effect, version, None, 5, heads) for _ in range(2)]
    assert kept[0] == kept[1] == message_frame(effect, version, None, 5)
    frame = read(kept[0], version)
    assert frame.command == "MESSAGE" and frame.body == effect.message.body
    assert frame.get("subscription") == effect.sub_id and frame.get("destination") == effect.destination
    assert frame.get("message-id") == "g1-42" and frame.get("raftmq-term") == "5"
    assert frame.get("ack") == ("7" if version == "1.2" else None)
    assert frame.get("redelivered") == ("true" if effect.redelivered else None)
    assert frame.get("delivery-count") == str(effect.delivery_count)
    for name, value in pairs_of(effect.message.headers):
        if name not in frames.SERVER_MESSAGE_HEADERS:  # STOMP 1.0 cannot carry a newline: that header is left out
            assert frame.get(name) == (None if version == "1.0" and "\n" in value else value), name
    assert list(heads) == ([] if ":" in effect.sub_id + effect.destination else [effect.sub_id])


def test_a_subscriptions_head_is_built_once_and_follows_its_destination() -> None:
    heads: dict[str, tuple[str, bytes]] = {}
    first = message_head("s1", "/topic/prices.eur", heads)
    assert first == b"MESSAGE\nsubscription:s1\ndestination:/topic/prices.eur\n"
    assert message_head("s1", "/topic/prices.eur", heads) is first  # kept
    other = message_head("s1", "/topic/prices.usd", heads)  # a pattern's topic changes
    assert other is not None and other.endswith(b"destination:/topic/prices.usd\n")
    assert heads == {"s1": ("/topic/prices.usd", other)}
    assert message_head("s2", "/queue/x\ny", heads) is None and "s2" not in heads


def test_a_connections_heads_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "MAX_HEADS", 3)
    heads: dict[str, tuple[str, bytes]] = {}
    for n in range(frames.MAX_HEADS + 1):
        message_head(f"s{n}", "/queue/a", heads)
    assert len(heads) == 1 and f"s{frames.MAX_HEADS}" in heads  # cleared when full, then the new one
