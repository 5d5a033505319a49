"""The STOMP layer's part in keeping $.raftmq. destinations to the cluster's bridges
(raftmq.server.stomp.translate): a network session may subscribe to a store-and-forward queue only
where a neighbour's bridge pulls it (a link opened by that neighbour alone)."""

from __future__ import annotations

import pytest

from raftmq.core.commands import Send, Subscribe
from raftmq.errors import ProtocolError
from raftmq.protocol.frame import Frame
from raftmq.routing.route import CONTROL_DESTINATION, sf_queue
from raftmq.server.stomp.translate import FrameTranslator, check_destination


def subscribe(translator: FrameTranslator, destination: str) -> object:
    headers = [("destination", destination), ("id", "1"), ("ack", "client-individual")]
    return translator.translate(Frame("SUBSCRIBE", headers, b""), 1)


def test_a_store_and_forward_queue_is_refused_unless_a_neighbour_pulls_it() -> None:
    plain = FrameTranslator("s", "1.2", None)
    for destination in (sf_queue("g1"), CONTROL_DESTINATION, "/topic/$.raftmq.x"):
        with pytest.raises(ProtocolError, match="reserved destination"):
            subscribe(plain, destination)
    pulled = FrameTranslator("s", "1.2", None, frozenset({sf_queue("g1")}))
    assert isinstance(subscribe(pulled, sf_queue("g1")), Subscribe)
    with pytest.raises(ProtocolError, match="reserved destination"):
        subscribe(pulled, sf_queue("g3"))


@pytest.mark.parametrize("destination", ["/queue/", "/topic/"])
def test_a_destination_with_an_empty_name_is_refused_at_the_edge(destination: str) -> None:
    with pytest.raises(ProtocolError, match="invalid destination") as refused:
        check_destination(destination, "SEND")
    assert "empty name" in refused.value.detail
    assert check_destination(destination + "a", "SEND") == destination + "a"


FORGED = [b"_raftmq_to:g3", b"_raftmq_id:raftmq:p:someone-else", b"_raftmq_route:g1", b"_raftmq_advert:{}",
          b"mqtt-once:mqtt:3:dev:7"]  # an MQTT client's QoS 2 key: its next publication with that id dropped


@pytest.mark.parametrize("header", FORGED)
def test_a_clients_send_may_not_carry_the_clusters_own_headers(header: bytes) -> None:
    """The core routes and deduplicates by `_raftmq_` headers: a client naming one could pin a
    message to a group or pass it off as another producer's forward (dropped as a duplicate).
    Read as the parser keeps a SEND (one block) and as the eager reading gives it (an escape)."""
    from raftmq.protocol.codec import FrameParser

    for extra in (b"", b"\nk:v\\c1"):  # the escape makes the parser read the headers eagerly
        data = b"SEND\ndestination:/queue/q\nreceipt:r\n" + header + extra + b"\n\nx\0"
        [frame] = FrameParser().feed(data)
        with pytest.raises(ProtocolError, match="reserved header") as refused:
            FrameTranslator("s", "1.2", None).translate(frame, 1)
        assert header.split(b":")[0].decode() in refused.value.detail
        bridge = FrameTranslator("s", "1.2", None, bridge=True).translate(frame, 1)  # a neighbour's bridge may
        assert isinstance(bridge, Send)


def test_the_failover_clients_resend_mark_and_a_value_naming_the_prefix_are_a_clients_to_send() -> None:
    from raftmq.protocol.codec import FrameParser
    from raftmq.routing.route import RESENT_HEADER

    data = f"SEND\ndestination:/queue/q\n{RESENT_HEADER}:1\nnote:_raftmq_to is ours\n\nx\0".encode()
    [frame] = FrameParser().feed(data)
    send = FrameTranslator("s", "1.2", None).translate(frame, 1)
    assert isinstance(send, Send) and RESENT_HEADER in send.headers
