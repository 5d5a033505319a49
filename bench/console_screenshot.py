"""A screenshot of the web console on the symmetric preset under load.

Starts `raftmq up --detach --preset symmetric` (three groups of three, full mesh) in a
directory of its own, puts it under load and opens the console of g1's leader
(`http://ADMIN/`) in headless Chromium (tests/helpers/browser.py), then saves the whole page:

- two `raftmq bench` processes: /queue/orders (producers on g1, consumers on g2, so the link
  g1 -> g2 forwards) and /queue/payments (producers and consumers on g1);
- a consumer of /queue/orders on g1 as well (auto ack), so g1 shows the queue besides its
  store-and-forward queue to g2;
- /queue/alerts on g1: one consumer with the selector `severity = 'high'` (it stays connected),
  and alerts of both severities, so the low ones wait (depth);
- /queue/invoices on g1: a few messages NACKed until they go to /queue/DLQ (the dead-letter
  panel's rows).

It waits until the page shows non-zero rates for the bench queues, three healthy members, two
links, the dead letters and the selector consumer with an "Up to date" status line, saves
test-artifacts/console-symmetric.png (repository root), stops everything (the bench
processes by pid, then `raftmq down`) and prints what the screenshot shows.

    .venv/bin/python -m bench.console_screenshot [--dir /tmp/console-shot] [--out PATH]

The preset's fixed ports (61613-61621, 62613-62621, 8161-8169) must be free.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from raftmq.client.failover import connect_failover
from raftmq.ops.launcher import read_state
from tests.helpers.browser import browser, javascript_errors, save_screenshot, status_line, wait_for_poll, wait_until

REPOSITORY = Path(__file__).resolve().parents[1]
RAFTMQ = str(Path(sys.executable).parent / "raftmq")
PRESET = "symmetric"
OUT = REPOSITORY / "test-artifacts" / "console-symmetric.png"
ORDERS, PAYMENTS, ALERTS = "/queue/orders", "/queue/payments", "/queue/alerts"
INVOICES, DLQ = "/queue/invoices", "/queue/DLQ"
SELECTOR = "severity = 'high'"
DEAD_LETTERS = 5
ALERTS_HIGH, ALERTS_LOW = 6, 14
BENCH_SECONDS = 240.0  # longer than the screenshot takes; stopped by pid afterwards
API_TIMEOUT = 5.0
STOP_WAIT = 15.0


# -- the cluster ---------------------------------------------------------------------------------

def raftmq(*args: str, cwd: Path, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RAFTMQ, *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=timeout)


def preset_addresses() -> list[str]:
    """Every client, raft and admin address of the preset's groups (configs/symmetric-g*.toml)."""
    found = []
    for path in sorted((REPOSITORY / "configs").glob(f"{PRESET}-g*.toml")):
        for node in tomllib.loads(path.read_text()).get("node", []):
            found += [node[k] for k in ("client", "raft", "admin") if k in node]
    return found


def busy(addresses: list[str]) -> list[str]:
    taken = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex((host, int(port))) == 0:
                taken.append(address)
    return taken


