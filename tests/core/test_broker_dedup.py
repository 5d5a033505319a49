"""Duplicate detection with `_AMQ_DUPL_ID`."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.dedup import DedupCache
from tests.helpers.broker_harness import Harness, bodies, receipts


def make(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "1", "/queue/a")
    return h


def test_a_retried_send_is_stored_once_but_receipted_every_time() -> None:
    h = make()
    assert bodies(h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": "id-1"}, receipt="r1")) == [1]
    effects = h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": "id-1"}, receipt="r2")
    assert bodies(effects) == [] and receipts(effects) == ["r2"]
    assert h.stats("/queue/a")["enqueued"] == 1


def test_ids_are_per_destination() -> None:
    h = make()
    h.subscribe("c", "2", "/queue/b")
    assert bodies(h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": "x"})) == [1]
    assert bodies(h.send("p", "/queue/b", 2, {"_AMQ_DUPL_ID": "x"})) == [2]


def test_topics_are_deduplicated_too() -> None:
    h = make()
    h.subscribe("c", "t", "/topic/t")
    assert bodies(h.send("p", "/topic/t", 1, {"_AMQ_DUPL_ID": "x"})) == [1]
    assert bodies(h.send("p", "/topic/t", 1, {"_AMQ_DUPL_ID": "x"})) == []


def test_sends_without_an_id_are_never_duplicates() -> None:
    h = make()
    assert bodies(h.send("p", "/queue/a", 1) + h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": ""})) == [1, 1]


def test_oldest_ids_are_forgotten_first() -> None:
    h = make(dedup_cache_size=2)
    for name in ("a", "b", "c"):
        h.send("p", "/queue/a", name, {"_AMQ_DUPL_ID": name})
    assert bodies(h.send("p", "/queue/a", "c", {"_AMQ_DUPL_ID": "c"})) == []
    assert bodies(h.send("p", "/queue/a", "b", {"_AMQ_DUPL_ID": "b"})) == []
    assert bodies(h.send("p", "/queue/a", "a", {"_AMQ_DUPL_ID": "a"})) == ["a"]  # forgotten
    # Remembering "a" again evicted "b".
    assert bodies(h.send("p", "/queue/a", "b", {"_AMQ_DUPL_ID": "b"})) == ["b"]


def test_duplicate_does_not_use_a_message_id() -> None:
    h = make()
    h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": "x"})
    h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": "x"})
    (effect,) = h.send("p", "/queue/a", 2)
    assert effect.message.message_id == "raftmq-2"  # type: ignore[union-attr]


def test_the_cache_survives_snapshot_and_restore() -> None:
    h = make(dedup_cache_size=3)
    for name in ("a", "b", "c", "d"):
        h.send("p", "/queue/a", name, {"_AMQ_DUPL_ID": name})
    restored = Broker.restore(h.broker.snapshot(), h.config)
    h.broker = restored
    assert bodies(h.send("p", "/queue/a", "d", {"_AMQ_DUPL_ID": "d"})) == []
    assert bodies(h.send("p", "/queue/a", "a", {"_AMQ_DUPL_ID": "a"})) == ["a"]
    assert bodies(h.send("p", "/queue/a", "b", {"_AMQ_DUPL_ID": "b"})) == ["b"]  # evicted by "a"


def test_cache_unit() -> None:
    cache = DedupCache(2)
    assert cache.remember("/queue/a", "1") and not cache.remember("/queue/a", "1")
    assert cache.remember("/queue/a", "2") and cache.remember("/queue/a", "3")
    assert len(cache) == 2 and ("/queue/a", "1") not in cache and ("/queue/a", "3") in cache
    assert cache.dump() == [["/queue/a", "2"], ["/queue/a", "3"]]
    assert DedupCache.load(2, cache.dump()).dump() == cache.dump()
    assert DedupCache(0).remember("/queue/a", "1") and DedupCache(0).remember("/queue/a", "1")
