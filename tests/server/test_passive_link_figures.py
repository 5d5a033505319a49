"""The figures of a link on the end that did not open it (raftmq.server.links.passive_link): what
the opener pulled and ACKed is what this end forwarded, in its status and its link metric, as a
bridge's are on the opening end; counted from when this node began to run the link."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Connect, Disconnect, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of
from raftmq.routing.bindings import encode_advert
from raftmq.routing.route import ADVERT_HEADER, sf_queue
from raftmq.server.admin.metrics import exposition, metrics_registry
from raftmq.server.links.passive_link import PassiveLink
from tests.core.test_cluster_routing_network import advertise, consumer, cores, net


def duplex() -> tuple[Broker, PassiveLink]:
    """g1 opens a duplex link to g2; g2 (its core, and its end of the link) has 20 messages for g1's consumer."""
    brokers = cores(net({"group": "g1", "to": "g2", "duplex": True}), "g1", "g2")
    consumer(brokers["g1"], "/queue/back")
    advertise(brokers)
    g2 = brokers["g2"]
    for i in range(20):
        g2.apply(Send("p", "/queue/back", "", f"m{i}".encode(), 3))
    return g2, PassiveLink(SimpleNamespace(broker=g2), "g2", "g1", advertises=True)


def pull(g2: Broker, session: str, now: int) -> int:
    """The opener's bridge pulls what waits for it and ACKs it (stored at g1): how many."""
    g2.apply(Connect(session, now, login="cluster"))
    effects = g2.apply(Subscribe(session, "pull", sf_queue("g1"), now, ACK_CLIENT_INDIVIDUAL, prefetch=1000))
    pulled = [e for e in effects if isinstance(e, Deliver)]
    for delivery in pulled:
        g2.apply(Ack(session, now, ack_id=delivery.ack_id))
    g2.apply(Disconnect(session, now))
    return len(pulled)


def link_samples(status: dict[str, object]) -> dict[str, float]:
    whole = {"group": "g2", "node": "n", "role": "leader", "health": "ok", "cluster": {"links": [status]}}
    text = exposition(metrics_registry(lambda: whole)).decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            if family.name.startswith("raftmq_link") for sample in family.samples}


def test_what_the_opener_pulled_is_what_the_passive_end_forwarded() -> None:
    g2, link = duplex()
    assert g2.routing is not None
    advert = encode_advert(g2.routing.advert_for("g1", 5))
    g2.apply(Send("link", sf_queue("g1"), block_of(((ADVERT_HEADER, advert),)), b"", 3))  # an advert for the opener
    assert pull(g2, "puller", 4) == 21
    status = link.status()
    assert (status["forwarded"], status["adverts_sent"], status["waiting"]) == (20, 1, 0)
    assert g2.routing.cluster_state.forwarded == {"g1": 20}  # the group's own counter agrees
    samples = link_samples(status)
    assert samples["raftmq_link_forwarded_total"] == 20 and samples["raftmq_link_adverts_sent_total"] == 1


def test_the_figures_count_from_when_this_node_runs_the_link() -> None:
    g2, _ = duplex()
    assert pull(g2, "puller", 4) == 20  # under the previous leader
    for i in range(5):
        g2.apply(Send("p", "/queue/back", "", f"n{i}".encode(), 5))
    link = PassiveLink(SimpleNamespace(broker=g2), "g2", "g1", advertises=True)  # this node leads now

    async def lead() -> None:
        async def idle() -> None:
            await asyncio.Event().wait()

        link.run = idle  # type: ignore[method-assign]  # the link's own work is not under test
        await link.start()
        await link.stop()

    asyncio.run(lead())
    assert link.status()["forwarded"] == 0
    assert pull(g2, "puller2", 6) == 5
    assert link.status()["forwarded"] == 5
