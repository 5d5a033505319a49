"""The hot modules' two builds (raftmq.compiled): compiled by the install where a C compiler is,
run from source on request or when a source changed since the build, all or none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import raftmq
from raftmq import compiled

PACKAGE = Path(raftmq.__file__).parent
REPORT = ("import json, importlib, raftmq.compiled as c; "
          "print(json.dumps({'mode': c.mode(), "
          "'files': [importlib.import_module(m).__file__ for m in c.HOT_MODULES]}))")


def _can_compile() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None and os.environ.get("RAFTMQ_COMPILE", "1") != "0"


def _report(env: dict[str, str], path: Path | None = None) -> tuple[dict[str, object], str]:
    environment = {**os.environ, **env}
    if path is not None:
        environment["PYTHONPATH"] = str(path)
    done = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=60, env=environment,
                          cwd=path or PACKAGE.parent, check=True)
    return json.loads(done.stdout), done.stderr


def test_the_hot_modules_exist_and_are_on_the_message_path() -> None:
    for module in compiled.HOT_MODULES:
        assert compiled.source_path(module).is_file(), module


@pytest.mark.skipif(os.environ.get(compiled.PURE_ENV, "") not in ("", "0"), reason="this run is the pure build")
def test_an_install_with_a_compiler_runs_every_hot_module_compiled() -> None:
    """Where the install could compile (a C compiler, RAFTMQ_COMPILE not 0), it did: a build
    that fell back to pure Python without saying so fails here, not in a benchmark."""
    if not _can_compile():
        assert compiled.mode().startswith("pure")
        return
    assert compiled.mode() == "compiled"
    for module in compiled.HOT_MODULES:
        assert compiled.is_compiled(sys.modules.get(module) or __import__(module, fromlist=["_"])), module


@pytest.mark.integration
def test_the_pure_switch_runs_every_hot_module_from_its_source() -> None:
    report, _ = _report({compiled.PURE_ENV: "1"})
    assert report["mode"] == "pure"
    assert report["files"] == [str(compiled.source_path(module)) for module in compiled.HOT_MODULES]


@pytest.mark.integration
def test_a_source_changed_since_the_build_runs_every_hot_module_from_source_and_says_so(tmp_path: Path) -> None:
    if compiled.mode() != "compiled":
        pytest.skip("needs the compiled build (a C compiler at install)")
    copy = tmp_path / "raftmq"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for shared in PACKAGE.parent.glob("*__mypyc*"):  # mypyc's shared library, beside the package
        shutil.copy2(shared, tmp_path)
    report, _ = _report({compiled.PURE_ENV: ""}, tmp_path)
    assert report["mode"] == "compiled"  # the copy runs compiled as it is
    changed = compiled.HOT_MODULES[-1]
    source = tmp_path.joinpath(*changed.split(".")).with_suffix(".py")
    source.write_text(source.read_text() + "\n# edited\n")
    report, stderr = _report({compiled.PURE_ENV: ""}, tmp_path)
    relative = source.relative_to(tmp_path)
    assert report["mode"] == f"pure ({relative} changed since the build)"
    assert report["files"] == [str(tmp_path.joinpath(*m.split(".")).with_suffix(".py")) for m in compiled.HOT_MODULES]
    assert f"{relative} changed since it was compiled" in stderr and compiled.REBUILD in stderr


@pytest.mark.skipif(os.environ.get(compiled.PURE_ENV, "") not in ("", "0"), reason="this run is the pure build")
def test_the_core_s_dispatcher_is_a_native_class_where_the_build_compiled() -> None:
    """The dispatcher reads and writes its attributes on every message: compiled as a native
    class they are C fields; a second base class (mypyc compiles no such class natively) would
    quietly make them dict entries, an int boxed at every write."""
    from raftmq.core.broker import Broker
    from raftmq.core.config import CoreConfig

    dispatch = Broker(CoreConfig()).dispatch
    assert hasattr(dispatch, "__dict__") is (compiled.mode() != "compiled")


@pytest.mark.skipif(os.environ.get(compiled.PURE_ENV, "") not in ("", "0"), reason="this run is the pure build")
def test_the_compiled_core_is_closed_to_subclasses() -> None:
    """Tests plant their bugs around the core (tests/helpers/planted_core.py), not in a subclass
    of it: compiled, `Broker` is a native class that no Python class may extend."""
    from raftmq.core.broker import Broker
    from raftmq.core.config import CoreConfig

    if compiled.mode() != "compiled":
        pytest.skip("no compiled build here")
    with pytest.raises(TypeError, match="interpreted classes cannot inherit from compiled"):
        type("Planted", (Broker,), {})(CoreConfig())


def test_the_build_names_the_compile_before_it_starts(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """setup.py says what the long silent step is (mypyc over the hot modules) before doing it;
    run here with mypyc and setuptools' setup stubbed out, so nothing is built."""
    import runpy
    import types

    import setuptools

    calls: list[list[str]] = []
    fake = types.ModuleType("mypyc.build")
    fake.mypycify = lambda args, **kwargs: calls.append(list(args)) or []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mypyc.build", fake)
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    monkeypatch.setenv("RAFTMQ_COMPILE", "1")
    can_compile = _can_compile()
    runpy.run_path(str(PACKAGE.parent / "setup.py"), run_name="__main__")
    err = capsys.readouterr().err
    if can_compile:
        assert f"raftmq: compiling {len(compiled.HOT_MODULES)} hot modules with mypyc" in err, err
        assert "RAFTMQ_COMPILE=0" in err
        assert len(calls) == 1
    else:  # no C compiler: the build says it installs pure Python, and why
        assert "raftmq: installing pure Python (no C compiler" in err, err
        assert calls == []
    monkeypatch.setenv("RAFTMQ_COMPILE", "0")  # asked not to: said, nothing compiled
    runpy.run_path(str(PACKAGE.parent / "setup.py"), run_name="__main__")
    assert "raftmq: installing pure Python (RAFTMQ_COMPILE=0)" in capsys.readouterr().err
    assert len(calls) == (1 if can_compile else 0)
