"""docs/clients.md stays true: every test file its table names exists, and the versions it
states are the ones the tests pin."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "clients.md").read_text(encoding="utf-8")


def _table_rows() -> list[str]:
    return [line for line in DOC.splitlines() if line.startswith("| ") and not line.startswith("| client")]


def test_every_named_test_file_exists() -> None:
    named = 0
    for row in _table_rows():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        folder = ""
        for path in re.findall(r"`([\w/.]+)`", cells[-1]):
            if path.endswith("/"):
                assert (ROOT / path).is_dir(), path
                folder = path if path.startswith("tests/") else folder
                continue
            if not path.endswith(".py"):
                continue
            full = ROOT / path if "/" in path else ROOT / folder / path
            assert full.is_file(), f"docs/clients.md names {path}, which does not exist"
            if "/" in path:
                folder = str(Path(path).parent) + "/"
            named += 1
    assert named >= 10


def test_the_stated_versions_are_the_pinned_ones() -> None:
    pins = json.loads((ROOT / "tests" / "js" / "package.json").read_text(encoding="utf-8"))["dependencies"]
    assert f"@stomp/stompjs {pins['@stomp/stompjs']}" in DOC
    assert f"MQTT.js {pins['mqtt']}" in DOC
    assert f"ws {pins['ws']}" in DOC
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    paho = re.search(r'"paho-mqtt==([\d.]+)"', pyproject)
    assert paho is not None and f"paho-mqtt {paho.group(1)}" in DOC
    stomp = re.search(r'"stomp-py>=([\d]+)', pyproject)
    assert stomp is not None
