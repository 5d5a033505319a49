"""Hosts in network namespaces on one bridge, so each broker node of a chaos run has a network
of its own and faults hit real packets: partitions are iptables DROP rules in the hosts' own
namespaces, packet faults are `tc netem` on a host's interface. Needs root, iproute2, iptables.

Layout, for a run prefix P (`rmq` + name + 4 random hex digits) and subnet 10.99.K.0/24::

    root namespace  P-r  10.99.K.254 ─veth─ r  ┐
    namespace P-h1  eth0 10.99.K.1   ─veth─ h1 ├─ bridge br0 in namespace P-sw (the switch)
    namespace P-hN  eth0 10.99.K.N   ─veth─ hN ┘

The bridge lives in a switch namespace of its own rather than in the root namespace because,
with br_netfilter loaded (net.bridge.bridge-nf-call-iptables=1, as on our Debian host), frames
a bridge forwards go through the FORWARD chain of the bridge's namespace: the root one belongs
to the machine (Docker sets its policy to DROP) and could silently eat host-to-host traffic; the
switch namespace's chains are ours, and empty. The harness and its clients, in the root
namespace, reach every host from 10.99.K.254, which no partition drops.

`ip netns exec NS argv` enters NS and then execs argv in place, so the pid of
`Popen(exec_prefix(host) + argv)` is the program's own (tests/chaos/test_netns.py checks it):
the harness kills and SIGSTOPs nodes by pid as it does outside namespaces.

IPv6 is off on our interfaces (the rules are IPv4).

Packet faults (`degrade`) hit everything a host sends on its interface, to other hosts and to
the root namespace's harness and clients alike (as netem on the interface would), not its
loopback. Two mechanisms, netem first where the kernel has it (CONFIG_NET_SCH_NETEM; some
kernels lack it: `available(netem=True)` says so), else netfilter (`available(packet_faults=True)`):

- loss: `-m statistic --mode random` to an NFQUEUE whose packets a chaos.packet_queue process
  in the host's namespace drops (silently, as on a wire: a DROP rule would fail the send);
- duplication: TEE to the packet's own destination (a second copy on the wire);
- delay, jitter, reordering: NFQUEUE to that process, which holds packets and accepts them late,
  out of order with jitter or reorder. Both queues --queue-bypass: if the process dies, packets
  flow unharmed. It needs the runtime library libnetfilter_queue.so.1 (Debian's
  libnetfilter-queue1, called through ctypes);
- corruption: netem only.

Unlike netem, the netfilter faults do not touch ARP, and a delayed packet holds its socket's send
buffer until accepted. `degrade` returns a Degradation naming the mechanism it used.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import secrets
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from chaos import packet_queue
from chaos.grudges import Sides, grudge
from raftmq.errors import FaultUnavailable, RaftmqError

PREFIX = "rmq"
COMMENT = "raftmq-netns"
HOST_IF = "eth0"
ROOT_OCTET = 254
COMMAND_TIMEOUT = 10.0
NETEM, NETFILTER = "netem", "netfilter"  # the mechanisms of `degrade`
FAULT_CHAIN = "RAFTMQ-FAULTS"  # ours, in the mangle table of a degraded host's namespace
FAULT_JUMP = ("-o", HOST_IF, "-m", "comment", "--comment", COMMENT, "-j", FAULT_CHAIN)
QUEUE_NUM, DROP_QUEUE_NUM = 7, 8  # NFQUEUE numbers are per namespace: one queue process per degraded host
QUEUE_MAX_LEN = 1000  # packets a queue process holds at most (netem's default limit)
QUEUE_READY_TIMEOUT = 10.0
QUEUE_STOP_TIMEOUT = 5.0



class NetnsError(RaftmqError):
    """A namespace, link, rule or qdisc could not be set up; names the command and its error."""


class NetemUnavailable(NetnsError, FaultUnavailable):
    """The kernel has no netem qdisc (CONFIG_NET_SCH_NETEM) and `degrade` was asked for netem,
    or for what only netem does (corruption)."""


@dataclass(frozen=True)
class Degradation:
    """What `degrade` set up on a host: the mechanism (NETEM or NETFILTER), the pid of its
    chaos.packet_queue process (netfilter with a delay, jitter or loss; else None), and the commands
    (tc) or iptables rules (mangle table, chain first) that do it."""

    host: str
    mechanism: str
    queue_pid: int | None
    rules: tuple[tuple[str, ...], ...]


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if check and result.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result


def _no_ipv6(namespace: str | None, key: str = "default") -> None:
    """Turn IPv6 off (for new interfaces, or one): the partitions are IPv4 rules, and a node
    reachable over a link-local IPv6 address would slip through them. Fails harmlessly on a
    kernel without IPv6, which needs no such care."""
    enter = ["ip", "netns", "exec", namespace] if namespace else []
    _run([*enter, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.disable_ipv6=1"], check=False)


# -- availability ---------------------------------------------------------------------------


@functools.cache
def available(netem: bool = False, packet_faults: bool = False) -> str | None:
    """None when networks can be built here (with `netem`, degraded with netem; with
    `packet_faults`, degraded at all: by netem, or else by iptables statistic, TEE and NFQUEUE
    with libnetfilter_queue.so.1); else why not. Probes once per process in a throwaway
    namespace."""
    if packet_faults:
        reasons = packet_fault_mechanisms()
        return None if None in reasons.values() else "; ".join(f"{m}: {r}" for m, r in reasons.items())
    return _probe(netem=netem)


def packet_fault_mechanisms() -> dict[str, str | None]:
    """For each mechanism of `degrade` (NETEM, NETFILTER), None when it works here, else why not."""
    netfilter = _probe(netfilter=True)
    if netfilter is None:
        netfilter = packet_queue.unavailable()  # chaos.packet_queue's library, libnetfilter_queue.so.1
    return {NETEM: available(netem=True), NETFILTER: netfilter}


@functools.cache
def _probe(netem: bool = False, netfilter: bool = False) -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("iptables", "iptables"), ("sysctl", "procps")):
        if shutil.which(tool) is None:
            return f"no {tool} (apt-get install -y {package})"
    probe = f"{PREFIX}probe{secrets.token_hex(2)}"
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "netns", "exec", probe, "iptables", "-w", "-S", "INPUT"])
        if netem:
            _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
        if netfilter:
            mangle = ["ip", "netns", "exec", probe, "iptables", "-w", "-t", "mangle", "-A", "OUTPUT", "-o", "lo"]
            _run([*mangle, *_random(50), "-j", "DROP"])
            _run([*mangle, "-j", "TEE", "--gateway", "127.0.0.1"])
            _run([*mangle, "-j", "NFQUEUE", "--queue-num", str(QUEUE_NUM), "--queue-bypass"])
    except (NetnsError, OSError, subprocess.TimeoutExpired) as e:
        with_what = " with netem" if netem else " with statistic, TEE and NFQUEUE" if netfilter else ""
        return f"cannot use namespaces{with_what} here: {e}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def clear_stale(prefix: str = PREFIX) -> list[str]:
    """Delete every namespace and root-namespace link named with `prefix` (what a harness that
    died left behind); the names removed. Only while no live run uses that prefix."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"only names starting {PREFIX!r} are ours")
    removed = []
    for line in _run(["ip", "-o", "link", "show"]).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        if name.startswith(prefix) and _run(["ip", "link", "del", name], check=False).returncode == 0:
            removed.append(name)
    for line in _run(["ip", "netns", "list"]).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix) and _run(["ip", "netns", "del", name], check=False).returncode == 0:
            removed.append(name)
    return removed


