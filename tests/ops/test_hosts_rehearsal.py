"""A rehearsal of raftmq on nine hosts, as close to real ones as one machine allows.

Nine network namespaces with addresses of their own and host names (`/etc/netns/NS/hosts`, which
`ip netns exec` puts in place of /etc/hosts), three groups of three, TLS on the client, admin and
Raft ports (the Raft wire's password handshake inside TLS), cluster connections by host name over
TLS. Every host's files are rendered by `raftmq deploy render`, and every node is started the
way `deploy/systemd/raftmq@.service` starts it: the environment file, then `raftmq node`; a stop
is `raftmq hand-over`, then SIGTERM. A client in a tenth namespace connects by name, producing to
g1 and consuming from g3 under load, while every host is restarted in turn and then one host is
cut off from the others: no receipted message may be missing.

Needs root and network namespaces; skips with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import netns
from raftmq import processes
from raftmq.client.admin import AdminAccess
from raftmq.passwords import hash_password
from tests.helpers.tls_certs import make_group_certificates

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

GROUPS = ("g1", "g2", "g3")
NODES = [f"{group}-{member}" for group in GROUPS for member in ("a", "b", "c")]  # on hosts h1..h9
DOMAIN = "rehearsal.test"
CLIENT_PORT, RAFT_PORT, ADMIN_PORT = 61613, 62613, 8161
APP_PASS, CLUSTER_PASS, GROUP_PASS = "app-pass", "cluster-pass", "group-pass"
QUEUE = "/queue/rehearsal.orders"
READY_LINE = "raftmq node listening on "
START_SECONDS, READY_SECONDS, STOP_SECONDS = 60.0, 60.0, 30.0
SECRETS = {"RAFTMQ_GROUP_PASSWORD": GROUP_PASS, "RAFTMQ_CLUSTER_PASSWORD": CLUSTER_PASS}


def name(node: str) -> str:
    return f"{node}.{DOMAIN}"


def group_file(group: str) -> str:
    users = "".join(
        f'[[user]]\nname = "{user}"\npassword_hash = "{hash_password(password)}"\ngroups = ["{role}"]\n\n'
        for user, password, role in (("app", APP_PASS, "apps"), ("cluster", CLUSTER_PASS, "bridges"))
    )
    nodes = "".join(
        f'[[node]]\nid = "{node}"\nclient = "{name(node)}:{CLIENT_PORT}"\nraft = "{name(node)}:{RAFT_PORT}"\n'
        f'admin = "{name(node)}:{ADMIN_PORT}"\n\n'
        for node in NODES if node.startswith(f"{group}-")
    )
    return (
        f'[group]\nname = "{group}"\ndata_dir = "data/{group}"\npassword_env = "RAFTMQ_GROUP_PASSWORD"\n\n'
        f'[tls]\ncert_file = "tls/{group}.pem"\nkey_file = "tls/{group}.key"\nraft = true\n\n{users}'
        '[[acl]]\nqueue = "rehearsal.>"\nread = ["apps"]\nwrite = ["apps", "bridges"]\nadmin = ["apps", "bridges"]\n\n'
        '[[acl]]\nqueue = "$.raftmq.>"\nwrite = ["apps", "bridges"]\nadmin = ["bridges"]\n\n'
        f"{nodes}"
    )


TOPOLOGY = """[topology]
name = "rehearsal"

[[group]]
file = "g1.toml"

[[group]]
file = "g2.toml"

[[group]]
file = "g3.toml"

[[cluster_connection]]
name = "hosts"
groups = ["g1", "g2", "g3"]
links = "mesh"
message_load_balancing = "ON_DEMAND"
cluster_user = "cluster"
cluster_password_env = "RAFTMQ_CLUSTER_PASSWORD"
tls_ca_file = "tls/ca.pem"
"""


def environment_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, as systemd's EnvironmentFile= reads them (comments and blanks skipped)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value
    return pairs


class Host:
    def __init__(self, net: netns.Network, host: str, node: str, root: Path) -> None:
        self.net, self.host, self.node = net, host, node
        self.dir = root / node
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def env(self) -> dict[str, str]:
        (env_file,) = (self.dir / "etc").glob("*.env")
        return {"PATH": os.environ["PATH"], **environment_file(env_file)}

    @property
    def admin(self) -> str:
        return f"https://{self.net.address(self.host)}:{ADMIN_PORT}"

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.net.exec_prefix(self.host), sys.executable, "-m", "raftmq", *argv],
                              env=self.env, capture_output=True, text=True, timeout=60)

    @property
    def out(self) -> Path:
        return self.dir / f"node-{self.starts}.out"

    def start(self) -> None:
        """ExecStart: `raftmq node` with the environment file's settings."""
        self.starts += 1
        self.proc = processes.spawn([*self.net.exec_prefix(self.host), sys.executable, "-m", "raftmq", "node"],
                                    self.out, self.dir / "node.err", append=True, note=f"start {self.starts}",
                                    env=self.env)

    def wait_started(self) -> None:
        assert self.proc is not None
        processes.wait_for_line(self.proc, self.out, READY_LINE, START_SECONDS, errors=self.dir / "node.err")

    def stop(self) -> None:
        """ExecStop (`raftmq hand-over`), then systemd's SIGTERM; the node exits 0."""
        assert self.proc is not None
        handed = self.run("hand-over")
        assert handed.returncode == 0, handed.stderr
        processes.send_signal(self.proc.pid, signal.SIGTERM)
        assert self.proc.wait(STOP_SECONDS) == 0, (self.dir / "node.err").read_text()[-2000:]
        self.proc = None


