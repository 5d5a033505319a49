"""The worked examples of deploy/examples/, rendered as their READMEs say, so that they cannot
rot: deploy/examples/three-hosts-tls (one group on three hosts, TLS on every port)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from raftmq.ops.deploy_cli import deploy_command
from tests.helpers.tls_certs import make_group_certificates

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "three-hosts-tls"
HOSTS = ("host1", "host2", "host3")
TLS_FILES = ["/etc/raftmq/tls/server.pem", "/etc/raftmq/tls/server.key"]


def render(node: str) -> Result:
    """Step 1 of the README, run in the working directory."""
    return CliRunner().invoke(deploy_command, ["render", str(EXAMPLE / "group.toml"), node,
                                               "--out", f"rendered/{node}"])


def listed(listing: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in listing.splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("node", HOSTS)
def test_each_host_renders_with_its_tls_files_listed_and_no_loopback_warning(
        node: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = render(node)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no warning: the addresses are the hosts' names
    rendered = tmp_path / "rendered" / node
    assert sorted(p.name for p in rendered.iterdir()) == ["group.toml", f"{node}.env", f"{node}.to-place.txt"]
    assert listed((rendered / f"{node}.to-place.txt").read_text()) == TLS_FILES
    for path in TLS_FILES:
        assert f"  {path}  (group.toml tls." in result.stdout
    assert (rendered / f"{node}.env").read_text().splitlines()[1:] == [
        "RAFTMQ_CONFIG=/etc/raftmq/group.toml", f"RAFTMQ_NODE={node}", "RAFTMQ_GROUP_PASSWORD="]
    assert f"then: systemctl enable --now raftmq@{node}\n" in result.stdout


def test_the_readme_shows_what_host1_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (EXAMPLE / "README.md").read_text()
    shown = re.search(r"For `host1` it prints:\n\n((?: {4}.*\n)+)", readme)
    assert shown is not None
    monkeypatch.chdir(tmp_path)
    result = render("host1")
    assert result.exit_code == 0, result.output
    assert result.stdout == re.sub(r"(?m)^ {4}", "", shown.group(1))
    for path in TLS_FILES:  # step 3 puts every listed file in place
        assert f" {path}\n" in readme


def test_with_the_listed_files_in_place_each_member_would_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps 2 to 4 short of starting: the rendered files, the TLS pair at the listed paths (here
    under the copy's directory, as under /etc/raftmq on a host) and the password: the node's own
    checks accept each member off loopback (TLS and logins on the admin port, a group password)."""
    from cluster.exposure import check_exposure
    from cluster.group_file import load_group_config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAFTMQ_GROUP_PASSWORD", "a password for the test")
    names = tuple(f"{host}.example.internal" for host in HOSTS)
    _, certificates = make_group_certificates(tmp_path / "made", {"orders": names})
    for node in HOSTS:
        assert render(node).exit_code == 0
        etc = tmp_path / "rendered" / node
        (etc / "tls").mkdir()
        for path, made in zip(TLS_FILES, (certificates["orders"].cert, certificates["orders"].key), strict=True):
            shutil.copy(made, etc / Path(path).relative_to("/etc/raftmq"))
        group = load_group_config(etc / "group.toml")
        assert group.data_dir == "/var/lib/raftmq/orders" and group.password
        assert [m.raft for m in group.members] == [f"{name}:62613" for name in names]
        check_exposure(group, node, "group.toml")
        check_exposure(dataclasses.replace(group, server=dataclasses.replace(group.server, bind_host="0.0.0.0")),
                       node, "group.toml")
