"""chaos.netns: the partition shapes (pure), and, as root, real namespaces on a bridge where a
cut drops packets (a connect times out, it is not refused) while the root namespace still
reaches every host, heal and destroy leave nothing of ours behind, degrade delays, drops,
duplicates and reorders real packets (netem where the kernel has it, else iptables and a
chaos.packet_queue process: each mechanism is tested where it works), and a real raftmq node runs
inside a namespace under its own pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import grudges, netns, packet_queue
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

# Connect N times to an address, print the median time in ms.
CONNECT_MS = """import socket, statistics, sys, time
times = []
for _ in range(int(sys.argv[3])):
    start = time.monotonic(); socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()
    times.append((time.monotonic() - start) * 1000)
print(statistics.median(times))
"""
# Receive datagrams until none came for IDLE seconds (or 2000 came, or 30 s passed); print the
# payloads (sequence numbers) in arrival order, as JSON.
UDP_RECEIVER = """import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(float(sys.argv[3])); print("ready", flush=True)
got, end = [], time.monotonic() + 30
while len(got) < 2000 and time.monotonic() < end:
    try: got.append(int(s.recv(64)))
    except TimeoutError:
        if got: break
print(json.dumps(got), flush=True)
"""
# Send datagrams 0..N-1, one every INTERVAL seconds.
UDP_SENDER = """import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    s.sendto(str(i).encode(), (sys.argv[1], int(sys.argv[2]))); time.sleep(float(sys.argv[4]))
"""
UDP_PORT = 7002

H = [f"h{i}" for i in range(1, 10)]


# -- shapes ---------------------------------------------------------------------------------


def test_grudge_of_sides_drops_across_sides_only() -> None:
    assert grudges.grudge([["h1"], ["h2", "h3"]]) == {
        "h1": {"h2", "h3"}, "h2": {"h1"}, "h3": {"h1"}}
    assert grudges.grudge([["h1"], ["h2"]]) == {"h1": {"h2"}, "h2": {"h1"}}  # h3 (in no side) drops nobody
    assert grudges.grudge([["h1", "h2"]]) == {}
    with pytest.raises(ValueError):
        grudges.grudge([["h1"], ["h1", "h2"]])


def test_halves_and_isolate() -> None:
    assert grudges.halves(H[:5]) == [["h1", "h2"], ["h3", "h4", "h5"]]
    assert grudges.halves(H[:2]) == [["h1"], ["h2"]]
    assert grudges.isolate(H[:3], "h2") == [["h2"], ["h1", "h3"]]
    with pytest.raises(ValueError):
        grudges.halves(H[:1])
    with pytest.raises(ValueError):
        grudges.isolate(H[:3], "h9")


def test_bridge_joins_two_halves_through_one_host() -> None:
    hosts = H[:5]
    seen = grudges.sees(grudges.bridge(hosts), hosts)
    assert seen["h3"] == set(hosts)
    assert seen["h1"] == seen["h2"] == {"h1", "h2", "h3"}
    assert seen["h4"] == seen["h5"] == {"h3", "h4", "h5"}
    with pytest.raises(ValueError):
        grudges.bridge(H[:2])


@pytest.mark.parametrize("n", range(4, 10))
def test_majorities_ring_gives_each_host_its_own_majority(n: int) -> None:
    hosts = H[:n]
    shape = grudges.majorities_ring(hosts)
    seen = grudges.sees(shape, hosts)
    assert all(len(s) > n // 2 and h in s for h, s in seen.items())
    assert len(set(seen.values())) == n  # no two hosts see the same majority
    assert all(h in shape[o] for h in hosts for o in shape[h])  # symmetric: links die both ways
    assert all(shape[h] for h in hosts)  # and it is a partition: everyone misses somebody


def test_majorities_ring_needs_four_hosts() -> None:
    with pytest.raises(ValueError):
        grudges.majorities_ring(H[:3])


def test_names_stay_short_and_ours() -> None:
    with pytest.raises(ValueError):
        Network("toolong", 3)
    net = Network("chaos", 3)
    assert net.prefix.startswith("rmqchaos") and len(net.root_link) <= 15
    assert net.exec_prefix("h2") == ["ip", "netns", "exec", f"{net.prefix}-h2"]
    with pytest.raises(ValueError):
        netns.clear_stale("other")


def test_the_queue_binding_reads_a_packet_id_in_network_byte_order() -> None:
    # struct nfqnl_msg_packet_hdr, packed: __be32 packet_id, __be16 hw_protocol, __u8 hook (7 bytes)
    assert packet_queue.PACKET_HEADER.size == 7
    assert packet_queue.packet_id(bytes.fromhex("0000012c" "0800" "03")) == 300
    assert packet_queue.packet_id(bytes.fromhex("fffffffe" "86dd" "04") + b"trailing") == 0xFFFFFFFE
    with pytest.raises(ValueError):
        packet_queue.packet_id(b"\x00" * 6)


def test_a_missing_queue_library_is_named_and_skips_netfilter(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(packet_queue.ctypes.util, "find_library", lambda name: None)  # it runs ldconfig -p
    with pytest.raises(packet_queue.LibraryMissing, match="install Debian's libnetfilter-queue1"):
        packet_queue.load_library("netfilter_queue_absent")
    reason = "no libnetfilter_queue.so.1: install Debian's libnetfilter-queue1"
    monkeypatch.setattr(packet_queue, "unavailable", lambda: reason)
    monkeypatch.setattr(netns, "_probe", lambda netem=False, netfilter=False: None)  # as if root with iptables
    monkeypatch.setattr(netns, "available", lambda netem=False, packet_faults=False: None)
    assert netns.packet_fault_mechanisms()[netns.NETFILTER] == reason  # the mechanism fixture skips with it
    assert packet_queue.main(["--queue", "7"]) == 1
    assert reason in capsys.readouterr().err


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
        shape = grudges.majorities_ring(net.hosts)
        net.cut(shape)
        seen = grudges.sees(shape, net.hosts)
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


@pytest.fixture(params=[netns.NETEM, netns.NETFILTER])
def mechanism(request: pytest.FixtureRequest) -> str:
    chosen = str(request.param)
    reason = netns.packet_fault_mechanisms()[chosen]
    if reason is not None:
        pytest.skip(reason)
    return chosen


def nothing_degraded(net: Network, *pids: int | None) -> None:
    """No netem qdisc, rule or chain of ours is left in any host, and the queue processes are gone."""
    for host in net.hosts:
        assert "netem" not in run_in(net, host, "tc", "qdisc", "show")
        mangle = run_in(net, host, "iptables", "-w", "-t", "mangle", "-S")
        assert netns.COMMENT not in mangle and netns.FAULT_CHAIN not in mangle, mangle
    for pid in pids:
        assert pid is None or not Path(f"/proc/{pid}").exists()
    assert net.degradations == {}


def connect_ms(net: Network, host: str | None, target: str) -> float:
    """The median time of 5 TCP connects to `target` from `host`'s namespace (None: the root one)."""
    if host is not None:
        return float(run_in(net, host, sys.executable, "-c", CONNECT_MS, net.address(target), str(PORT), "5"))
    times = [from_root(net.address(target)) for _ in range(5)]
    assert all(outcome == "ok" for outcome, _ in times)
    return statistics.median(t for _, t in times) * 1000


