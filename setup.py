"""Builds raftmq's hot modules (raftmq/compiled.py, HOT_MODULES) with mypyc from their Python source.

pyproject.toml holds everything else. Set RAFTMQ_COMPILE=0 to install pure Python; without a C
compiler the build says so and installs pure Python too. Either way raftmq runs the same code
(raftmq.compiled explains how it picks the build at run time).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
COMPILE_ENV = "RAFTMQ_COMPILE"
# The build's own mypy settings, not pyproject's strict ones: the build runs in pip's isolated
# environment, where raftmq's dependencies are not installed, so their types are unknown (Any)
# there. Strictness is for CI's `mypy` run, over the same source, with everything installed.
BUILD_MYPY_CONFIG = """[mypy]
ignore_missing_imports = True
follow_imports = silent
"""


def hot_modules() -> list[str]:
    """HOT_MODULES of raftmq/compiled.py, read without importing raftmq (not installed yet)."""
    tree = ast.parse((ROOT / "raftmq" / "compiled.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "HOT_MODULES":
            return list(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise SystemExit("raftmq/compiled.py has no HOT_MODULES")


def source(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def why_not_compiled() -> str | None:
    if os.environ.get(COMPILE_ENV, "1") == "0":
        return f"{COMPILE_ENV}=0"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}; on Debian: apt-get install gcc python3-dev)"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "no Python headers (on Debian: apt-get install python3-dev)"
    return None


class BuildHot(build_ext):
    """build_ext that also writes the hashes of the sources it compiled beside them."""

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        package = Path(self.get_ext_fullpath("raftmq.compiled")).parent
        hashes = {module: hashlib.sha256(source(module).read_bytes()).hexdigest() for module in hot_modules()}
        package.mkdir(parents=True, exist_ok=True)
        (package / "compiled_sources.json").write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def extensions() -> list[object]:
    reason = why_not_compiled()
    if reason is not None:
        print(f"raftmq: installing pure Python ({reason})", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    paths = [str(source(module).relative_to(ROOT)) for module in hot_modules()]
    print(f"raftmq: compiling {len(paths)} hot modules with mypyc from their source (raftmq/compiled.py lists "
          f"them; about a minute, quiet unless pip runs with -v; {COMPILE_ENV}=0 installs pure Python instead)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="raftmq-build-") as work:  # mypycify reads the config and is done with it
        config = Path(work) / "mypy.ini"
        config.write_text(BUILD_MYPY_CONFIG, encoding="utf-8")
        return mypycify(["--config-file", str(config), *paths], opt_level="3", debug_level="0")


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildHot})
