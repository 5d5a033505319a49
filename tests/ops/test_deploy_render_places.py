"""`raftmq deploy render` of a configuration made for other hosts: the TLS files it names need
not exist where it is rendered (they are listed, at their paths on the host, to be put in
place), and a configuration whose every address is a loopback one renders with a warning, as
does one whose client or Raft addresses are loopback ones among others that are not."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from raftmq.ops.deploy_cli import deploy_command

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LOOPBACK_WARNING = "warning: every address of the members is a loopback one"
MIXED_WARNING = "warning: some client or raft addresses are loopback ones among addresses that are not"


def render(*args: str) -> Result:
    return CliRunner().invoke(deploy_command, ["render", *args])


def member(node: str, host: str, port: int) -> str:
    return (f'[[node]]\nid = "{node}"\nclient = "{host}:{port}"\nraft = "{host}:{port + 1000}"\n'
            f'admin = "{host}:{port + 2000}"\n\n')


def test_tls_files_that_are_not_here_render_and_are_listed_where_the_host_needs_them(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    tls = '[tls]\ncert_file = "tls/{0}.pem"\nkey_file = "tls/{0}.key"\nca_file = "/etc/pki/clients.pem"\n\n'
    for index, group in enumerate(("g1", "g2")):
        nodes = "".join(member(f"n{i}", f"192.0.2.{i}", 61613 + 10 * index) for i in (1, 2, 3))
        (source / f"{group}.toml").write_text(
            f'[group]\nname = "{group}"\ndata_dir = "data/{group}"\n\n{tls.format(group)}{nodes}')
    (source / "topology.toml").write_text(
        '[[group]]\nfile = "g1.toml"\n\n[[group]]\nfile = "g2.toml"\n\n'
        '[[cluster_connection]]\nname = "mesh"\ngroups = ["g1", "g2"]\ntls_ca_file = "tls/ca.pem"\n')
    out = tmp_path / "out"
    result = render(str(source / "topology.toml"), "n2", "--group", "g2", "--out", str(out),
                    "--config-dir", "/srv/raftmq/etc")
    assert result.exit_code == 0, result.output
    assert not (source / "tls").exists()  # nothing was looked for, nothing was made
    assert ("put these files in place on the host of n2 (listed in g2-n2.to-place.txt):\n"
            "  /srv/raftmq/etc/tls/ca.pem  (topology.toml cluster_connection[0].tls_ca_file)\n"
            "  /srv/raftmq/etc/tls/g1.pem  (g1.toml tls.cert_file)\n"
            "  /srv/raftmq/etc/tls/g1.key  (g1.toml tls.key_file)\n"
            "  /etc/pki/clients.pem        (g1.toml tls.ca_file, g2.toml tls.ca_file)\n"
            "  /srv/raftmq/etc/tls/g2.pem  (g2.toml tls.cert_file)\n"
            "  /srv/raftmq/etc/tls/g2.key  (g2.toml tls.key_file)\n"
            "then: systemctl enable --now raftmq@g2-n2\n") in result.stdout
    listing = (out / "g2-n2.to-place.txt").read_text()
    assert listing.startswith("# Files to put in place on the host of node n2 of group g2 (raftmq@g2-n2)")
    entries = [line.split("#", 1) for line in listing.splitlines() if not line.startswith("#")]
    assert [[path.strip(), keys.strip()] for path, keys in entries] == [
        ["/srv/raftmq/etc/tls/ca.pem", "topology.toml cluster_connection[0].tls_ca_file"],
        ["/srv/raftmq/etc/tls/g1.pem", "g1.toml tls.cert_file"],
        ["/srv/raftmq/etc/tls/g1.key", "g1.toml tls.key_file"],
        ["/etc/pki/clients.pem", "g1.toml tls.ca_file, g2.toml tls.ca_file"],
        ["/srv/raftmq/etc/tls/g2.pem", "g2.toml tls.cert_file"],
        ["/srv/raftmq/etc/tls/g2.key", "g2.toml tls.key_file"],
    ]
    assert "wrote 5 file(s)" in result.stdout  # topology, two group files, g2-n2.env, the listing
    assert {p.name for p in out.iterdir()} == {"topology.toml", "g1.toml", "g2.toml", "g2-n2.env",
                                               "g2-n2.to-place.txt"}
    assert LOOPBACK_WARNING not in result.output


def test_a_file_named_nowhere_is_still_an_error(tmp_path: Path) -> None:
    group = tmp_path / "group.toml"  # names-only reading does not let the rest of [tls] go unchecked
    group.write_text('[group]\nname = "g1"\ndata_dir = "d"\n\n[tls]\ncert_file = "a.pem"\n\n'
                     + member("n1", "192.0.2.1", 61613))
    result = render(str(group), "n1", "--out", str(tmp_path / "out"))
    assert result.exit_code != 0 and "tls.key_file is required" in result.output


def test_a_configuration_of_loopback_addresses_renders_with_a_warning(tmp_path: Path) -> None:
    result = render(str(CONFIGS / "group.toml"), "n1", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "n1.env").exists() and (tmp_path / "group.toml").exists()
    assert result.stderr == (
        f"{LOOPBACK_WARNING} (127.0.0.1:61613, ...): only processes on one machine can reach them, so "
        "nodes on separate hosts would not find each other; give each [[node]] its host's name or address\n")
    assert LOOPBACK_WARNING not in result.stdout


def render_members(tmp_path: Path, members: str, node: str, out: str) -> Result:
    """Render `node` of a group g1 of these [[node]] tables into tmp_path/out."""
    group = tmp_path / "group.toml"
    group.write_text('[group]\nname = "g1"\ndata_dir = "d"\n\n' + members)
    return render(str(group), node, "--out", str(tmp_path / out))


def test_localhost_and_ipv6_loopback_count_as_loopback_and_one_real_address_does_not(tmp_path: Path) -> None:
    loopbacks = member("n1", "localhost", 61613) + member("n2", "[::1]", 61623)
    result = render_members(tmp_path, loopbacks + member("n3", "127.0.0.3", 61633), "n1", "a")
    assert result.exit_code == 0 and LOOPBACK_WARNING in result.stderr, result.output
    result = render_members(tmp_path, loopbacks + member("n3", "host3.example.internal", 61633), "n1", "b")
    assert result.exit_code == 0 and LOOPBACK_WARNING not in result.output, result.output


def test_loopback_client_or_raft_addresses_among_real_ones_are_named_in_a_warning(tmp_path: Path) -> None:
    members = member("n1", "127.0.0.1", 61613) + member("n2", "192.0.2.2", 61613) + member("n3", "192.0.2.3", 61613)
    result = render_members(tmp_path, members, "n2", "a")
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"{MIXED_WARNING} (127.0.0.1:61613, 127.0.0.1:62613): members on other hosts could not reach "
        "them; give each [[node]] its host's name or address\n")
    # Each member's admin port kept on its own loopback is a choice, not a mistake: no warning.
    members = "".join(f'[[node]]\nid = "n{i}"\nclient = "192.0.2.{i}:61613"\nraft = "192.0.2.{i}:62613"\n'
                      f'admin = "127.0.0.1:816{i}"\n\n' for i in (1, 2, 3))
    result = render_members(tmp_path, members, "n2", "b")
    assert result.exit_code == 0 and result.stderr == "", result.output
