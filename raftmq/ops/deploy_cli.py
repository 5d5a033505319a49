"""`raftmq deploy render`: what one host of a cluster needs (cluster.host_files), written out."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import click


@click.group("deploy")
def deploy_command() -> None:
    """Files for running a cluster's nodes on hosts of their own (docs/deployment.md)."""


@deploy_command.command("render")
@click.argument("topology", type=click.Path(dir_okay=False, exists=True))
@click.argument("node")
@click.option("--group", "group", metavar="NAME", help="The node's group, where several groups have a node of that id.")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True,
              help="Where to write the files (copy them to --config-dir on the host).")
@click.option("--config-dir", default="/etc/raftmq", show_default=True, help="Where the files will be on the host.")
@click.option("--state-dir", default="/var/lib/raftmq", show_default=True,
              help="Where the groups' data will be on the host.")
@click.option("--secrets-from-env", is_flag=True,
              help="Fill the secrets the files name (password_env, cluster_password_env) from this environment.")
def render_command(topology: str, node: str, group: str | None, out: str, config_dir: str, state_dir: str,
                   secrets_from_env: bool) -> None:
    """Render the files the host of NODE needs from TOPOLOGY (a topology or a group file): the
    topology and every group file, each group's data_dir under --state-dir, and NODE's
    environment file (RAFTMQ_CONFIG, RAFTMQ_TOPOLOGY, RAFTMQ_NODE and the secrets), the
    settings of the systemd instance `raftmq@INSTANCE` (deploy/systemd/raftmq@.service)."""
    from cluster.host_files import render_host
    from cluster.topology import load_topology
    from raftmq.errors import ConfigError
    from raftmq.security_config import files_named_only

    for option, value in (("--config-dir", config_dir), ("--state-dir", state_dir)):
        if not PurePosixPath(value).is_absolute():
            raise click.BadParameter(f"must be an absolute path, got {value!r}", param_hint=option)
    try:
        with files_named_only():  # TLS files and CAs are the host's: they need not be here
            loaded = load_topology(topology)
        host = render_host(loaded, node, group=group, config_dir=PurePosixPath(config_dir),
                           state_dir=PurePosixPath(state_dir))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    missing = [name for name in host.secrets if secrets_from_env and name not in os.environ]
    if missing:
        raise click.ClickException(f"--secrets-from-env: {', '.join(missing)} not set in this environment")
    target = Path(out)
    for relative, text in host.files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if relative == host.env_name:
            values = [f"{name}={os.environ[name] if secrets_from_env else ''}" for name in host.secrets]
            text += "".join(f"{line}\n" for line in values)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds secrets
            with os.fdopen(fd, "w", encoding="utf-8") as env_file:
                env_file.write(text)
            os.chmod(path, 0o600)
        else:
            path.write_text(text, encoding="utf-8")
    click.echo(f"node {host.node} of group {host.group}: systemd instance raftmq@{host.instance}")
    click.echo(f"wrote {len(host.files)} file(s) to {target}/; on the host they go to {config_dir}/")
    if host.secrets and not secrets_from_env:
        click.echo(f"fill in {', '.join(host.secrets)} in {host.env_name} (mode 0600, owner root: systemd reads it)")
    if host.to_place:
        click.echo(f"put these files in place on the host of {host.node} (listed in {host.to_place_name}):")
        width = max(len(item.path) for item in host.to_place)
        for item in host.to_place:
            click.echo(f"  {item.path.ljust(width)}  ({item.named_by})")
    click.echo(f"then: systemctl enable --now raftmq@{host.instance}")
    if host.loopback_only:
        click.echo(f"warning: every address of the members is a loopback one ({host.addresses[0]}, ...): "
                   "only processes on one machine can reach them, so nodes on separate hosts would not "
                   "find each other; give each [[node]] its host's name or address", err=True)
    elif host.loopback_among_others:
        shown = ", ".join(host.loopback_among_others[:3]) + (", ..." if len(host.loopback_among_others) > 3 else "")
        click.echo(f"warning: some client or raft addresses are loopback ones among addresses that are not "
                   f"({shown}): members on other hosts could not reach them; give each [[node]] its host's "
                   "name or address", err=True)
