"""The STOMP layer's part in keeping $.raftmq. destinations to the cluster's bridges
(raftmq.server.stomp.translate): a network session may subscribe to a store-and-forward queue only
where a neighbour's bridge pulls it (a link opened by that neighbour alone)."""

from __future__ import annotations

import pytest

from raftmq.core.commands import Subscribe
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
