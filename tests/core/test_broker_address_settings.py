"""Producer flow control in the core (raftmq.core.address_settings): FAIL refuses, DROP drops
with a receipt, BLOCK and PAGE store (the leader holds BLOCK's SENDs, raftmq.server.seams.flow);
limits by messages, by bytes, per topic and global."""

from __future__ import annotations

from raftmq.core.address_settings import AddressSettings
from tests.helpers.broker_harness import Harness, bodies, errors, receipts


def harness(*addresses: AddressSettings, **config: object) -> Harness:
    h = Harness(addresses=addresses, **config)
    h.connect("p")
    h.connect("c")
    return h


def test_fail_refuses_the_send_past_max_size_messages_with_its_receipt_id() -> None:
    h = harness(AddressSettings("/queue/orders.>", max_size_messages=3, address_full_policy="FAIL"))
    for n in range(3):
        assert receipts(h.send("p", "/queue/orders.eu", b"x", receipt=f"r{n}")) == [f"r{n}"]
    (refused,) = errors(h.send("p", "/queue/orders.eu", b"x", receipt="r3"))
    assert refused.receipt_id == "r3" and refused.message == "address full"
    assert "max_size_messages 3" in refused.detail and "FAIL" in refused.detail
    assert h.stats("/queue/orders.eu")["depth"] == 3
    h.connect("p2")
    assert receipts(h.send("p2", "/queue/other", b"x", receipt="o")) == ["o"]  # no settings: no limit


def test_in_flight_messages_count_until_acked() -> None:
    h = harness(AddressSettings("/queue/a", max_size_messages=2, address_full_policy="FAIL"))
    h.send("p", "/queue/a", b"1")
    h.send("p", "/queue/a", b"2")
    delivered = h.subscribe("c", "s", "/queue/a", ack="client-individual")
    assert errors(h.send("p", "/queue/a", b"3"))
    h.connect("p")
    for effect in delivered:
        h.ack("c", effect.ack_id)
    assert not errors(h.send("p", "/queue/a", b"3", receipt="ok"))


def test_drop_acknowledges_and_drops_and_counts() -> None:
    h = harness(AddressSettings("/queue/a", max_size_bytes=10, address_full_policy="DROP"))
    assert receipts(h.send("p", "/queue/a", b"0123456789", receipt="r1")) == ["r1"]  # 10 bytes: now full
    assert receipts(h.send("p", "/queue/a", b"more", receipt="r2")) == ["r2"]
    stats = h.stats("/queue/a")
    assert stats["depth"] == 1 and stats["dropped"] == 1
    assert bodies(h.subscribe("c", "s", "/queue/a")) == [b"0123456789"]
    assert receipts(h.send("p", "/queue/a", b"again", receipt="r3")) == ["r3"] and h.stats("/queue/a")["depth"] == 0


def test_a_topic_is_as_full_as_its_subscriptions_together() -> None:
    h = harness(AddressSettings("/topic/t", max_size_messages=4, address_full_policy="FAIL"))
    h.connect("c2")
    h.subscribe("c", "s", "/topic/t", ack="client-individual", prefetch=1)
    h.subscribe("c2", "s", "/topic/t", ack="client-individual", prefetch=1)
    h.send("p", "/topic/t", b"1")
    h.send("p", "/topic/t", b"2")  # two copies each: 4 held
    assert errors(h.send("p", "/topic/t", b"3"))


def test_block_and_page_store_whatever_reaches_the_core() -> None:
    h = harness(AddressSettings("/queue/b", max_size_messages=1, address_full_policy="BLOCK"),
                AddressSettings("/queue/p", max_size_messages=1))
    for destination in ("/queue/b", "/queue/p"):
        for n in range(3):
            assert receipts(h.send("p", destination, b"x", receipt=f"{destination}{n}"))
        assert h.stats(destination)["depth"] == 3
    assert h.broker.limits.full(h.broker.state, "/queue/b") is not None
    assert h.broker.limits.full(h.broker.state, "/queue/p") is None  # PAGE is never full


def test_global_limits_make_each_destination_apply_its_policy() -> None:
    h = harness(AddressSettings("/queue/>", address_full_policy="FAIL"), global_max_size_messages=5)
    for n in range(5):
        h.send("p", f"/queue/q{n}", b"x")
    (refused,) = errors(h.send("p", "/queue/q9", b"x", receipt="r"))
    assert "the global limits" in refused.detail


def test_dropped_counts_survive_a_snapshot() -> None:
    import msgpack

    from raftmq.core.broker import Broker

    h = harness(AddressSettings("/queue/a", max_size_messages=1, address_full_policy="DROP"))
    h.send("p", "/queue/a", b"1")
    h.send("p", "/queue/a", b"2")
    restored = Broker.restore(msgpack.unpackb(msgpack.packb(h.broker.snapshot()), raw=False), h.config)
    assert restored.stats()["destinations"]["/queue/a"]["dropped"] == 1
