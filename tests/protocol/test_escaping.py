"""Tests of the header escaping helpers on their own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.errors import ProtocolError
from raftmq.protocol.escaping import escape, unescape


def test_escape_per_version() -> None:
    text = "a:b\nc\rd\\e"
    assert escape(text, "1.2") == "a\\cb\\nc\\rd\\\\e"
    assert escape(text, "1.1") == "a\\cb\\nc\rd\\\\e"
    assert escape(text, "1.0") == text


def test_unescape_per_version() -> None:
    assert unescape("a\\cb\\nc\\rd\\\\e", "1.2") == "a:b\nc\rd\\e"
    assert unescape("a\\cb\\nc\\\\e", "1.1") == "a:b\nc\\e"
    assert unescape("a\\tb", "1.0") == "a\\tb"


@pytest.mark.parametrize("text", ["\\t", "x\\", "\\\\\\", "\\ ", "\\C", "\\N"])
def test_undefined_escapes(text: str) -> None:
    with pytest.raises(ProtocolError, match="escape"):
        unescape(text, "1.2")
    with pytest.raises(ProtocolError, match="escape"):
        unescape(text, "1.1")


def test_unescape_text_holding_nul_takes_the_general_path() -> None:
    assert unescape("\0\\\\n\\n\0", "1.2") == "\0\\n\n\0"
    with pytest.raises(ProtocolError):
        unescape("\0\\t", "1.2")


def test_unknown_version() -> None:
    with pytest.raises(ProtocolError):
        unescape("x", "2.0")
    with pytest.raises(ProtocolError):
        escape("x", "2.0")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(["\\", ":", "\n", "\r", "\0", "c", "n", "r", "x"])),
       st.sampled_from(["1.1", "1.2"]))
def test_escape_then_unescape_is_identity(text: str, version: str) -> None:
    assert unescape(escape(text, version), version) == text
