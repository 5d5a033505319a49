"""Bodies of a group member, in process: the body journal behind the core's references, the
snapshot's references, segment collection, fetching from a peer, and a node serving them."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from raftmq.client import connect
from raftmq.config import NodeConfig
from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Begin, Connect, Disconnect, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.core.snapshot import body_refs as iter_snapshot_refs
from raftmq.errors import BodyUnavailable
from raftmq.protocol.header_block import block_of
from raftmq.replication.commit_log import InMemoryLog
from raftmq.server.admin import http as admin_module
from raftmq.server.admin.http import AdminServer, fetch_bodies
from raftmq.server.node import Node
from raftmq.server.replica import state_machine as replica_module
from raftmq.server.replica.bodies import BodyStore
from raftmq.server.replica.state_machine import Replica
from raftmq.storage.journal import Journal
from raftmq.storage.payload import KIND_MESSAGE, KIND_PAGE, decode_body
from tests.helpers.bodies import store_entry

pytestmark = pytest.mark.integration


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "bodies", segment_bytes=4096) as j:
        yield j


def send(body: bytes, destination: str = "/queue/q", session: str = "s", **kwargs: Any) -> Send:
    return Send(session, destination, block_of((("h", "v"),)), body, 0, **kwargs)


def test_store_writes_one_record_per_send_and_replay_writes_nothing(tmp_path: Path) -> None:
    with Journal(tmp_path / "b") as journal:
        store = BodyStore(journal)
        commands = [Connect("s", 0), send(b"one"), Ack("s", 0, ack_id="1"), send(b"two", transaction="t")]
        store_entry(store, 7, 3, commands)
        records = [record for _ref, record in journal.records()]
        assert [(r.raft_index, r.raft_term, r.kind) for r in records] == [(7, 3, KIND_MESSAGE)] * 2
        assert [decode_body(r.payload) for r in records] == [b"one", b"two"]
    # After a restart the Raft journal replays index 7: same references, nothing written twice.
    with Journal(tmp_path / "b") as journal:
        store = BodyStore(journal)
        store_entry(store, 7, 3, commands)
        assert store.entries_skipped == 1 and len(list(journal.records())) == 2
        assert store.body((7, 1)) == b"two" and store.body([7, 0]) == b"one"  # a list after msgpack
        with pytest.raises(BodyUnavailable):
            store.body((8, 0))
        store_entry(store, 8, 3, [Connect("x", 0)])  # no Send: nothing to write
        assert len(list(journal.records())) == 2 and store.entries_skipped == 1


def test_a_followers_entry_is_kept_in_neither_cache(tmp_path: Path) -> None:
    with Journal(tmp_path / "b") as journal:
        store = BodyStore(journal)
        store_entry(store, 7, 3, [send(b"follower's")], cache=False)
        assert len(journal._cache) == 0 and store.stats()["cached_bodies"] == 0
        store_entry(store, 8, 3, [send(b"leader's")])
        assert len(journal._cache) == 1 and store.stats()["cached_bodies"] == 1
        assert store.body((7, 0)) == b"follower's"  # from disk, when a follower takes over


def test_the_leaders_bodies_are_kept_by_entry_within_the_cache_budget(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with Journal(tmp_path / "b") as journal:
        store = BodyStore(journal, cache_bytes=400)
        for index in range(1, 5):  # 100 bytes an entry
            store_entry(store, index, 1, [send(bytes([index]) * 50), send(bytes([index]) * 50)])
        assert store.stats()["cached_bodies"] == 8
        store_entry(store, 5, 1, [send(b"5" * 100)])
        assert store.stats()["cached_bodies"] == 7  # the oldest entry went, whole
        store_entry(store, 6, 1, [send(b"6" * 101)])  # over a quarter of the budget: not kept
        assert store.stats()["cached_bodies"] == 7
        reads: list[object] = []
        read = journal.read
        monkeypatch.setattr(journal, "read", lambda ref: reads.append(ref) or read(ref))
        assert store.body((5, 0)) == b"5" * 100 and store.body([2, 1]) == bytes([2]) * 50 and not reads
        assert store.body((1, 1)) == bytes([1]) * 50 and store.body((6, 0)) == b"6" * 101 and len(reads) == 2
        assert store.body((1, 1)) == bytes([1]) * 50 and len(reads) == 2  # read back once, then kept
        assert store.stats()["cached_bodies"] == 6  # the oldest entry (2) gave room for it
        assert store.body((5, 0)) == b"5" * 100 and store.body((3, 0)) == bytes([3]) * 50 and len(reads) == 2
        assert store.body((2, 0)) == bytes([2]) * 50 and len(reads) == 3


def broker_with_bodies_everywhere() -> tuple[Broker, set[tuple[int, int]]]:
    """Bodies in a queue, in flight, in an inactive durable subscription and in a transaction."""
    broker = Broker()
    for session in ("producer", "consumer", "durable", "tx"):
        broker.apply(Connect(session, 0, client_id=session))
    broker.apply(send((1, 0), "/queue/ready", "producer"))
    broker.apply(Subscribe("consumer", "s1", "/queue/busy", 0, ack=ACK_CLIENT_INDIVIDUAL))
    effects = broker.apply(send((2, 0), "/queue/busy", "producer"))
    assert any(isinstance(e, Deliver) for e in effects)  # now in flight
    broker.apply(Subscribe("durable", "d", "/topic/t", 0, durable_name="keep"))
    broker.apply(Disconnect("durable", 0))
    broker.apply(send((3, 0), "/topic/t", "producer"))
    broker.apply(Begin("tx", "t1", 0))
    broker.apply(send((4, 1), "/queue/later", "tx", transaction="t1"))
    return broker, {(1, 0), (2, 0), (3, 0), (4, 1)}


def test_snapshot_references_cover_every_place_a_body_lives() -> None:
    broker, expected = broker_with_bodies_everywhere()
    dump = broker.snapshot()
    assert {tuple(ref) for ref in iter_snapshot_refs(dump)} == expected
    through_msgpack = msgpack.unpackb(msgpack.packb(dump, use_bin_type=True), raw=False)
    assert {tuple(ref) for ref in iter_snapshot_refs(through_msgpack)} == expected


def dump_referencing(*refs: tuple[int, int]) -> dict[str, Any]:
    broker = Broker()
    broker.apply(Connect("p", 0))
    for ref in refs:
        broker.apply(send(ref, "/queue/q", "p"))
    return broker.snapshot()


def test_collect_deletes_only_what_no_durable_snapshot_needs(journal: Journal) -> None:
    store = BodyStore(journal)
    for index in range(1, 41):
        store_entry(store, index, 1, [send(random.Random(index).randbytes(1500))])  # ~2 records per 4 KiB segment
    assert len(journal.segments()) > 10
    store.snapshot_taken(10, dump_referencing((4, 0), (9, 0)))
    assert store.collect(durable_floor=9) == []  # the snapshot at 10 is not known durable yet
    assert store.collect(durable_floor=10)  # now it is: segments ending below index 4 go
    assert journal.first_index is not None and 2 <= journal.first_index <= 4
    assert store.body((4, 0), cached=False) == random.Random(4).randbytes(1500)
    store.snapshot_taken(30, dump_referencing())  # nothing referenced: keep what replay past 30 needs
    store.collect(durable_floor=29)  # still only the snapshot at 10 is durable
    assert journal.first_index <= 4
    store.collect(durable_floor=30)
    assert journal.first_index is not None and 27 <= journal.first_index <= 31
    assert all(store.has_index(i) for i in range(31, 41))


def test_records_fetched_from_a_peer_keep_their_ordinals(tmp_path: Path) -> None:
    with Journal(tmp_path / "a") as a_journal, Journal(tmp_path / "b") as b_journal:
        peer, lagging = BodyStore(a_journal), BodyStore(b_journal)
        for index in range(1, 11):
            store_entry(peer, index, 2, [send(f"{index}.0".encode()), send(f"{index}.1".encode())])
        store_entry(lagging, 1, 2, [send(b"1.0"), send(b"1.1")])
        assert lagging.restored(10, dump_referencing((5, 0), (7, 1), (1, 1))) == {5, 7}
        considered, found = peer.records_at([5, 7, 11], max_bytes=1 << 20)
        assert considered == 11 and [index for index, _ in found] == [5, 7]
        assert lagging.add_fetched(found) == 2
        assert lagging.missing == set()
        assert lagging.body((7, 1), cached=False) == b"7.1" and lagging.body((5, 0), cached=False) == b"5.0"
        record = b_journal.read_record(b_journal.locate(7, 1))
        assert (record.raft_index, record.raft_term) == (7, 2)
        store_entry(lagging, 11, 2, [send(b"11.0")])  # and the journal goes on from there
        assert lagging.body((11, 0)) == b"11.0"


def test_a_member_fetches_round_after_round_until_nothing_is_missing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression (found measuring a new member catching up with 0.25 GiB waiting): one fetch,
    # bounded by a 5 s budget, brought a prefix of the bodies and the member went on without
    # the rest, every one of them unreadable there.
    monkeypatch.setattr(replica_module, "FETCH_RETRY_SECONDS", 0.01)
    with Journal(tmp_path / "a") as a_journal, Journal(tmp_path / "b") as b_journal:
        peer, lagging = BodyStore(a_journal), BodyStore(b_journal)
        for index in range(1, 11):
            store_entry(peer, index, 2, [send(f"{index}.0".encode())])
        assert lagging.restored(10, dump_referencing(*((i, 0) for i in (3, 5, 7, 9)))) == {3, 5, 7, 9}
        calls: list[list[int]] = []

        def fetch(wanted: Any) -> Any:  # peers down twice, then one index per call (a budget running out)
            calls.append(list(wanted))
            if len(calls) <= 2:
                return []
            return peer.records_at(list(wanted)[:1], max_bytes=1 << 20)[1]

        class Host:
            name = "n9"
            config = NodeConfig()

        replica = Replica(Host(), lagging, fetch)  # type: ignore[arg-type]
        asyncio.run(replica._fetch([3, 5, 7, 9]))
        assert lagging.missing == set()
        assert [lagging.body((i, 0), cached=False) for i in (3, 5, 7, 9)] == [b"3.0", b"5.0", b"7.0", b"9.0"]
        assert calls[-1] == [9] and len(calls) == 6


@pytest.mark.parametrize("password", [None, "secret"])
def test_fetch_bodies_over_the_admin_port(tmp_path: Path, password: str | None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with Journal(tmp_path / "a") as journal:
        store = BodyStore(journal)
        for index in range(1, 6):
            store_entry(store, index, 1, [send(f"b{index}".encode())])
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        admin = AdminServer(lambda: {"role": "test"}, store, None, "127.0.0.1", 0, password)
        asyncio.run_coroutine_threadsafe(admin.start(), loop).result(5)
        try:
            peers = [("127.0.0.1", 1), ("127.0.0.1", admin.port)]  # the first refuses: try the next
            fetched = fetch_bodies(peers, [2, 4, 9], password, timeout=1.0, budget=5.0)
            assert [(index, [payload for _t, _k, payload in records]) for index, records in fetched] == [
                (2, [journal.read(journal.locate(2, 0))]),
                (4, [journal.read(journal.locate(4, 0))]),
            ]
            if password is not None:
                assert fetch_bodies([("127.0.0.1", admin.port)], [2], "wrong", budget=2.0) == []
            # A round stops once it holds max_bytes (here after its first request of two indexes).
            monkeypatch.setattr(admin_module, "INDEXES_PER_REQUEST", 2)
            rounds = fetch_bodies(peers[1:], [1, 2, 3, 4, 5], password, budget=5.0, max_bytes=1)
            assert [index for index, _records in rounds] == [1, 2]
        finally:
            asyncio.run_coroutine_threadsafe(admin.stop(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()


def test_node_delivers_bodies_from_the_journal_and_restores_from_a_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        first_journal = Journal(tmp_path / "first")
        first = Node(NodeConfig(port=0), InMemoryLog(), bodies=BodyStore(first_journal, cache_bytes=0))
        await first.start()
        try:
            client = await connect(*first.address)
            for i in range(5):
                await client.send("/queue/q", f"body-{i}".encode(), receipt=True)
            subscription = client.subscribe("/queue/q", ack="client-individual")
            frames = [await asyncio.wait_for(subscription.get(), 5) for _ in range(2)]
            assert [f.body for f in frames] == [b"body-0", b"body-1"]  # read back from the journal
            await client.ack(frames[0], receipt=True)
            state = first.replica.snapshot()
            await client.disconnect()

            second_journal = Journal(tmp_path / "second")
            first_bodies = first.replica.bodies
            assert first_bodies is not None
            second = Node(
                NodeConfig(port=0), InMemoryLog(), bodies=BodyStore(second_journal),
                fetch_bodies=lambda indexes: first_bodies.records_at(indexes, 1 << 20)[1],
            )
            fetching = second.replica.restore(state)
            assert fetching is not None  # it lacks every body: fetched in a worker thread
            await fetching
            assert second.broker.stats() == Broker.restore(msgpack.unpackb(state)["broker"], second.config.core).stats()
            assert second.replica.verify_bodies() == {"references": 4, "unreadable": 0}
            assert second.replica.bodies is not None and second.replica.bodies.missing == set()
            second_journal.close()
        finally:
            await first.stop()
            first_journal.close()

    asyncio.run(scenario())


def test_pages_sealed_in_an_entry_are_its_records_after_its_bodies(tmp_path: Path) -> None:
    with Journal(tmp_path / "b") as journal:
        store = BodyStore(journal)
        store.begin(9, 2, [send(b"one"), send(b"two")])
        ref = store.put(b"page bytes")  # the core seals a page while the entry applies
        assert ref == (9, 2) and store.get(ref) == b"page bytes"  # readable before it is written
        assert store.body((9, 1, 3)) == b"two"  # so are the entry's bodies
        store.end()
        written = list(journal.records())
        assert [(r.raft_index, r.kind) for _ref, r in written] == [(9, KIND_MESSAGE), (9, KIND_MESSAGE), (9, KIND_PAGE)]
        assert len({ref.offset for ref, _record in written}) == 1  # one batch per raft index
        assert store.dump(ref) == [9, 2] and store.load([9, 2]) == (9, 2)
    with Journal(tmp_path / "b") as journal:  # after a restart: read from disk; a replay writes nothing
        store = BodyStore(journal)
        assert store.get((9, 2)) == b"page bytes"
        store.begin(9, 2, [send(b"one"), send(b"two")])
        assert store.put(b"page bytes") == (9, 2)
        store.end()
        assert len(list(journal.records())) == 3
        with pytest.raises(BodyUnavailable, match="holds no page"):
            store.get((9, 0))


def test_a_replay_over_a_batch_without_its_page_keeps_the_page_in_memory(tmp_path: Path) -> None:
    with Journal(tmp_path / "b") as journal:
        store = BodyStore(journal)
        store_entry(store, 4, 1, [send(b"old")])  # written by a version that did not page
        store.begin(4, 1, [send(b"old")])
        handle = store.put(b"a page")
        store.end()
        assert isinstance(handle, int) and store.get(handle) == b"a page" and store.dump(handle) == b"a page"
        assert len(list(journal.records())) == 1
        assert isinstance(store.put(b"outside an entry"), int)
