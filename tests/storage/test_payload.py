"""The body references a group member's core holds (raftmq.storage.payload.reference_bodies)."""

from __future__ import annotations

from raftmq.core.commands import Ack, Connect, Send
from raftmq.core.message import body_size
from raftmq.storage.payload import reference_bodies


def test_each_send_gets_its_index_ordinal_and_size() -> None:
    commands = [Connect("p", 1), Send("p", "/queue/a", (), b"abc", 1, receipt="r1"), Ack("p", 1, ack_id="1"),
                Send("p", "/queue/b", (("h", "v"),), b"", 2, transaction="t")]
    swapped = reference_bodies(7, commands)
    assert swapped[0] is commands[0] and swapped[2] is commands[2]
    first, second = swapped[1], swapped[3]
    assert first == Send("p", "/queue/a", (), (7, 0, 3), 1, receipt="r1")
    assert second == Send("p", "/queue/b", (("h", "v"),), (7, 1, 0), 2, transaction="t")
    assert [body_size(s.body) for s in (first, second)] == [3, 0]
    assert commands[1] == Send("p", "/queue/a", (), b"abc", 1, receipt="r1")  # the input is left as it was
