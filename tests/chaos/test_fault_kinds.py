"""The nemesis's faults are a registry: one module a kind in chaos.faults, each registered under
the name the schedule gives it (chaos.generator.NEMESIS_TARGETS), and none left out."""

from __future__ import annotations

import ast
from pathlib import Path

import chaos.faults
from chaos.faults import KINDS, Strike
from chaos.generator import NEMESES, Fault
from chaos.history import History
from chaos.nemesis import Nemesis

FAULTS_DIR = Path(chaos.faults.__file__).parent


def _strike_classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)
            and any(isinstance(base, ast.Name) and base.id == "Strike" for base in node.bases)]


def test_the_registry_names_the_schedules_kinds() -> None:
    assert sorted(KINDS) == sorted(NEMESES)
    assert all(issubclass(kind, Strike) and KINDS[kind.name] is kind for kind in KINDS.values())


def test_one_module_a_kind_and_every_module_registered() -> None:
    modules = sorted(path for path in FAULTS_DIR.glob("*.py") if path.stem not in ("__init__", "strike"))
    classes = {path.stem: _strike_classes(path) for path in modules}
    assert all(len(found) == 1 for found in classes.values()), classes
    registered = {kind.__module__.rsplit(".", 1)[1]: kind.__name__ for kind in KINDS.values()}
    assert registered == {stem: found[0] for stem, found in classes.items()}
    # A module's name is its kind's, with `_` for `-`.
    assert all(KINDS[stem.replace("_", "-")].__module__.endswith(stem) for stem in classes)


class FakeDeployment:
    """Three members of one group; records what was done to whom."""

    def __init__(self) -> None:
        self.done: list[tuple[str, tuple[str, ...]]] = []

    def groups(self) -> list[str]:
        return ["g1"]

    def members(self, group: str) -> list[str]:
        return ["n1", "n2", "n3"]

    def leader(self, group: str, timeout: float) -> str:
        return "n2"

    def kill(self, key: str) -> None:
        self.done.append(("kill", (key,)))

    def start(self, keys: list[str], wait: bool) -> None:
        self.done.append(("start", tuple(keys)))

    def pause(self, key: str) -> None:
        self.done.append(("pause", (key,)))

    def resume(self, key: str) -> None:
        self.done.append(("resume", (key,)))


def _nemesis() -> tuple[Nemesis, FakeDeployment, History]:
    deployment, history = FakeDeployment(), History()
    return Nemesis(deployment, history, [], None), deployment, history  # type: ignore[arg-type]


def test_the_nemesis_strikes_and_heals_through_the_registry() -> None:
    nemesis, deployment, history = _nemesis()
    nemesis.inject(Fault(0, "kill", "leader", 0, 0, 1))
    assert deployment.done == [("kill", ("n2",))] and nemesis.current == "kill leader n2"
    nemesis.heal()
    nemesis.heal()  # nothing in force: a no-op
    assert deployment.done == [("kill", ("n2",)), ("start", ("n2",))] and nemesis.current is None
    assert [(op.type, op.f) for op in history.ops] == [("invoke", "kill"), ("ok", "kill"), ("invoke", "heal"),
                                                             ("ok", "heal")]


def test_an_unknown_kind_is_a_failed_fault_not_a_crash() -> None:
    nemesis, deployment, history = _nemesis()
    nemesis.inject(Fault(0, "meteor", "one", 0, 0, 1))
    nemesis.heal()
    assert deployment.done == []
    assert [(op.type, op.f) for op in history.ops] == [("invoke", "meteor"), ("fail", "meteor")]
    assert "unknown nemesis 'meteor'" in (history.ops[-1].error or "")
