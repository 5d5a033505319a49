"""`@value` records: equal and hashed by their fields like a frozen dataclass, slotted, and
refused an assignment by the type checker (they are not frozen at run time: that is the point)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

from raftmq.core.commands import Ack, Send
from raftmq.core.effects import Receipt
from raftmq.protocol.header_block import block_of

REPOSITORY = Path(__file__).resolve().parent.parent


def test_equal_and_hashed_by_fields() -> None:
    one = Send("s1", "/queue/a", block_of((("k", "v"),)), b"x", 5, None, "r")
    same = Send("s1", "/queue/a", block_of((("k", "v"),)), b"x", 5, None, "r")
    assert one == same and hash(one) == hash(same)
    assert one != Send("s1", "/queue/b", block_of((("k", "v"),)), b"x", 5, None, "r")
    assert Ack("s", 1, ack_id="1") != Receipt("s", "1")
    assert len({Receipt("s", "1"), Receipt("s", "1"), Receipt("s", "2")}) == 2


def test_slotted() -> None:
    with pytest.raises(AttributeError):
        Receipt("s", "r").extra = 1  # type: ignore[attr-defined]
    assert not hasattr(Receipt("s", "r"), "__dict__")


def test_the_type_checker_refuses_an_assignment(tmp_path: Path) -> None:
    snippet = tmp_path / "assigns.py"
    snippet.write_text(textwrap.dedent("""
        from raftmq.core.commands import Send, Subscribe
        send = Send("s1", "/queue/a", "", b"", 5)
        send.destination = "/queue/b"
        subscribe = Subscribe("s1", "1", "/queue/a", 5)
        subscribe.destination = "/queue/b"
    """))
    out, _, status = mypy_api.run([str(snippet), "--strict", "--no-incremental", "--follow-imports=silent",
                                   "--cache-dir=/dev/null"])
    assert status == 1 and 'Cannot assign to final attribute "destination"' in out, out  # a record written out
    assert 'Property "destination" defined in "Subscribe" is read-only' in out, out  # a @value record