# -- the network ----------------------------------------------------------------------------


class Network:
    """`count` hosts h1..hN, each a namespace at 10.99.K.i/24; K is `subnet_index`, or (None) a
    subnet the root namespace has no route to yet, picked at `create`."""

    def __init__(self, name: str, count: int, subnet_index: int | None = None) -> None:
        # Interface names have 15 characters at most: P-r is 3 + 5 + 4 + 2.
        if not re.fullmatch(r"[a-z0-9]{1,5}", name):
            raise ValueError(f"a network name is 1 to 5 of a-z0-9, not {name!r}")
        if not 1 <= count < ROOT_OCTET or (subnet_index is not None and not 0 <= subnet_index <= 255):
            raise ValueError(f"bad count {count} or subnet index {subnet_index}")
        self.prefix = f"{PREFIX}{name}{secrets.token_hex(2)}"
        self.switch, self.root_link = f"{self.prefix}-sw", f"{self.prefix}-r"
        self.hosts = [f"h{i}" for i in range(1, count + 1)]
        self.subnet_index = subnet_index
        self._created = False
        self._rules: list[tuple[str, list[str]]] = []
        self._degraded: dict[str, Degradation] = {}
        self._queues: dict[str, subprocess.Popen[bytes]] = {}
        self.queue_reports: dict[str, str] = {}  # host -> the last line of its last queue process

    def namespace(self, host: str) -> str:
        if host not in self.hosts:
            raise ValueError(f"no host {host!r} (hosts: {', '.join(self.hosts)})")
        return f"{self.prefix}-{host}"

    def _octets(self) -> str:
        if self.subnet_index is None:
            raise NetnsError("the network has no subnet before create()")
        return f"10.99.{self.subnet_index}"

    def address(self, host: str) -> str:
        self.namespace(host)
        return f"{self._octets()}.{self.hosts.index(host) + 1}"

    @property
    def root_address(self) -> str:
        return f"{self._octets()}.{ROOT_OCTET}"

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host)]

    def _in(self, host: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([*self.exec_prefix(host), *argv], check=check)

    def create(self) -> None:
        if self._created:
            return
        routed = [ipaddress.ip_network(line.split()[0], strict=False)
                  for line in _run(["ip", "-4", "route", "show"]).stdout.splitlines()
                  if line.split() and line.split()[0] != "default"]

        def free(k: int) -> bool:
            return not any(ipaddress.ip_network(f"10.99.{k}.0/24").overlaps(net) for net in routed)

        if self.subnet_index is None:
            # From a random start, so two runs at once are unlikely to pick the same subnet.
            start = secrets.randbelow(256)
            self.subnet_index = next(((start + k) % 256 for k in range(256) if free((start + k) % 256)), None)
            if self.subnet_index is None:
                raise NetnsError("no free subnet in 10.99.0.0/16")
        elif not free(self.subnet_index):
            raise NetnsError(f"the root namespace already routes into {self._octets()}.0/24")
        self._created = True  # from here on destroy() removes whatever got built
        try:
            sw = self.switch
            _run(["ip", "netns", "add", sw])
            _no_ipv6(sw)
            _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge", "stp_state", "0"])
            _run(["ip", "-n", sw, "link", "set", "br0", "up"])
            _run(["ip", "link", "add", self.root_link, "type", "veth", "peer", "name", "r", "netns", sw])
            _run(["ip", "addr", "add", f"{self.root_address}/24", "dev", self.root_link])
            _no_ipv6(None, self.root_link)
            _run(["ip", "link", "set", self.root_link, "up"])
            _run(["ip", "-n", sw, "link", "set", "r", "master", "br0", "up"])
            for host in self.hosts:
                ns = self.namespace(host)
                _run(["ip", "netns", "add", ns])
                _no_ipv6(ns)
                # Both ends are made in their namespaces: no name ever appears in the root one.
                _run(["ip", "link", "add", "name", HOST_IF, "netns", ns, "type", "veth", "peer", "name", host,
                      "netns", sw])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", HOST_IF])
                _run(["ip", "-n", ns, "link", "set", HOST_IF, "up"])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
                _run(["ip", "-n", sw, "link", "set", host, "master", "br0", "up"])
        except BaseException:
            self.destroy()
            raise

    def destroy(self) -> None:
        """Delete what `create` made (namespaces, veths, bridge); idempotent. Kill the processes
        in the namespaces first: a namespace outlives its name while a process is inside."""
        if not self._created:
            return
        try:
            self.restore_all()  # stops our queue processes, by pid
        finally:
            _run(["ip", "link", "del", self.root_link], check=False)
            for ns in [self.switch, *(self.namespace(h) for h in self.hosts)]:
                _run(["ip", "netns", "del", ns], check=False)
            self._rules, self._degraded, self._created = [], {}, False

    def __enter__(self) -> Network:
        self.create()
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.destroy()

    # -- partitions --------------------------------------------------------------------------

    def cut(self, shape: Sides | Mapping[str, Iterable[str]]) -> None:
        """Drop packets per `shape`: sides (each host drops every host of the other sides) or a
        grudge {host: hosts it drops}. INPUT rules in the dropping host's namespace: the packets
        are lost, not refused. The root namespace is never dropped. Adds to any earlier cut."""
        drops = grudge(shape) if not isinstance(shape, Mapping) else shape
        for host, dropped in sorted(drops.items()):
            for other in sorted(set(dropped) - {host}):  # dropping its own address would cut its loopback
                rule = ["INPUT", "-s", f"{self.address(other)}/32", "-m", "comment", "--comment", COMMENT,
                        "-j", "DROP"]
                result = self._in(host, "iptables", "-w", "-I", *rule, check=False)
                if result.returncode != 0:
                    self.heal()
                    raise NetnsError(f"iptables in {host} refused a rule: {result.stderr.strip()}")
                self._rules.append((host, rule))

    def heal(self) -> None:
        """Remove exactly the rules `cut` added."""
        for host, rule in self._rules:
            self._in(host, "iptables", "-w", "-D", *rule, check=False)
        self._rules = []

    # -- packet faults -----------------------------------------------------------------------

    def degrade(self, host: str, delay_ms: int = 0, jitter_ms: int = 0, loss_pct: float = 0.0,
                duplicate_pct: float = 0.0, reorder_pct: float = 0.0, corrupt_pct: float = 0.0,
                mechanism: str | None = None) -> Degradation:
        """Packet faults on everything `host` sends on its interface (to the other hosts and to
        the root namespace's harness and clients alike; not its loopback), replacing an earlier
        degrade of `host`. `mechanism` is NETEM, NETFILTER or (None) netem where the kernel has
        it, else netfilter; corruption only netem does (NetemUnavailable without it). Returns
        what was set up, which `degradations` also keeps until `restore`."""
        if min(delay_ms, jitter_ms) < 0 or not all(0 <= p <= 100 for p in
                                                   (loss_pct, duplicate_pct, reorder_pct, corrupt_pct)):
            raise ValueError("delays are >= 0 ms and percentages in 0..100")
        if reorder_pct and not delay_ms:
            raise ValueError("reordering sends some packets ahead of delayed ones: reorder_pct needs delay_ms")
        if mechanism not in (None, NETEM, NETFILTER):
            raise ValueError(f"mechanism is {NETEM!r}, {NETFILTER!r} or None, not {mechanism!r}")
        self.namespace(host)
        if mechanism is None:
            mechanism = NETEM if available(netem=True) is None else NETFILTER
        if mechanism == NETFILTER and corrupt_pct:
            raise NetemUnavailable(f"corrupt_pct needs netem, which this kernel lacks ({available(netem=True)})")
        self.restore(host)
        if mechanism == NETEM:
            degradation = self._degrade_netem(host, delay_ms, jitter_ms, loss_pct, duplicate_pct, reorder_pct,
                                              corrupt_pct)
        else:
            degradation = self._degrade_netfilter(host, delay_ms, jitter_ms, loss_pct, duplicate_pct, reorder_pct)
        self._degraded[host] = degradation
        return degradation

    def _degrade_netem(self, host: str, delay_ms: int, jitter_ms: int, loss_pct: float, duplicate_pct: float,
                       reorder_pct: float, corrupt_pct: float) -> Degradation:
        args = ["delay", f"{delay_ms}ms", f"{jitter_ms}ms"]
        for word, pct in (("loss", loss_pct), ("duplicate", duplicate_pct), ("reorder", reorder_pct),
                          ("corrupt", corrupt_pct)):
            args += [word, f"{pct}%"] if pct else []
        result = self._in(host, "tc", "qdisc", "replace", "dev", HOST_IF, "root", "netem", *args, check=False)
        if result.returncode != 0:
            error = NetemUnavailable if "kind is unknown" in result.stderr else NetnsError
            raise error(f"tc netem in {host}: {result.stderr.strip()}")
        return Degradation(host, NETEM, None, (("tc", "qdisc", "replace", "dev", HOST_IF, "root", "netem", *args),))

    def _degrade_netfilter(self, host: str, delay_ms: int, jitter_ms: int, loss_pct: float, duplicate_pct: float,
                           reorder_pct: float) -> Degradation:
        """Rules in the mangle table's OUTPUT chain of `host`'s namespace, for packets out of its
        interface, jumping to a chain of ours: a `statistic` random share to the drop queue
        (loss), then a TEE per destination on the subnet (duplication: the clone is routed to
        the packet's own destination, so a second copy goes on the wire; it passes the chain
        again but is not teed twice), then the rest to the delay queue (delay, jitter,
        reordering). A chaos.packet_queue process in the namespace drops what the one queue
        gives it and holds what the other does. Both with --queue-bypass: if that process dies,
        packets go on rather than nowhere. Loss goes through the queue, not a DROP rule, because
        a packet dropped in OUTPUT fails its sender's send (EPERM), which a lost packet does not."""
        rules: list[tuple[list[str], list[str]]] = []  # (match, target)
        if loss_pct:
            rules.append((_random(loss_pct), ["-j", "NFQUEUE", "--queue-num", str(DROP_QUEUE_NUM), "--queue-bypass"]))
        if duplicate_pct:
            for address in [*(self.address(h) for h in self.hosts if h != host), self.root_address]:
                rules.append((["-d", f"{address}/32", *_random(duplicate_pct)], ["-j", "TEE", "--gateway", address]))
        queue: subprocess.Popen[bytes] | None = None
        try:
            delay = bool(delay_ms or jitter_ms)
            if delay or loss_pct:
                queue = self._start_queue(host, delay_ms, jitter_ms, reorder_pct, delay, bool(loss_pct))
            if delay:
                rules.append(([], ["-j", "NFQUEUE", "--queue-num", str(QUEUE_NUM), "--queue-bypass"]))
            self._in(host, "iptables", "-w", "-t", "mangle", "-N", FAULT_CHAIN)
            tagged = [[FAULT_CHAIN, *match, "-m", "comment", "--comment", COMMENT, *target] for match, target in rules]
            tagged.append(["OUTPUT", *FAULT_JUMP])
            for rule in tagged:
                self._in(host, "iptables", "-w", "-t", "mangle", "-A", *rule)
        except BaseException:
            self._undo_netfilter(host)
            raise
        return Degradation(host, NETFILTER, queue.pid if queue else None, tuple(tuple(r) for r in tagged))

    def _start_queue(self, host: str, delay_ms: int, jitter_ms: int, reorder_pct: float, delay: bool,
                     drop: bool) -> subprocess.Popen[bytes]:
        """chaos.packet_queue in `host`'s namespace, once it says it is bound to its queues."""
        argv = [*self.exec_prefix(host), sys.executable, "-m", "chaos.packet_queue",
                *(["--queue", str(QUEUE_NUM)] if delay else []),
                *(["--drop-queue", str(DROP_QUEUE_NUM)] if drop else []),
                "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms), "--reorder-pct", str(reorder_pct),
                "--max-len", str(QUEUE_MAX_LEN)]
        env = dict(os.environ)  # whatever the harness's cwd, `-m chaos.packet_queue` finds this checkout's
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parent.parent),
                                                        env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env)
        self._queues[host] = proc
        assert proc.stdout is not None
        output, deadline = b"", time.monotonic() + QUEUE_READY_TIMEOUT
        while b"ready queue" not in output:
            left, chunk = deadline - time.monotonic(), None
            if left > 0 and select.select([proc.stdout], [], [], min(left, 0.5))[0]:
                chunk = os.read(proc.stdout.fileno(), 4096)
                output += chunk
            if left <= 0 or chunk == b"":  # too slow, or it exited
                self._stop_queue(host)
                raise NetnsError(f"chaos.packet_queue in {host} did not start: "
                                 f"{output.decode(errors='replace').strip() or 'no output'}")
        return proc

    def _stop_queue(self, host: str) -> None:
        """SIGTERM by pid (the queue accepts the packets it holds and unbinds), SIGKILL if it
        lingers; keeps its last words in `queue_reports`."""
        proc = self._queues.pop(host, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=QUEUE_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=COMMAND_TIMEOUT)
        if proc.stdout is not None:
            words = proc.stdout.read().decode(errors="replace").strip().splitlines()
            proc.stdout.close()
            self.queue_reports[host] = words[-1] if words else f"exit {proc.returncode}"

    def _undo_netfilter(self, host: str) -> None:
        self._in(host, "iptables", "-w", "-t", "mangle", "-D", "OUTPUT", *FAULT_JUMP, check=False)
        self._in(host, "iptables", "-w", "-t", "mangle", "-F", FAULT_CHAIN, check=False)
        self._in(host, "iptables", "-w", "-t", "mangle", "-X", FAULT_CHAIN, check=False)
        self._stop_queue(host)

    @property
    def degradations(self) -> Mapping[str, Degradation]:
        return dict(self._degraded)

    def restore(self, host: str) -> None:
        """Undo `degrade` of `host` whatever its mechanism: netem qdisc, our rules and chain, and
        the queue process (stopped by pid, after the rules that feed it are gone)."""
        self._in(host, "tc", "qdisc", "del", "dev", HOST_IF, "root", check=False)
        self._undo_netfilter(host)
        self._degraded.pop(host, None)

    def restore_all(self) -> None:
        for host in sorted({*self._degraded, *self._queues}):
            self.restore(host)


def _random(pct: float) -> list[str]:
    """An iptables match for a random `pct` percent of packets (none needed for all of them)."""
    return [] if pct >= 100 else ["-m", "statistic", "--mode", "random", "--probability", f"{pct / 100:.6f}"]
