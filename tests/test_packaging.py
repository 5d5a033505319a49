"""What the installed distribution carries beside the code: the PEP 561 marker that tells a type
checker to read the packages' annotations (they are checked with mypy strict)."""

from __future__ import annotations

import importlib.resources
import tomllib
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
TOP_LEVEL_PACKAGES = ("raftmq", "cluster", "chaos", "spark_audit")


@pytest.mark.parametrize("package", TOP_LEVEL_PACKAGES)
def test_the_installed_package_is_marked_typed(package: str) -> None:
    assert importlib.resources.files(package).joinpath("py.typed").is_file()


@pytest.mark.parametrize("package", TOP_LEVEL_PACKAGES)
def test_a_built_wheel_takes_the_marker_along(package: str) -> None:
    """An editable install reads the source folder, so the marker's presence above does not show
    that a wheel ships it: setuptools copies only the package data pyproject.toml names."""
    setuptools = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert any(package == pattern.rstrip("*") or package.startswith(pattern.rstrip("*"))
               for pattern in setuptools["packages"]["find"]["include"])
    assert "py.typed" in setuptools["package-data"].get(package, [])
