"""chaos.netns: the partition shapes (pure), and, as root, real namespaces on a bridge where a
cut drops packets (a connect times out, it is not refused) while the root namespace still
reaches every host, heal and destroy leave nothing of ours behind, netem slows packets, and a
real raftmq node runs inside a namespace under its own pid."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import netns
from chaos.netns import Network
from raftmq import processes
from tests.helpers.stomp_raw import RawClient

READY = "raftmq node listening on "
PORT = 7000
CLOSED_PORT = 7001
CONNECT_TIMEOUT = 1.0
# A server that accepts and closes, boundedly: at most 200 connections, 60 s of idling.
SERVER = """import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16); s.settimeout(60); print("ready", flush=True)
for _ in range(200):
    s.accept()[0].close()
"""
# One word per address: ok, timeout (packets dropped) or refused (a closed port answered RST).
PROBE = """import socket, sys
for address in sys.argv[3:]:
    try:
        socket.create_connection((address, int(sys.argv[1])), float(sys.argv[2])).close(); print("ok")
    except TimeoutError: print("timeout")
    except ConnectionRefusedError: print("refused")
"""

H = [f"h{i}" for i in range(1, 10)]


# -- shapes ---------------------------------------------------------------------------------


def test_grudge_of_sides_drops_across_sides_only() -> None:
    assert netns.grudge([["h1"], ["h2", "h3"]]) == {
        "h1": {"h2", "h3"}, "h2": {"h1"}, "h3": {"h1"}}
    assert netns.grudge([["h1"], ["h2"]]) == {"h1": {"h2"}, "h2": {"h1"}}  # h3 (in no side) drops nobody
    assert netns.grudge([["h1", "h2"]]) == {}
    with pytest.raises(ValueError):
        netns.grudge([["h1"], ["h1", "h2"]])


def test_halves_and_isolate() -> None:
    assert netns.halves(H[:5]) == [["h1", "h2"], ["h3", "h4", "h5"]]
    assert netns.halves(H[:2]) == [["h1"], ["h2"]]
    assert netns.isolate(H[:3], "h2") == [["h2"], ["h1", "h3"]]
    with pytest.raises(ValueError):
        netns.halves(H[:1])
    with pytest.raises(ValueError):
        netns.isolate(H[:3], "h9")


def test_bridge_joins_two_halves_through_one_host() -> None:
    hosts = H[:5]
    seen = netns.sees(netns.bridge(hosts), hosts)
    assert seen["h3"] == set(hosts)
    assert seen["h1"] == seen["h2"] == {"h1", "h2", "h3"}
    assert seen["h4"] == seen["h5"] == {"h3", "h4", "h5"}
    with pytest.raises(ValueError):
        netns.bridge(H[:2])


@pytest.mark.parametrize("n", range(4, 10))
def test_majorities_ring_gives_each_host_its_own_majority(n: int) -> None:
    hosts = H[:n]
    shape = netns.majorities_ring(hosts)
    seen = netns.sees(shape, hosts)
    assert all(len(s) > n // 2 and h in s for h, s in seen.items())
    assert len(set(seen.values())) == n  # no two hosts see the same majority
    assert all(h in shape[o] for h in hosts for o in shape[h])  # symmetric: links die both ways
    assert all(shape[h] for h in hosts)  # and it is a partition: everyone misses somebody


def test_majorities_ring_needs_four_hosts() -> None:
    with pytest.raises(ValueError):
        netns.majorities_ring(H[:3])


def test_names_stay_short_and_ours() -> None:
    with pytest.raises(ValueError):
        Network("toolong", 3)
    net = Network("chaos", 3)
    assert net.prefix.startswith("rmqchaos") and len(net.root_link) <= 15
    assert net.exec_prefix("h2") == ["ip", "netns", "exec", f"{net.prefix}-h2"]
    with pytest.raises(ValueError):
        netns.clear_stale("other")


# -- real namespaces ------------------------------------------------------------------------


@pytest.fixture
def net() -> Iterator[Network]:
    reason = netns.available()
    if reason is not None:
        pytest.skip(reason)
    network = Network("t", 3)
    try:
        network.create()
        yield network
    finally:
        network.destroy()


def serve(net: Network, host: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    out = tmp_path / f"server-{host}.out"
    proc = processes.spawn([*net.exec_prefix(host), sys.executable, "-c", SERVER, "0.0.0.0", str(PORT)], out)
    try:
        processes.wait_for_line(proc, out, "ready", 10)
    except BaseException:
        processes.kill(proc)
        raise
    return proc


def probe(net: Network, host: str, *targets: str, port: int = PORT) -> list[str]:
    """How connecting from `host`'s namespace to each target ends."""
    addresses = [net.address(t) for t in targets]
    argv = [*net.exec_prefix(host), sys.executable, "-c", PROBE, str(port), str(CONNECT_TIMEOUT), *addresses]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.split()


def from_root(address: str, port: int = PORT) -> tuple[str, float]:
    """How a connect from the root namespace ends, and how long it took."""
    start = time.monotonic()
    try:
        socket.create_connection((address, port), CONNECT_TIMEOUT).close()
        outcome = "ok"
    except TimeoutError:
        outcome = "timeout"
    return outcome, time.monotonic() - start


def run_in(net: Network, host: str, *argv: str) -> str:
    return subprocess.run([*net.exec_prefix(host), *argv], capture_output=True, text=True, timeout=10,
                          check=True).stdout


def our_rules(net: Network) -> list[str]:
    listed = [run_in(net, h, "iptables", "-w", "-S") for h in net.hosts]
    return [line for text in listed for line in text.splitlines() if netns.COMMENT in line]


def our_names(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10, check=True).stdout
    return [line for line in (listed + links).splitlines() if prefix in line]


