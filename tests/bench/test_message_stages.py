"""bench/message_stages.py's stages, run once on a few messages: no perf, no timing, only that
every stage drives the real code on the inputs the stages before it made, and that the table
adds and subtracts its regions as it says."""

from __future__ import annotations

from contextlib import ExitStack

from bench.message_stages import (
    BODY_BYTES,
    ENTRY_REGIONS,
    REGIONS,
    ROWS,
    TOTALS,
    _entries,
    _replica,
    _sends_applied,
    build_table,
    cache_bytes,
    markdown_table,
    prepare,
)
from raftmq.core.commands import Ack, Send
from raftmq.core.effects import Deliver

MESSAGES = 12


def test_the_set_up_pass_follows_a_send_to_its_message_receipt_and_ack() -> None:
    prepared = prepare(MESSAGES)
    assert [type(c) for commands in prepared.send_commands for c in commands] == [Send] * MESSAGES
    assert all(type(effect) is Deliver and effect.ack_id and body for effect, body in prepared.deliveries)
    assert prepared.receipts == [str(seq + 1) for seq in range(MESSAGES)]
    assert [type(c) for commands in prepared.ack_commands for c in commands] == [Ack] * MESSAGES
    assert [type(c) for commands in prepared.follower_sends for c in commands] == [Send] * MESSAGES
    assert prepared.send_bytes[0].startswith(b"SEND\ndestination:/queue/bench\nbench-run:r1\n")
    assert sorted(prepared.send_index + prepared.ack_index) == list(range(4, 4 + 2 * MESSAGES))


def test_every_region_runs_its_loop_on_fresh_instances() -> None:
    prepared = prepare(MESSAGES)
    for name, factory in REGIONS.items():
        with ExitStack() as stack:
            loop, inputs = factory(prepared, stack)
            assert len(inputs) == MESSAGES, name
            loop(inputs)


def test_entries_of_several_messages_carry_them_all_and_every_ack_settles_its_delivery() -> None:
    prepared = prepare(MESSAGES, entry_size=4)
    for name, factory in REGIONS.items():
        with ExitStack() as stack:
            loop, inputs = factory(prepared, stack)
            assert len(inputs) == (MESSAGES // 4 if name in ENTRY_REGIONS else MESSAGES), name
            loop(inputs)
    assert [len(commands) for commands in prepared.follower_sends] == [4] * (MESSAGES // 4)
    assert sorted(prepared.send_index + prepared.ack_index) == list(range(4, 4 + 2 * MESSAGES // 4))
    with ExitStack() as stack:
        replica, host, sinks = _replica(stack, True, prepared.setup, prepared.entry_size)
        _sends_applied(prepared, True, replica, host)
        assert len(sinks["c"].effects) == MESSAGES and len(sinks["p"].receipts) == MESSAGES
        for index, commands in zip(*_entries(prepared, True, True), strict=True):
            host.commit_log.position.index = index
            replica.apply(commands)
        held = [len(sub.in_flight) for session in replica.broker.state.sessions.values()
                for sub in session.subs.values()]
        assert held == [0], "an ACK of the grouped entries named no delivery"


def test_a_leaders_entry_is_kept_for_its_deliveries_at_every_entry_size() -> None:
    """As a node's 16 MiB cache keeps a loaded group's entries: otherwise every delivery of the
    bench would read its body back, a cost a node does not pay."""
    for size in (1, 4, 60, 200):
        entry = size * (BODY_BYTES + 64)
        assert entry <= cache_bytes(size) // 4 and cache_bytes(size) <= 64 * entry, size
    prepared = prepare(8, entry_size=4)
    with ExitStack() as stack:
        replica, host, _sinks = _replica(stack, True, prepared.setup, prepared.entry_size)
        _sends_applied(prepared, True, replica, host)
        assert replica.bodies._recent, "the leader kept none of its entries' bodies"


def test_rows_derive_and_total_from_the_regions() -> None:
    objects = {name: 1.0 for name in REGIONS}
    objects.update({"send.receive": 30.0, "send.parse": 20.0, "send.apply": 50.0, "send.begin_end": 12.0,
                    "send.begin": 5.0, "send.core": 10.0})
    results = {"installed": {"count": {"objects": objects}}}
    table = {(row["group"], row["stage"]): row for row in build_table(results)}
    assert table["leader SEND", "decide + translate"]["objects_installed"] == 10.0
    assert table["leader SEND", "body journal"]["objects_installed"] == 7.0
    assert table["leader SEND", "effects out"]["objects_installed"] == 28.0
    assert table["leader SEND", "read"]["objects_installed"] is None  # not measured here
    assert table["leader SEND", "parse"]["cpu_pure"] is None  # no such run
    # The measured rows of a group add up to its whole path: receive, encoders, apply, frames.
    whole = 30.0 + 1.0 + 1.0 + 50.0 + 1.0 + 1.0
    assert table["total", TOTALS[0][0]]["objects_installed"] == whole
    assert len(build_table(results)) == len(ROWS) + len(TOTALS)
    assert "| **total** |" in markdown_table(build_table(results))
