"""`raftmq deploy render`: one host's files from a topology (the happy path runs in the hosts
rehearsal, tests/ops/test_hosts_rehearsal.py)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from raftmq.ops.deploy_cli import deploy_command

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def render(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(deploy_command, ["render", *args], env=env)
    return result.exit_code, result.output


def test_a_node_id_several_groups_share_needs_its_group_and_the_instance_names_both(tmp_path: Path) -> None:
    code, output = render(str(CONFIGS / "symmetric.toml"), "n1", "--out", str(tmp_path))
    assert code != 0 and "node 'n1' is in groups g1, g2, g3: say which with --group" in output
    code, output = render(str(CONFIGS / "symmetric.toml"), "n1", "--group", "g3", "--out", str(tmp_path))
    assert code == 0, output
    assert "systemd instance raftmq@g3-n1" in output
    env = (tmp_path / "g3-n1.env").read_text()
    assert ("RAFTMQ_CONFIG=/etc/raftmq/symmetric-g3.toml\nRAFTMQ_NODE=n1\n"
            "RAFTMQ_TOPOLOGY=/etc/raftmq/symmetric.toml\n") in env
    assert (tmp_path / "g3-n1.env").stat().st_mode & 0o777 == 0o600
    for group in ("g1", "g2", "g3"):  # every group file (bridges read the neighbours'), data under the state dir
        assert f'data_dir = "/var/lib/raftmq/{group}"' in (tmp_path / f"symmetric-{group}.toml").read_text()


def test_a_lone_group_needs_no_topology_and_its_secrets_are_named(tmp_path: Path) -> None:
    group = tmp_path / "orders.toml"
    text = (CONFIGS / "group.toml").read_text().replace("# password_env", "password_env", 1)
    assert 'password_env = "RAFTMQ_G1_PASSWORD"' in text
    group.write_text(text)
    out = tmp_path / "out"
    code, output = render(str(group), "n2", "--out", str(out), "--state-dir", "/srv/raftmq")
    assert code == 0, output
    assert "fill in RAFTMQ_G1_PASSWORD in n2.env" in output
    env = (out / "n2.env").read_text()
    assert "RAFTMQ_TOPOLOGY" not in env and env.endswith("RAFTMQ_G1_PASSWORD=\n")
    assert 'data_dir = "/srv/raftmq/g1"' in (out / "orders.toml").read_text()
    code, output = render(str(group), "n2", "--out", str(out), "--secrets-from-env")
    assert code != 0 and "RAFTMQ_G1_PASSWORD not set" in output
    code, output = render(str(group), "n2", "--out", str(out), "--secrets-from-env", env={"RAFTMQ_G1_PASSWORD": "pw"})
    assert code == 0 and (out / "n2.env").read_text().endswith("RAFTMQ_G1_PASSWORD=pw\n")


def test_unknown_nodes_and_relative_directories_are_refused(tmp_path: Path) -> None:
    code, output = render(str(CONFIGS / "group.toml"), "n9", "--out", str(tmp_path))
    assert code != 0 and "no node 'n9'" in output and "g1/n1" in output
    code, output = render(str(CONFIGS / "group.toml"), "n1", "--out", str(tmp_path), "--config-dir", "etc")
    assert code != 0 and "--config-dir" in output and "absolute" in output
