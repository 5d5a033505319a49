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

IPv6 is off on our interfaces (the rules are IPv4). `degrade` needs the kernel's netem qdisc
(CONFIG_NET_SCH_NETEM), which some kernels lack: `available(netem=True)` says so.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType

from raftmq.errors import RaftmqError

PREFIX = "rmq"
COMMENT = "raftmq-netns"
HOST_IF = "eth0"
ROOT_OCTET = 254
COMMAND_TIMEOUT = 10.0

Sides = Sequence[Sequence[str]]
Grudge = dict[str, frozenset[str]]  # host -> the hosts whose packets it drops


class NetnsError(RaftmqError):
    """A namespace, link, rule or qdisc could not be set up; names the command and its error."""


class NetemUnavailable(NetnsError):
    """The kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so `degrade` cannot work."""


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


# -- shapes: pure functions from hosts to sides or grudges -----------------------------------


def grudge(sides: Sides) -> Grudge:
    """Every host of a side drops every host of the other sides; hosts in no side drop nobody."""
    seen = [h for side in sides for h in side]
    if len(set(seen)) != len(seen):
        raise ValueError(f"a host is on two sides: {sides}")
    return {h: frozenset(seen) - frozenset(side) for side in sides for h in side if len(side) < len(seen)}


def halves(hosts: Sequence[str]) -> list[list[str]]:
    """Two sides, the first one the smaller when the count is odd."""
    if len(hosts) < 2:
        raise ValueError("halves needs two hosts or more")
    middle = len(hosts) // 2
    return [list(hosts[:middle]), list(hosts[middle:])]


def isolate(hosts: Sequence[str], one: str) -> list[list[str]]:
    if one not in hosts:
        raise ValueError(f"{one} is not one of {hosts}")
    return [[one], [h for h in hosts if h != one]]


def bridge(hosts: Sequence[str]) -> Grudge:
    """Two halves that see each other only through one host (the first of the second half),
    which sees everybody (Jepsen's bridge)."""
    if len(hosts) < 3:
        raise ValueError("a bridge needs three hosts or more")
    first, second = halves(hosts)
    middle = second[0]
    return {h: dropped - {middle} for h, dropped in grudge([first, second]).items() if h != middle}


def majorities_ring(hosts: Sequence[str]) -> Grudge:
    """Hosts in a ring, each seeing its neighbours up to distance d, the least d for which that
    is a majority: every host sees a majority, no two the same one (Jepsen's majorities ring).
    Symmetric, so a link is either up both ways or dropped both ways. Shuffle `hosts` first for
    a random ring; needs four hosts (with three, two hosts that see each other share a majority)."""
    n = len(hosts)
    if n < 4:
        raise ValueError("a majorities ring needs four hosts or more")
    reach = -(-(n // 2) // 2)  # ceil(minority / 2): 2 * reach + 1 >= n // 2 + 1
    return {h: frozenset(hosts[j] for j in range(n) if min((i - j) % n, (j - i) % n) > reach)
            for i, h in enumerate(hosts)}


def sees(shape: Grudge, hosts: Iterable[str]) -> dict[str, frozenset[str]]:
    """Who each host can talk to (itself included) under `shape`: neither drops the other."""
    everyone = list(hosts)
    return {h: frozenset(o for o in everyone if o not in shape.get(h, ()) and h not in shape.get(o, ()))
            for h in everyone}


# -- availability ---------------------------------------------------------------------------


@functools.cache
def available(netem: bool = False) -> str | None:
    """None when networks can be built here (and, with `netem`, degraded); else why not. Probes
    once per process in a throwaway namespace."""
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
    except (NetnsError, OSError, subprocess.TimeoutExpired) as e:
        return f"cannot use namespaces{' with netem' if netem else ''} here: {e}"
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
        self._degraded: set[str] = set()

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
        _run(["ip", "link", "del", self.root_link], check=False)
        for ns in [self.switch, *(self.namespace(h) for h in self.hosts)]:
            _run(["ip", "netns", "del", ns], check=False)
        self._rules, self._degraded, self._created = [], set(), False

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
                duplicate_pct: float = 0.0, reorder_pct: float = 0.0, corrupt_pct: float = 0.0) -> None:
        """netem on everything `host` sends (its veth's egress), replacing an earlier degrade."""
        if min(delay_ms, jitter_ms) < 0 or not all(0 <= p <= 100 for p in
                                                   (loss_pct, duplicate_pct, reorder_pct, corrupt_pct)):
            raise ValueError("delays are >= 0 ms and percentages in 0..100")
        if reorder_pct and not delay_ms:
            raise ValueError("netem reorders only delayed packets: reorder_pct needs delay_ms")
        args = ["delay", f"{delay_ms}ms", f"{jitter_ms}ms"]
        for word, pct in (("loss", loss_pct), ("duplicate", duplicate_pct), ("reorder", reorder_pct),
                          ("corrupt", corrupt_pct)):
            args += [word, f"{pct}%"] if pct else []
        result = self._in(host, "tc", "qdisc", "replace", "dev", HOST_IF, "root", "netem", *args, check=False)
        if result.returncode != 0:
            error = NetemUnavailable if "kind is unknown" in result.stderr else NetnsError
            raise error(f"tc netem in {host}: {result.stderr.strip()}")
        self._degraded.add(host)

    def restore(self, host: str) -> None:
        self._in(host, "tc", "qdisc", "del", "dev", HOST_IF, "root", check=False)
        self._degraded.discard(host)

    def restore_all(self) -> None:
        for host in sorted(self._degraded):
            self.restore(host)