def udp(net: Network, sender: str, receiver: str, count: int, interval: float, tmp_path: Path) -> list[int]:
    """Send datagrams 0..count-1 from `sender` to `receiver`; the ones received, in arrival order."""
    out = tmp_path / "udp.out"
    argv = [sys.executable, "-c", UDP_RECEIVER, net.address(receiver), str(UDP_PORT), "1.0"]
    proc = processes.spawn([*net.exec_prefix(receiver), *argv], out)
    try:
        processes.wait_for_line(proc, out, "ready", 10)
        run_in(net, sender, sys.executable, "-c", UDP_SENDER, net.address(receiver), str(UDP_PORT), str(count),
               str(interval))
        proc.wait(timeout=40)
        got: list[int] = json.loads(out.read_text().splitlines()[-1])
        return got
    finally:
        processes.kill(proc)


@pytest.mark.integration
def test_degrade_delays_what_a_host_sends(net: Network, mechanism: str, tmp_path: Path) -> None:
    server = serve(net, "h1", tmp_path)
    pid = None
    try:
        before = {src: connect_ms(net, src, "h1") for src in (None, "h2")}
        degradation = net.degrade("h1", delay_ms=100, mechanism=mechanism)
        assert degradation.mechanism == mechanism and net.degradations == {"h1": degradation}
        pid = degradation.queue_pid
        assert (pid is not None) == (mechanism == netns.NETFILTER)
        during = {src: connect_ms(net, src, "h1") for src in (None, "h2")}
        net.restore("h1")
        after = {src: connect_ms(net, src, "h1") for src in (None, "h2")}
        for src in (None, "h2"):
            print(f"{mechanism}: connect from {src or 'root'} to h1: {before[src]:.2f} ms, "
                  f"degraded {during[src]:.2f} ms, restored {after[src]:.2f} ms")
            assert during[src] >= before[src] + 90  # the SYN-ACK waits 100 ms on its way out of h1
            assert after[src] < before[src] + 50
        nothing_degraded(net, pid)
        net.restore("h1")  # twice is harmless
    finally:
        processes.kill(server)