@pytest.fixture
def network() -> Iterator[netns.Network]:
    if os.geteuid() != 0:
        pytest.skip("the hosts rehearsal needs root (network namespaces)")
    reason = netns.available()
    if reason is not None:
        pytest.skip(f"the hosts rehearsal needs network namespaces: {reason}")
    net = netns.Network("rh", len(NODES) + 1)
    etc = Path("/etc/netns")
    made: list[Path] = []
    try:
        net.create()
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{net.address(host)} {name(node)} {node}\n" for host, node in zip(net.hosts, NODES, strict=False)
        )
        for host in net.hosts:
            directory = etc / net.namespace(host)
            directory.mkdir(parents=True, exist_ok=False)
            made.append(directory)
            (directory / "hosts").write_text(hosts)
        yield net
    finally:
        net.destroy()
        for directory in made:
            shutil.rmtree(directory, ignore_errors=True)


def wait_ready(access: AdminAccess, hosts: list[Host], timeout: float = READY_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(hosts)
    last: dict[str, str] = {}
    while waiting and time.monotonic() < deadline:
        for host in list(waiting):
            try:
                code, body = access.request(host.admin, "/ready", 2)
            except OSError as exc:
                code, body = 0, str(exc).encode()
            if code == 200:
                waiting.remove(host)
            else:
                last[host.node] = body.decode(errors="replace")[:200]
        time.sleep(0.2)
    assert not waiting, f"not ready after {timeout} s: {', '.join(h.node for h in waiting)} ({last})"


def leader_of(access: AdminAccess, hosts: list[Host], group: str) -> Host:
    for host in hosts:
        if host.node.startswith(f"{group}-"):
            code, body = access.request(host.admin, "/status", 2)
            if code == 200 and json.loads(body)["role"] == "leader":
                return host
    raise AssertionError(f"no leader in {group}")


def test_nine_hosts_by_name_with_tls_survive_a_rolling_restart_and_a_partition_under_load(
        network: netns.Network, tmp_path: Path) -> None:
    net = network
    source = tmp_path / "source"
    (source / "tls").mkdir(parents=True)
    ca, certificates = make_group_certificates(source / "tls", {
        group: tuple(n for node in NODES if node.startswith(f"{group}-")
                     for n in (name(node), net.address(net.hosts[NODES.index(node)])))
        for group in GROUPS
    })
    (source / "topology.toml").write_text(TOPOLOGY)
    for group in GROUPS:
        (source / f"{group}.toml").write_text(group_file(group))
    hosts = [Host(net, host, node, tmp_path / "hosts") for host, node in zip(net.hosts, NODES, strict=False)]
    client_host = net.hosts[-1]
    access = AdminAccess(str(ca), "app", APP_PASS)
    load: subprocess.Popen[bytes] | None = None
    try:
        for host in hosts:  # what an operator does per host: render, then put the TLS files beside
            rendered = subprocess.run(
                [sys.executable, "-m", "raftmq", "deploy", "render", str(source / "topology.toml"), host.node,
                 "--out", str(host.dir / "etc"), "--config-dir", str(host.dir / "etc"),
                 "--state-dir", str(host.dir / "state"), "--secrets-from-env"],
                env={**os.environ, **SECRETS}, capture_output=True, text=True, timeout=60)
            assert rendered.returncode == 0, rendered.stderr
            assert f"systemd instance raftmq@{host.node}" in rendered.stdout
            assert "tls/ca.pem" in rendered.stdout and f"tls/{host.node[:2]}.key" in rendered.stdout
            shutil.copytree(source / "tls", host.dir / "etc" / "tls")
            assert (host.dir / "etc" / f"{host.node}.env").stat().st_mode & 0o777 == 0o600
        for host in hosts:
            host.start()
        for host in hosts:
            host.wait_started()
        wait_ready(access, hosts)

        stop_file, result = tmp_path / "stop", tmp_path / "load.json"
        urls = {group: "failover:(" + ",".join(f"stomp+ssl://{name(n)}:{CLIENT_PORT}" for n in NODES
                                                 if n.startswith(f"{group}-")) + ")" for group in GROUPS}
        client_env = {"PATH": os.environ["PATH"], "RAFTMQ_APP_PASS": APP_PASS, "PYTHONPATH": str(Path.cwd())}
        load = processes.spawn(
            [*net.exec_prefix(client_host), sys.executable, "-m", "tests.helpers.rehearsal_load",
             "--produce", urls["g1"], "--consume", urls["g3"], "--ca", str(ca), "--login", "app",
             "--passcode-env", "RAFTMQ_APP_PASS", "--queue", QUEUE, "--out", str(result),
             "--stop-file", str(stop_file)],
            tmp_path / "load.out", tmp_path / "load.err", env=client_env, cwd=Path.cwd())
        time.sleep(3)

        for host in hosts:  # a rolling restart, host by host, each back and ready before the next
            host.stop()
            host.start()
            host.wait_started()
            wait_ready(access, hosts)

        isolated = leader_of(access, hosts, "g2")  # one host cut off from every other (and the client)
        net.cut([[isolated.host], [h for h in net.hosts if h != isolated.host]])
        time.sleep(4)
        net.heal()
        wait_ready(access, hosts)
        time.sleep(2)

        stop_file.touch()
        assert load.wait(120) == 0, (tmp_path / "load.err").read_text()[-3000:]
        outcome = json.loads(result.read_text())
        receipted, received = outcome["receipted"], set(outcome["received"])
        missing = [ident for ident in receipted if ident not in received]
        assert len(receipted) > 300, outcome["errors"]
        assert not missing, f"{len(missing)} of {len(receipted)} receipted messages never arrived: {missing[:10]}"
        for host in hosts:
            assert "Traceback" not in (host.dir / "node.err").read_text(), host.node
    finally:
        if load is not None:
            processes.kill(load)
        for host in hosts:
            if host.proc is not None:
                processes.kill(host.proc)