def api(admin: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{admin}{path}", timeout=API_TIMEOUT) as answer:
        return json.loads(answer.read())


def leader_admin(admins: list[str], timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for admin in admins:
            with contextlib.suppress(OSError, ValueError):
                if api(admin, "/api/overview").get("role") == "leader":
                    return admin
        time.sleep(0.5)
    raise SystemExit(f"no leader among {admins} within {timeout:g} s")


def failover(addresses: list[str]) -> str:
    return "failover:(" + ",".join(f"stomp://{a}" for a in addresses) + ")?randomize=false"


# -- the load ------------------------------------------------------------------------------------

def start_bench(workdir: Path, name: str, destination: str, url: str, consumer_url: str | None,
                producers: int, consumers: int) -> subprocess.Popen[bytes]:
    argv = [RAFTMQ, "bench", "--url", url, "--destination", destination, "-p", str(producers),
            "-c", str(consumers), "-s", "512", "--receipt-window", "10", "--duration", str(BENCH_SECONDS),
            "--drain-timeout", "2", "-q", "--json", str(workdir / f"bench-{name}.json")]
    if consumer_url:
        argv += ["--consumer-url", consumer_url]
    log = open(workdir / f"bench-{name}.log", "wb")  # noqa: SIM115 - the child keeps it
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    finally:
        log.close()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT, then SIGKILL after STOP_WAIT: this pid only (we started it)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(STOP_WAIT)


class SideLoad:
    """In a thread of its own: the selector consumer on /queue/alerts (connected until `stop`),
    the alerts, and the dead letters of /queue/invoices (a consumer NACKs until they are gone)."""

    def __init__(self, g1: str, g1_admin: str) -> None:
        self.g1 = g1
        self.g1_admin = g1_admin
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.alerts_acked = 0
        self.nacks = 0
        self.orders = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="side-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30.0)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by the main thread
            self.error = error
            self.ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        watcher = await connect_failover(self.g1)
        try:
            def on_alert(frame: Any) -> None:
                self.alerts_acked += 1
                watcher.ack_nowait(frame)

            alerts = watcher.subscribe(ALERTS, id="alerts-high", ack="client-individual", prefetch=10,
                                       headers={"selector": SELECTOR}, callback=on_alert)
            await asyncio.wait_for(alerts.receipt, 15)
            # A consumer of /queue/orders on g1 too: the producers' messages are shared between
            # it and g2's (the bridge g1 -> g2), so g1 shows the queue itself as well as its
            # store-and-forward queue.
            orders = watcher.subscribe(ORDERS, id="orders-g1", ack="auto", prefetch=100, callback=self._on_order)
            await asyncio.wait_for(orders.receipt, 15)
            await self._send_alerts()
            await asyncio.wait_for(self._dead_letters(), 60)
            self.ready.set()
            await self._stop.wait()
        finally:
            await watcher.close()

    def _on_order(self, frame: Any) -> None:
        self.orders += 1

    async def _send_alerts(self) -> None:
        client = await connect_failover(self.g1)
        try:
            for i in range(ALERTS_HIGH + ALERTS_LOW):
                severity = "high" if i % 3 == 0 and i // 3 < ALERTS_HIGH else "low"
                await client.send(ALERTS, f"alert {i}: disk {70 + i}% full".encode(),
                                  headers={"severity": severity}, receipt=True)
        finally:
            await client.close()

    async def _dead_letters(self) -> None:
        client = await connect_failover(self.g1)
        try:
            for i in range(DEAD_LETTERS):
                await client.send(INVOICES, json.dumps({"invoice": 1000 + i, "amount": 12.5 * (i + 1)}).encode(),
                                  headers={"content-type": "application/json"}, receipt=True)
            nacker = client.subscribe(INVOICES, id="invoices-nack", ack="client-individual", prefetch=1)
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline:  # every delivery NACKed until the DLQ holds them all
                try:
                    frame = await asyncio.wait_for(nacker.get(), 2.0)
                except TimeoutError:
                    if await asyncio.to_thread(dead_lettered, self.g1_admin) >= DEAD_LETTERS:
                        break
                    continue
                await client.nack(frame, receipt=True)
                self.nacks += 1
            await nacker.unsubscribe(receipt=True)
        finally:
            await client.close()


def dead_lettered(admin: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for row in api(admin, "/api/destinations")["destinations"]:
            if row["destination"] == DLQ:
                return int(row["depth"])
    return 0


# -- the page ------------------------------------------------------------------------------------

TABLE_JS = """
const out = {};
for (const id of arguments[0]) {
  const table = document.getElementById(id);
  out[id] = table ? Array.from(table.tBodies[0].rows).map(
    (row) => Array.from(row.cells).map((c) => c.textContent.trim())) : null;
}
const notes = {};
for (const p of document.querySelectorAll('p.panel-note')) {
  if (!p.hidden && p.textContent) notes[p.id] = p.textContent;
}
const dl = {};
for (const dd of document.querySelectorAll('#overview-summary dd')) dl[dd.dataset.field] = dd.textContent;
return {tables: out, notes: notes, summary: dl,
        status: document.getElementById('status').dataset.state + ': ' + document.getElementById('status').textContent};
"""
TABLES = ["members-table", "links-table", "groups-table", "destinations-table", "dlq-table", "connections-table",
          "consumers-table"]
# destinations-table columns
D_NAME, D_DEPTH, D_INFLIGHT, D_CONSUMERS, D_ENQ, D_DEQ, D_DEAD, D_IN, D_OUT = 0, 2, 3, 4, 5, 6, 8, 10, 11


def page(driver: Any) -> dict[str, Any]:
    return dict(driver.execute_script(TABLE_JS, TABLES))


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def looks_right(driver: Any) -> bool:
    seen = page(driver)
    tables = seen["tables"]
    if not seen["status"].startswith("ok:"):
        return False
    members = tables["members-table"] or []
    if len(members) != 3 or any(row[4] != "ok" for row in members):
        return False
    links = {row[1]: row for row in tables["links-table"] or []}
    if sorted(links) != ["g2", "g3"] or any(row[2] != "connected" for row in links.values()):
        return False
    if number(links["g2"][4]) <= 0 or len(tables["groups-table"] or []) < 2:  # orders forwarded to g2
        return False
    rows = {row[D_NAME]: row for row in tables["destinations-table"] or []}
    for queue in (ORDERS, PAYMENTS):
        row = rows.get(queue)
        if row is None or number(row[D_IN]) <= 0 or number(row[D_OUT]) <= 0:
            return False
    if len(tables["dlq-table"] or []) < DEAD_LETTERS:
        return False
    if not any(row[5] == SELECTOR for row in tables["consumers-table"] or []):
        return False
    return bool(tables["connections-table"])


def describe(seen: dict[str, Any], leader: str, out: Path) -> str:
    tables = seen["tables"]
    s = seen["summary"]
    lines = [f"{out}: the console of g1's leader http://{leader}/ (group {s.get('group')}, node {s.get('node')}, "
             f"role {s.get('role')}, term {s.get('term')}, {s.get('destinations')} destinations, "
             f"{s.get('connections')} connections); status line {seen['status']!r}"]
    lines.append("Cluster: members " + ", ".join(f"{r[0]} {r[3]}/{r[4]}" for r in tables["members-table"])
                 + "; links " + ", ".join(f"{r[0]}->{r[1]} {r[2]} (waiting {r[3]}, forwarded {r[4]})"
                                          for r in tables["links-table"])
                 + "; known groups " + ", ".join(f"{r[0]} ({r[1]} hop via {r[2]})" for r in tables["groups-table"]))
    lines.append("Destinations (depth, in flight, consumers, enqueued, dequeued, dead-lettered, in/s, out/s):")
    for r in tables["destinations-table"]:
        lines.append(f"  {r[D_NAME]}: depth {r[D_DEPTH]}, in flight {r[D_INFLIGHT]}, consumers {r[D_CONSUMERS]}, "
                     f"enq {r[D_ENQ]}, deq {r[D_DEQ]}, dead {r[D_DEAD]}, {r[D_IN]} in/s, {r[D_OUT]} out/s")
    dlq = tables["dlq-table"]
    lines.append(f"Dead letters: {len(dlq)} on {DLQ} (from " + ", ".join(sorted({r[1] for r in dlq}))
                 + f", deliveries {', '.join(sorted({r[2] for r in dlq}))})")
    connections = tables["connections-table"]
    bridges = sum(1 for r in connections if r[1].startswith("bridge "))
    lines.append(f"Connections: {len(connections)} on g1's leader ({bridges} its own bridges' sessions, "
                 f"{sum(1 for r in connections if r[6] != '0' and not r[1].startswith('bridge '))} clients with "
                 f"subscriptions, the rest producers and the other groups' bridges into g1); consumers: "
                 + "; ".join(f"{r[0]} {r[1]}" + (f" [selector {r[5]}]" if r[5] not in ('', '\u2013') else "")
                             + f" in flight {r[8]}" for r in tables["consumers-table"]))
    if seen["notes"]:
        lines.append("Panel notes: " + json.dumps(seen["notes"]))
    return "\n".join(lines)


def shoot(leader: str, out: Path, log_dir: Path, timeout: float) -> str:
    with browser(log_dir) as driver:
        driver.get(f"http://{leader}/")
        try:
            wait_until(lambda: looks_right(driver), "the console shows members, links, rates, dead letters and the "
                       "selector consumer", timeout, driver)
            wait_for_poll(driver)  # one more refresh: the rows settle at their latest values
            wait_until(lambda: looks_right(driver), "the console still shows everything", timeout, driver)
        except AssertionError as error:
            failed = out.with_name(out.stem + "-failed" + out.suffix)
            save_screenshot(driver, failed)
            raise AssertionError(f"{error}\nthe page ({failed}): {json.dumps(page(driver), indent=1)}") from None
        seen = page(driver)
        save_screenshot(driver, out)
        errors = javascript_errors(driver)
        if errors:
            print("javascript errors on the page:", *errors, sep="\n  ", file=sys.stderr)
        print(f"status line at the screenshot: {status_line(driver)!r}", file=sys.stderr)
    return describe(seen, leader, out)


# -- main ----------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="working directory (default: a new temporary one, removed after)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds for the page to show everything")
    options = parser.parse_args()

    taken = busy(preset_addresses())
    if taken:
        raise SystemExit(f"the {PRESET} preset's ports are in use ({', '.join(taken)}): is another cluster up?")
    temporary = options.dir is None
    workdir = Path(tempfile.mkdtemp(prefix="raftmq-console-")) if temporary else options.dir
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / ".raftmq").exists():  # a former run's journals: its messages would show up again
        raise SystemExit(f"{workdir / '.raftmq'} exists: give a new --dir (or remove it)")
    print(f"working directory: {workdir}", file=sys.stderr)

    up = raftmq("up", "--detach", "--preset", PRESET, cwd=workdir)
    if up.returncode != 0:
        raftmq("down", "--preset", PRESET, cwd=workdir)
        raise SystemExit(f"raftmq up failed:\n{up.stdout}{up.stderr}")
    benches: list[subprocess.Popen[bytes]] = []
    side: SideLoad | None = None
    ok = False
    try:
        state = read_state(workdir / ".raftmq")
        assert state is not None, "no cluster state after raftmq up"
        clients: dict[str, list[str]] = {}
        admins: dict[str, list[str]] = {}
        for node in state.nodes:
            clients.setdefault(node.group, []).append(node.client)
            admins.setdefault(node.group, []).append(node.admin)
        leader = leader_admin(admins["g1"])
        print(f"g1's leader admin: {leader}", file=sys.stderr)
        g1, g2 = failover(clients["g1"]), failover(clients["g2"])

        benches.append(start_bench(workdir, "orders", ORDERS, g1, g2, producers=2, consumers=2))
        benches.append(start_bench(workdir, "payments", PAYMENTS, g1, None, producers=2, consumers=2))
        side = SideLoad(g1, leader)
        side.start()
        if not side.ready.wait(120) or side.error is not None:
            raise SystemExit(f"the side load did not finish: {side.error!r}")
        print(f"side load: {side.nacks} NACKs, {dead_lettered(leader)} dead letters, "
              f"{side.alerts_acked} high alerts acked, {side.orders} orders consumed on g1 so far", file=sys.stderr)
        for proc in benches:
            if proc.poll() is not None:
                raise SystemExit(f"a bench exited early ({proc.returncode}): see {workdir}/bench-*.log")

        description = shoot(leader, options.out, workdir / "browser", options.timeout)
        ok = True
    finally:
        if side is not None:
            side.stop()
        for proc in benches:
            stop_process(proc)
        down = raftmq("down", "--preset", PRESET, cwd=workdir)
        if down.returncode != 0:
            print(f"raftmq down: {down.stdout}{down.stderr}", file=sys.stderr)
        if temporary and ok:
            shutil.rmtree(workdir, ignore_errors=True)
    print(description)


if __name__ == "__main__":
    if os.environ.get("RAFTMQ_CONSOLE_SHOT_DEBUG"):
        import faulthandler
        faulthandler.dump_traceback_later(600, exit=True)
    main()
