"""The dispatcher's parts (raftmq.core.dispatch_redelivery <- dispatch_paging <- dispatch): each
base declares the dispatcher's methods it calls, as stubs that raise, and `Dispatcher` defines
every one of them, so no stub is ever reached."""

from __future__ import annotations

import ast
from pathlib import Path

import raftmq.core

CORE = Path(raftmq.core.__file__).parent


def _methods(module: str, cls: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse((CORE / f"{module}.py").read_text(encoding="utf-8"))
    [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    return {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}


def _is_stub(function: ast.FunctionDef) -> bool:
    body = function.body
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])


def test_every_method_a_part_leaves_to_the_dispatcher_is_the_dispatchers() -> None:
    stubs = {name: function for module, cls in (("dispatch_redelivery", "Redelivery"), ("dispatch_paging", "Paging"))
             for name, function in _methods(module, cls).items() if _is_stub(function)}
    assert stubs, "the parts declare the dispatcher methods they call"
    dispatcher = _methods("dispatch", "Dispatcher")
    for name, stub in stubs.items():
        assert name in dispatcher and not _is_stub(dispatcher[name]), name
        # the same parameters, so that the compiled override replaces the stub
        assert [a.arg for a in dispatcher[name].args.args] == [a.arg for a in stub.args.args], name
