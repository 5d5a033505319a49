"""One error tree (raftmq.errors): every exception class of raftmq.errors, the chaos harness
and the audit derives from `RaftmqError` and is named in the tree drawn at the top of
raftmq/errors.py; the harness's "this machine cannot make that fault" errors share one base."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import chaos
import spark_audit
from raftmq import errors
from raftmq.errors import FaultUnavailable, RaftmqError


def _modules() -> list[str]:
    names = ["raftmq.errors"]
    for package in (chaos, spark_audit):
        names += sorted(info.name for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."))
    return names


def _exceptions(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__ == module_name]


EXCEPTIONS = {f"{cls.__module__}.{cls.__name__}": cls for name in _modules() for cls in _exceptions(name)}
DRAWN = set(re.findall(r"[├└]── (\w+)", errors.__doc__ or ""))


def test_the_harness_and_the_audit_have_errors_to_check() -> None:
    assert {"chaos.netns.NetnsError", "chaos.workload.NeedsCluster", "raftmq.errors.AuditError"} <= EXCEPTIONS.keys()


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_error_is_in_the_one_tree(name: str) -> None:
    cls = EXCEPTIONS[name]
    assert issubclass(cls, RaftmqError), f"{name} is outside the tree: {[c.__name__ for c in cls.__mro__]}"
    assert cls is RaftmqError or cls.__name__ in DRAWN, f"{name} is missing from the tree in raftmq/errors.py"


@pytest.mark.parametrize("name", ["chaos.environment.Unavailable", "chaos.clock_fault.ClockUnavailable",
                                  "chaos.disk.DiskUnavailable", "chaos.packet_queue.LibraryMissing",
                                  "chaos.netns.NetemUnavailable"])
def test_a_fault_this_machine_cannot_make_is_one_kind_of_error(name: str) -> None:
    assert issubclass(EXCEPTIONS[name], FaultUnavailable)


def test_missing_netem_is_still_a_namespace_error() -> None:
    # chaos.netns's callers catch NetnsError around a namespace's setup.
    from chaos.netns import NetemUnavailable, NetnsError

    assert issubclass(NetemUnavailable, NetnsError)