@pytest.mark.integration
def test_degrade_loses_packets(net: Network, mechanism: str, tmp_path: Path) -> None:
    assert len(udp(net, "h1", "h2", 200, 0.001, tmp_path)) == 200
    net.degrade("h1", loss_pct=50, mechanism=mechanism)
    got = udp(net, "h1", "h2", 200, 0.001, tmp_path)
    print(f"{mechanism}: 50% loss: {len(got)} of 200 datagrams arrived")
    assert 40 <= len(got) <= 160 and len(set(got)) == len(got)  # binomial(200, 0.5): 100 +- 7
    net.restore_all()
    assert len(udp(net, "h1", "h2", 200, 0.001, tmp_path)) == 200
    nothing_degraded(net)


@pytest.mark.integration
def test_degrade_duplicates_packets(net: Network, mechanism: str, tmp_path: Path) -> None:
    net.degrade("h1", duplicate_pct=100, mechanism=mechanism)
    got = udp(net, "h1", "h2", 20, 0.005, tmp_path)
    print(f"{mechanism}: 100% duplication: {len(got)} datagrams for 20 sent")
    assert sorted(got) == sorted([*range(20), *range(20)])  # each one twice, on the wire twice
    net.restore("h1")
    assert sorted(udp(net, "h1", "h2", 20, 0.005, tmp_path)) == list(range(20))
    nothing_degraded(net)


@pytest.mark.integration
def test_degrade_reorders_packets(net: Network, mechanism: str, tmp_path: Path) -> None:
    assert udp(net, "h1", "h2", 60, 0.002, tmp_path) == list(range(60))
    degradation = net.degrade("h1", delay_ms=30, jitter_ms=20, reorder_pct=25, mechanism=mechanism)
    got = udp(net, "h1", "h2", 60, 0.002, tmp_path)
    inversions = sum(1 for a, b in zip(got, got[1:]) if a > b)
    print(f"{mechanism}: delay 30 ms +- 20, reorder 25%: {inversions} inversions among {len(got)} datagrams")
    assert sorted(got) == list(range(60)) and inversions >= 1
    net.restore_all()
    if mechanism == netns.NETFILTER:
        assert net.queue_reports["h1"].startswith("packets=")
    nothing_degraded(net, degradation.queue_pid)


@pytest.mark.integration
def test_degrade_netem_or_corruption_without_netem_says_so(net: Network) -> None:
    reason = netns.available(netem=True)
    if reason is None:
        pytest.skip("this kernel has netem: netem and corruption work")
    with pytest.raises(netns.NetemUnavailable):
        net.degrade("h1", delay_ms=100, mechanism=netns.NETEM)
    with pytest.raises(netns.NetemUnavailable):
        net.degrade("h1", corrupt_pct=1)  # only netem corrupts
    with pytest.raises(ValueError):
        net.degrade("h1", reorder_pct=10)  # reordering needs a delay to overtake
    nothing_degraded(net)


@pytest.mark.integration
def test_a_dead_queue_process_does_not_blackhole_a_host(tmp_path: Path) -> None:
    reason = netns.packet_fault_mechanisms()[netns.NETFILTER]
    if reason is not None:
        pytest.skip(reason)
    net = Network("q", 2)
    server = None
    try:
        net.create()
        server = serve(net, "h1", tmp_path)
        before = connect_ms(net, None, "h1")
        pid = net.degrade("h1", delay_ms=100, mechanism=netns.NETFILTER).queue_pid
        other = net.degrade("h2", delay_ms=100, mechanism=netns.NETFILTER).queue_pid
        assert pid is not None and other is not None
        assert connect_ms(net, None, "h1") >= before + 90
        os.kill(pid, signal.SIGKILL)  # --queue-bypass: packets go undelayed, not nowhere
        for _ in range(100):  # until it is dead (a zombie: Network reaps it in restore)
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break
            time.sleep(0.05)
        dead = connect_ms(net, None, "h1")
        print(f"connect from root to h1: {before:.2f} ms; with its queue process killed {dead:.2f} ms")
        assert dead < before + 50
        net.restore("h1")
        assert not Path(f"/proc/{pid}").exists()
        processes.kill(server)
        server = None
        net.destroy()  # stops h2's queue process before deleting the namespaces
        assert not Path(f"/proc/{other}").exists() and our_names(net.prefix) == []
    finally:
        if server is not None:
            processes.kill(server)
        net.destroy()


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
    argv = [sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--listen", f"{address}:61613", "--in-memory"]
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