@pytest.mark.integration
def test_a_cut_drops_packets_and_heal_undoes_it(net: Network, tmp_path: Path) -> None:
    # IPv4 only: a link-local IPv6 address would be a way round the IPv4 rules.
    assert "inet6" not in run_in(net, "h1", "ip", "addr", "show", "dev", netns.HOST_IF)
    root_link = subprocess.run(["ip", "addr", "show", "dev", net.root_link], capture_output=True, text=True,
                               timeout=10, check=True).stdout
    assert "inet6" not in root_link and f"inet {net.root_address}/24" in root_link
    servers = [serve(net, h, tmp_path) for h in net.hosts]
    try:
        assert probe(net, "h2", "h1", "h3") == ["ok", "ok"]
        assert probe(net, "h2", "h1", port=CLOSED_PORT) == ["refused"]  # what a closed port looks like
        assert from_root(net.address("h1"))[0] == "ok"

        net.cut([["h1"], ["h2"]])
        assert probe(net, "h2", "h1", "h3") == ["timeout", "ok"]  # dropped, not refused
        assert probe(net, "h1", "h2", "h3") == ["timeout", "ok"]
        assert probe(net, "h2", "h1", port=CLOSED_PORT) == ["timeout"]  # not even a RST gets through
        assert [from_root(net.address(h))[0] for h in net.hosts] == ["ok", "ok", "ok"]
        assert len(our_rules(net)) == 2

        net.heal()
        assert probe(net, "h2", "h1") == ["ok"]
        assert our_rules(net) == []
        net.heal()  # twice is harmless
    finally:
        for proc in servers:
            processes.kill(proc)


@pytest.mark.integration
def test_a_majorities_ring_cuts_exactly_its_grudge(tmp_path: Path) -> None:
    reason = netns.available()
    if reason is not None:
        pytest.skip(reason)
    net = Network("ring", 4)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        net.create()
        servers = [serve(net, h, tmp_path) for h in net.hosts]
        shape = netns.majorities_ring(net.hosts)
        net.cut(shape)
        seen = netns.sees(shape, net.hosts)
        for host in net.hosts:
            others = [h for h in net.hosts if h != host]
            assert probe(net, host, *others) == ["ok" if o in seen[host] else "timeout" for o in others], host
        assert [from_root(net.address(h))[0] for h in net.hosts] == ["ok"] * 4
        net.heal()
        assert our_rules(net) == []
    finally:
        for proc in servers:
            processes.kill(proc)
        net.destroy()


@pytest.mark.integration
def test_degrade_delays_what_a_host_sends(net: Network, tmp_path: Path) -> None:
    reason = netns.available(netem=True)
    if reason is not None:
        pytest.skip(reason)
    server = serve(net, "h1", tmp_path)
    try:
        def connect_ms() -> float:
            times = [from_root(net.address("h1")) for _ in range(5)]
            assert all(outcome == "ok" for outcome, _ in times)
            return statistics.median(t for _, t in times) * 1000

        before = connect_ms()
        net.degrade("h1", delay_ms=100)
        during = connect_ms()
        net.restore("h1")
        after = connect_ms()
        print(f"connect from root: {before:.1f} ms, degraded {during:.1f} ms, restored {after:.1f} ms")
        assert during >= before + 90  # the SYN-ACK waits 100 ms in h1's netem
        assert after < before + 50
        assert "netem" not in run_in(net, "h1", "tc", "qdisc", "show", "dev", netns.HOST_IF)
    finally:
        processes.kill(server)


@pytest.mark.integration
def test_degrade_without_netem_says_so(net: Network) -> None:
    if netns.available(netem=True) is None:
        pytest.skip("this kernel has netem: test_degrade_delays_what_a_host_sends covers degrade")
    with pytest.raises(netns.NetemUnavailable):
        net.degrade("h1", delay_ms=100)
    assert "netem" not in run_in(net, "h1", "tc", "qdisc", "show")
    net.restore_all()


@pytest.mark.integration
def test_destroy_and_clear_stale_leave_nothing_of_ours() -> None:
    reason = netns.available()
    if reason is not None:
        pytest.skip(reason)
    net, orphan = Network("gone", 2), Network("gone", 2)
    try:
        net.create()
        assert len(our_names(net.prefix)) == 4  # host namespaces, the switch, the root veth
        net.destroy()
        net.destroy()
        assert our_names(net.prefix) == []
        orphan.create()  # as if its harness had died: only its names are left to go by
        removed = netns.clear_stale(orphan.prefix)
        assert sorted(removed) == sorted([orphan.root_link, orphan.switch, *map(orphan.namespace, orphan.hosts)])
        assert our_names(orphan.prefix) == []
    finally:
        net.destroy()
        orphan.destroy()


@pytest.mark.integration
def test_a_raftmq_node_runs_in_a_namespace_under_its_own_pid(net: Network, tmp_path: Path) -> None:
    address = net.address("h1")
    argv = [sys.executable, "-m", "raftmq", "node", "--listen", f"{address}:61613", "--in-memory"]
    out, err = tmp_path / "node.out", tmp_path / "node.err"
    proc = processes.spawn([*net.exec_prefix("h1"), *argv], out, err, cwd=tmp_path)
    try:
        processes.wait_for_line(proc, out, f"{READY}{address}:61613", 20, errors=err)
        # ip netns exec execs in place: the pid we hold is the node's, in h1's namespace.
        assert processes.process_argv(proc.pid) == tuple(argv)
        assert os.stat(f"/proc/{proc.pid}/ns/net").st_ino == os.stat(f"/run/netns/{net.namespace('h1')}").st_ino
        client = RawClient((address, 61613))
        assert client.connect().command == "CONNECTED"
        client.close()
    finally:
        processes.kill(proc)
