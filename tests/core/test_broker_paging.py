"""Paged stores in the broker core (raftmq.core.paging, raftmq.core.dispatch_paging): a deep
queue keeps a bounded head in memory and still behaves as a queue: arrival order, selectors,
expiry, browse, purge, snapshots. Pages of 4 messages: a store holds 8 before it pages."""

from __future__ import annotations

import msgpack

from raftmq.core.broker import Broker
from raftmq.core.commands import Browse, Manage
from raftmq.core.effects import Deliver
from raftmq.core.paging import MemoryPages
from tests.helpers.broker_harness import Harness, bodies, delivers

PAGE = 4


def deep(count: int, **headers_of: dict[str, str]) -> Harness:
    h = Harness(page_size=PAGE)
    h.connect("p")
    h.connect("c")
    for n in range(count):
        h.send("p", "/queue/a", n, headers_of.get(str(n), {}))
    return h


def head_and_tail(h: Harness, destination: str = "/queue/a") -> tuple[int, int]:
    store = h.broker.state.queues[destination]
    return len(store.ready), (store.tail.count if store.tail is not None else 0)


def test_a_deep_queue_keeps_a_bounded_head_and_delivers_in_arrival_order() -> None:
    h = deep(50)
    assert head_and_tail(h) == (2 * PAGE, 50 - 2 * PAGE)
    assert h.stats("/queue/a")["depth"] == 50
    assert len(h.broker.state.pages) == (50 - 2 * PAGE) // PAGE  # sealed pages; the rest is open
    assert bodies(h.subscribe("c", "s", "/queue/a")) == list(range(50))
    assert head_and_tail(h) == (0, 0) and len(h.broker.state.pages) == 0
    h.broker.state.check_invariants()


def test_client_acks_page_in_as_the_head_drains() -> None:
    h = deep(30)
    got = delivers(h.subscribe("c", "s", "/queue/a", ack="client-individual", prefetch=3))
    seen = [d.message.body for d in got]
    for _ in range(40):
        if not got:
            break
        ack_id = got.pop(0).ack_id
        more = delivers(h.ack("c", ack_id))
        seen += [d.message.body for d in more]
        got += more
        assert len(h.broker.state.queues["/queue/a"].ready) <= 2 * PAGE + PAGE
        h.broker.state.check_invariants()
    assert seen == list(range(30))


def test_arrivals_while_paged_go_behind_the_paged_ones() -> None:
    h = deep(20)
    delivered = bodies(h.subscribe("c", "s", "/queue/a", ack="client-individual", prefetch=5))
    for n in range(20, 30):
        h.send("p", "/queue/a", n)
    h.unsubscribe("c", "s")  # the five return to the front
    assert delivered == [0, 1, 2, 3, 4]
    assert h.drain("c", "/queue/a") == list(range(30))


def test_a_selector_finds_a_message_deep_in_the_tail() -> None:
    h = deep(40, **{"33": {"color": "red"}})
    assert bodies(h.subscribe("c", "red", "/queue/a", selector="color = 'red'")) == [33]
    assert h.stats("/queue/a")["depth"] == 39
    h.broker.state.check_invariants()


def test_a_selector_consumer_waiting_on_a_deep_queue_gets_a_new_match() -> None:
    h = deep(40)
    assert bodies(h.subscribe("c", "red", "/queue/a", selector="color = 'red'")) == []
    assert bodies(h.send("p", "/queue/a", 99, {"color": "red"})) == [99]


def test_paged_messages_expire_on_a_tick() -> None:
    h = deep(30, **{str(n): {"expires": "1500"} for n in range(20, 26)})
    h.tick(2_000)
    assert h.stats("/queue/a")["expired"] == 6 and h.stats("/queue/a")["depth"] == 24
    assert h.drain("c", "/queue/ExpiryQueue") == list(range(20, 26))
    assert h.drain("c", "/queue/a") == [n for n in range(30) if not 20 <= n < 26]
    h.broker.state.check_invariants()


def test_browse_shows_the_paged_messages_after_the_head() -> None:
    h = deep(20)
    h.connect("viewer")
    effects = h.apply(Browse("viewer", "b", "/queue/a", h.now, limit=100))
    assert [e.message.body for e in effects if isinstance(e, Deliver)] == list(range(20))
    assert head_and_tail(h) == (2 * PAGE, 20 - 2 * PAGE)


def test_purge_frees_every_page() -> None:
    h = deep(40)
    h.apply(Manage("req", "purge", h.now, "/queue/a"))
    assert h.stats("/queue/a")["depth"] == 0 and len(h.broker.state.pages) == 0
    h.broker.state.check_invariants()


def test_a_snapshot_carries_the_pages_and_the_restored_broker_goes_on_alike() -> None:
    h = deep(37, **{"30": {"expires": "5000"}})
    data = msgpack.unpackb(msgpack.packb(h.broker.snapshot(), use_bin_type=True), raw=False)
    (queue,) = [q for q in data["queues"] if q["destination"] == "/queue/a"]
    assert queue["tail"]["count"] == 29 and all(isinstance(page[3], bytes) for page in queue["tail"]["pages"])
    pages = MemoryPages()
    restored = Broker.restore(data, h.config, pages)
    assert len(pages) == len(queue["tail"]["pages"])
    restored.state.check_invariants()
    h.tick(6_000)
    other = Harness(page_size=PAGE)
    other.broker, other.now = restored, h.now
    other.tick(6_000)
    assert h.drain("c", "/queue/a") == other.drain("c", "/queue/a") == [n for n in range(37) if n != 30]


def test_page_size_zero_never_pages() -> None:
    h = Harness(page_size=0)
    h.connect("p")
    for n in range(50):
        h.send("p", "/queue/a", n)
    assert len(h.broker.state.queues["/queue/a"].ready) == 50 and h.broker.state.queues["/queue/a"].tail is None


def test_a_restored_tail_still_expires_what_its_pages_and_open_page_hold() -> None:
    # The restored tail works out its earliest expiry afresh: one kept as messages come would
    # start at "none expires" when the snapshot's pages are put back.
    h = deep(38, **{"29": {"expires": "5000"}, "36": {"expires": "5000"}})  # a sealed page, the open one
    restored = Broker.restore(msgpack.unpackb(msgpack.packb(h.broker.snapshot(), use_bin_type=True), raw=False),
                              h.config, MemoryPages())
    other = Harness(page_size=PAGE)
    other.broker, other.now = restored, h.now
    other.tick(6_000)
    assert other.stats("/queue/a")["expired"] == 2
    assert other.drain("c", "/queue/a") == [n for n in range(38) if n not in (29, 36)]
