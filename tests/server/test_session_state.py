"""A STOMP session's state is the session's: the shell asks it named questions (`reading`,
`ended`) and never sets it; only `StompSession` (and the bridge's in-process session, which keeps
its own) moves a state."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from raftmq.server.stomp.session import SessionState

SERVER = Path(__file__).resolve().parents[2] / "raftmq" / "server"
# The two classes that own a session state and move it.
OWNERS = {"stomp/session.py", "links/bridge_session.py"}


@pytest.mark.parametrize(("state", "reading", "ended"), [
    (SessionState.AWAIT_CONNECT, True, False), (SessionState.CONNECTING, True, False), (SessionState.OPEN, True, False),
    (SessionState.DISCONNECTING, False, False), (SessionState.FAILED, False, True), (SessionState.RELAYED, False, True),
    (SessionState.CLOSED, False, True),
])
def test_each_state_answers_the_two_questions(state: SessionState, reading: bool, ended: bool) -> None:
    assert (state.reading, state.ended) == (reading, ended)


def _state_writes_and_orderings(source: str) -> list[str]:
    """`….state = …` assignments, and comparisons that order a SessionState (`<`, `>=`, ...)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"line {node.lineno}: sets {ast.unparse(t)}" for t in targets
                      if isinstance(t, ast.Attribute) and t.attr == "state" and "stomp" in ast.unparse(t.value)]
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            if "SessionState" in ast.unparse(node):
                found.append(f"line {node.lineno}: orders {ast.unparse(node)}")
    return found


def test_the_shell_neither_sets_nor_orders_a_session_state() -> None:
    offenders = {str(path.relative_to(SERVER)): found for path in sorted(SERVER.rglob("*.py"))
                 if str(path.relative_to(SERVER)) not in OWNERS
                 and (found := _state_writes_and_orderings(path.read_text()))}
    assert offenders == {}


def test_the_check_finds_a_planted_write_and_ordering() -> None:
    planted = "def f(c):\n    c.stomp.state = SessionState.FAILED\n    return c.stomp.state >= SessionState.FAILED\n"
    assert _state_writes_and_orderings(planted) == ["line 2: sets c.stomp.state",
                                                    "line 3: orders c.stomp.state >= SessionState.FAILED"]
