"""MQTT.js 5 (the MQTT client of Node and browser apps) against a 3-member group's leader: in
Node over TCP to the MQTT port and over WebSocket to the client port, and in headless Chromium
on a page this test serves, MQTT 3.1.1 and 5.0 each. All run tests/js/mqtt_scenario.js: QoS 1
and 0 through two overlapping filters, MQTT 5's user property and content type, a kept session
that finds what was published while it was away, a clean start that forgets it, a QoS 2
publication delivered at QoS 2, a retained message, a will and a shared subscription. The package
is pinned in tests/js/package-lock.json (tests/helpers/javascript.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from raftmq.config import RaftTimings
from raftmq.embedded import EmbeddedBroker
from tests.helpers.browser import browser, javascript_errors, wait_until
from tests.helpers.javascript import JS, installed, serve_files
from tests.helpers.mqtt_groups import mqtt_group

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def steps(version: int) -> list[str]:
    return [
        "connected: session present false",
        "granted: 1,2",
        "received: js/room1/temp 21.5 qos1|js/room1/temp 21.5 qos1",
        *(["properties: unit=C content-type=text/plain"] if version == 5 else []),
        "received: js/room2/temp 19 qos0|js/room2/temp 19 qos0",
        "back: session present true",
        "received: js/room3/temp while away qos1|js/room3/temp while away qos1",
        "clean start: session present false",
        "qos 2: exactly qos2",
        "retained: online retain true, then '' retain false",
        "will: gone",
        "shared: job1,job2,job3,job4",
    ]


@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """(client port, MQTT port) of a 3-member group's leader. Its elections are patient: these
    tests are about the client's protocol (fail-over is test_mqtt_failover's). On the default
    timings a loaded CI machine's half-second fsyncs (every member's at once) can stall the
    followers past the leader's 0.3 s check-quorum: once a publication timed out there, its
    connection most likely closed by a leader change under a client that does not reconnect."""
    group, mqtt, clients = mqtt_group(tmp_path_factory.mktemp("mqttjs"))
    group = replace(group, raft=RaftTimings(election_timeout_min_ms=3000, election_timeout_max_ms=4500))
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        yield clients[leader], mqtt[leader]


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
@pytest.mark.parametrize("transport", ["tcp", "websocket"])
def test_mqttjs_in_node(leader: tuple[int, int], transport: str, version: int) -> None:
    installed()
    client_port, mqtt_port = leader
    url = f"mqtt://127.0.0.1:{mqtt_port}" if transport == "tcp" else f"ws://127.0.0.1:{client_port}/mqtt"
    done = subprocess.run(["node", "mqtt_node.mjs", url, str(version)], cwd=JS, capture_output=True, text=True,
                          timeout=120, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"stderr": done.stderr}
    assert report.get("ok") and report["steps"] == steps(version), report


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>MQTT.js over WebSocket</title>
<script src="mqtt.min.js"></script><script src="mqtt_scenario.js"></script></head>
<body><script>
window.reports = {};
(async () => {
  for (const version of [4, 5]) {
    window.reports[version] = await runMqttScenario(mqtt, %s, version);
  }
  window.done = true;
})();
</script></body></html>
"""


def test_mqttjs_in_a_browser_page(leader: tuple[int, int], tmp_path: Path) -> None:
    installed()
    client_port, _ = leader
    files = {
        "/index.html": (PAGE % json.dumps(f"ws://127.0.0.1:{client_port}/mqtt")).encode(),
        "/mqtt.min.js": (JS / "node_modules/mqtt/dist/mqtt.min.js").read_bytes(),
        "/mqtt_scenario.js": (JS / "mqtt_scenario.js").read_bytes(),
    }
    with serve_files(files) as page, browser(tmp_path / "browser") as driver:
        driver.get(page)
        wait_until(lambda: driver.execute_script("return window.done"), "the page's MQTT.js scenarios",
                   timeout=90, driver=driver)
        reports = driver.execute_script("return window.reports")
        for version in (4, 5):
            report = reports[str(version)]
            assert report.get("ok") and report["steps"] == steps(version), (version, report,
                                                                              javascript_errors(driver))
