"""`raftmq node`: one broker node, or one member of a group, in the foreground (listed by raftmq.cli).

Every node process imports this module (`python -m raftmq node`), so it imports nothing of the
operator tools, the chaos harness or the audit."""

from __future__ import annotations

import dataclasses
import errno
import functools
import sys

import click
from click.core import ParameterSource

from raftmq.config import console_url, split_address
from raftmq.logs import LEVELS as LOG_LEVELS
from raftmq.processes import bind_error

DEFAULT_MQTT_PORT = 1883  # IANA's MQTT port: a single node's unless --mqtt says otherwise
# A single node's admin port (/status, /metrics, the console), on loopback only: clear of STOMP's
# 61613, MQTT's 1883 and the presets' admin ports (8161-8169, the test preset's 8261-8263).
DEFAULT_ADMIN = "127.0.0.1:8160"


class ConfigRefused(click.ClickException):
    """A configuration the node refuses to start with: exit status 78 (EX_CONFIG), which the
    systemd unit does not restart on (a restart does not heal it)."""

    exit_code = 78


def _parse_listen(value: str | None, option: str = "--listen") -> tuple[str, int] | None:
    if value is None:
        return None
    try:
        return split_address(value)  # "[::1]:61613" gives "::1", as in a configuration file
    except ValueError:
        port = value.rpartition(":")[2]
        why = f": port {port} is out of range (1-65535)" if ":" in value and port.isdigit() else ""
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}{why}", param_hint=option) from None


def _port_taken(address: str) -> bool:
    """Whether another process listens on `address` ("host:port") now: a bind as the server's
    (SO_REUSEADDR, so a port in TIME_WAIT is free) fails with EADDRINUSE."""
    error = bind_error(*split_address(address))
    return error is not None and error.errno == errno.EADDRINUSE


@click.command("node")
@click.option("--listen", "listen", metavar="HOST:PORT", help="Client (STOMP) address; default 127.0.0.1:61613.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="RAFTMQ_CONFIG", show_envvar=True,
              help="Node or group configuration (TOML).")
@click.option("--node", "node_id", metavar="ID", envvar="RAFTMQ_NODE", show_envvar=True,
              help="Which [[node]] of a group configuration to run.")
@click.option("--topology", "topology_path", type=click.Path(dir_okay=False), metavar="FILE", envvar="RAFTMQ_TOPOLOGY",
              show_envvar=True,
              help="The cluster's topology file: the group (--config) joins its [[cluster_connection]]s.")
@click.option("--bind-host", "bind_host", metavar="HOST", envvar="RAFTMQ_BIND_HOST", show_envvar=True,
              help="Bind every port on HOST (0.0.0.0: all interfaces) while peers and clients keep using the "
                   "configured names; default: [server] bind_host, or each address's own host.")
@click.option("--admin", "admin", metavar="HOST:PORT|off", envvar="RAFTMQ_ADMIN", show_envvar=True,
              help=f"Admin HTTP address of a single node: /status, /metrics, /health and the web console at /; "
                   f"default: {DEFAULT_ADMIN} (loopback only; taken by another process: the node runs without "
                   f"one and says so), or with --config its [node] admin; off: no admin port. The environment "
                   f"variable applies where the config file names none.")
@click.option("--mqtt", "mqtt", metavar="HOST:PORT|off",
              help="MQTT 3.1.1 and 5.0 address of a single node; default: port 1883 on the --listen host, or "
                   "with --config its [node] mqtt; off: no MQTT port.")
@click.option("--data-dir", "data_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Where a single node keeps its journal, in DIR/<name>/; default: [node] data_dir, or ./.raftmq.")
@click.option("--in-memory", "in_memory", is_flag=True,
              help="Keep everything in memory: nothing survives a restart (default: durable, in --data-dir).")
@click.option(
    "--log-file", "log_file", type=click.Path(dir_okay=False), metavar="PATH", envvar="RAFTMQ_LOG_FILE",
    show_envvar=True,
    help="Also write the log as JSON lines here (a group member's default: <data_dir>/<id>/raftmq.log.jsonl).",
)
@click.option(
    "--log-level", "log_level", type=click.Choice(LOG_LEVELS, case_sensitive=False), envvar="RAFTMQ_LOG_LEVEL",
    default="info", show_default=True, show_envvar=True, help="Least severe level logged.",
)
def node_command(listen: str | None, config_path: str | None, node_id: str | None, topology_path: str | None,
                 bind_host: str | None, admin: str | None, mqtt: str | None, data_dir: str | None, in_memory: bool,
                 log_file: str | None, log_level: str) -> None:
    """Run one broker node (or one member of a group) in the foreground (Ctrl-C stops it).

    A single node is durable: a one-member Raft group with its journal in ./.raftmq/<name>/
    (--data-dir), so what it acknowledged survives kill -9 and power loss; --in-memory keeps
    nothing. Once it serves clients it prints `raftmq node listening on HOST:PORT (durable: data
    in DIR)` (or `(in memory: ...)`) on stdout; its log goes to stderr (pretty on a terminal,
    key=value lines otherwise)."""
    from cluster.exposure import check_exposure
    from cluster.group_file import GroupConfig, GroupMember, load_config, single_node_group
    from raftmq.app.run import serve
    from raftmq.config import NodeConfig
    from raftmq.errors import ConfigError

    try:
        config = load_config(config_path) if config_path else NodeConfig()
        if isinstance(config, GroupConfig):
            if node_id is None:
                members = ", ".join(m.id for m in config.members)
                raise ConfigError(f"{config_path}: a group configuration needs --node (one of: {members})")
            try:
                config.member(node_id)
            except ConfigError as exc:
                raise ConfigError(f"{config_path}: {exc}") from None
            if topology_path is not None:
                from cluster.node_settings import with_cluster

                assert config_path is not None
                config = with_cluster(config, config_path, topology_path)
            if bind_host:
                config = dataclasses.replace(config, server=dataclasses.replace(config.server, bind_host=bind_host))
            check_exposure(config, node_id, config_path or "raftmq node")
        elif topology_path is not None:
            raise ConfigError("--topology needs a group configuration (--config GROUP.toml --node ID)")
    except ConfigError as exc:
        raise ConfigRefused(str(exc)) from exc
    from raftmq.app.group import serve_group

    admin_from_env = click.get_current_context().get_parameter_source("admin") is ParameterSource.ENVIRONMENT
    if isinstance(config, GroupConfig):
        if admin_from_env:
            admin = None  # a member's admin address is its [[node]]'s
        if listen is not None or admin is not None or mqtt is not None or data_dir is not None or in_memory:
            raise click.UsageError("--listen, --admin, --mqtt, --data-dir and --in-memory do not apply to a group "
                                   "member: its [[node]] and [group] name its addresses and data directory")
        assert node_id is not None  # a group member is named (checked above)
        ready = functools.partial(_print_ready, f"durable: data in {config.member_dir(node_id)}",
                                  mqtt=config.member(node_id).mqtt,
                                  console=console_url(config.admin_endpoint(config.member(node_id))))
        from cluster.group_file import load_group_config

        assert config_path is not None  # a group comes from a file
        reload = functools.partial(load_group_config, config_path)  # members learn new members' addresses here
        serve_group(config, node_id, on_ready=ready, log_file=log_file, log_level=log_level, reload=reload)
        return
    if node_id is not None:
        raise click.UsageError("--node needs a group configuration (a --config file with [[node]] tables)")
    address = _parse_listen(listen)
    if address is not None:
        config = config.with_address(*address)
    if bind_host:
        config = dataclasses.replace(config, bind_host=bind_host)
    defaulted = False  # the built-in admin address, which gives way to another process
    if admin_from_env and config.admin is not None:
        admin = None  # the config file's own admin address wins over the environment's
    if admin == "off":
        config = dataclasses.replace(config, admin=None)
    elif admin is not None:
        admin_address = _parse_listen(admin, "--admin")
        assert admin_address is not None  # given, so parsed (or a UsageError)
        config = dataclasses.replace(config, admin=f"{admin_address[0]}:{admin_address[1]}")
    elif config_path is None:  # the README's single node: its console and /status on loopback
        config = dataclasses.replace(config, admin=DEFAULT_ADMIN)
        defaulted = True
    if config.admin is not None and _port_taken(config.admin):
        if not defaulted:
            raise click.ClickException(f"the admin port {config.admin} is taken by another process: --admin HOST:PORT "
                                       "picks another, --admin off runs the node without one")
        click.echo(f"raftmq node: the admin port {config.admin} is taken by another process (another raftmq node?): "
                   "this node runs without /status, /metrics and the console; --admin HOST:PORT picks another "
                   "port, --admin off silences this", err=True)
        config = dataclasses.replace(config, admin=None)
    if mqtt == "off":
        config = dataclasses.replace(config, mqtt=None)
    elif mqtt is not None:
        mqtt_address = _parse_listen(mqtt, "--mqtt")
        assert mqtt_address is not None
        config = dataclasses.replace(config, mqtt=f"{mqtt_address[0]}:{mqtt_address[1]}")
    elif config_path is None:  # the README's single node: MQTT beside STOMP, on the port MQTT clients try first
        host = f"[{config.host}]" if ":" in config.host else config.host
        config = dataclasses.replace(config, mqtt=f"{host}:{DEFAULT_MQTT_PORT}")
    source = config_path or "raftmq node --admin"
    console = console_url(f"https://{config.admin}" if config.admin and config.security.tls else config.admin)
    if in_memory or config.in_memory:
        if data_dir is not None:
            raise click.UsageError("--data-dir and --in-memory: choose one")
        if config.admin is not None:
            member = GroupMember(config.name, f"{config.host}:{config.port}", "127.0.0.1:0", config.admin)
            try:
                check_exposure(GroupConfig(config.name, config.data_dir, (member,), server=config), config.name, source)
            except ConfigError as exc:
                raise ConfigRefused(str(exc)) from exc
        ready = functools.partial(_print_ready, "in memory: nothing survives a restart", mqtt=config.mqtt,
                                  console=console)
        serve(config, on_ready=ready, log_file=log_file, log_level=log_level)
        return
    try:
        group = single_node_group(config, data_dir)
    except ConfigError as exc:
        raise ConfigRefused(f"{config_path or 'raftmq node'}: {exc}") from exc
    try:
        check_exposure(group, config.name, source)
    except ConfigError as exc:
        raise ConfigRefused(str(exc)) from exc
    ready = functools.partial(_print_ready, f"durable: data in {group.member_dir(config.name)}", mqtt=config.mqtt,
                              console=console)
    serve_group(group, config.name, on_ready=ready, log_file=log_file, log_level=log_level)


@click.command("hand-over")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, exists=True), envvar="RAFTMQ_CONFIG",
              required=True, show_envvar=True, help="The member's group file.")
@click.option("--node", "node_id", metavar="ID", envvar="RAFTMQ_NODE", required=True, show_envvar=True,
              help="The member's id.")
@click.option("--bind-host", "bind_host", metavar="HOST", envvar="RAFTMQ_BIND_HOST", show_envvar=True,
              help="Where the member binds (as for `raftmq node`): 0.0.0.0 or :: means its admin port is asked "
                   "on loopback.")
@click.option("--timeout", type=click.FloatRange(1, 120), default=15.0, show_default=True,
              help="Seconds to wait for the answer.")
def hand_over_command(config_path: str, node_id: str, bind_host: str | None, timeout: float) -> None:
    """Ask this host's member to hand its Raft leadership to another member (before a stop).

    If member NODE leads, it hands over and this waits until it did: what systemd's ExecStop and
    a Kubernetes preStop run before the node is stopped, so clients see a hand-over rather than
    an election. Exit 0 when the member does not lead (any more); 1 when it could not hand over
    (it stops as leader then, and the group elects)."""
    from cluster.group_file import load_group_config
    from raftmq.config import split_address
    from raftmq.errors import ConfigError
    from raftmq.replication.group_secret import group_secret
    from raftmq.server.admin.http import post_hand_over
    from raftmq.tls import member_client_tls

    try:
        group = load_group_config(config_path)
        member = group.member(node_id)
    except ConfigError as exc:
        raise click.ClickException(f"{config_path}: {exc}") from exc
    if member.admin is None:
        raise click.ClickException(f"{config_path}: node {node_id} has no admin address: nothing to ask")
    host, port = split_address(member.admin)
    bind = bind_host or group.server.bind_host
    if bind in ("0.0.0.0", "::"):
        host = "127.0.0.1" if bind == "0.0.0.0" else "::1"
    tls = group.server.security.tls
    try:
        code, answer = post_hand_over(host, port, group_secret(group.password, group.data_dir), timeout,
                                      None if tls is None else member_client_tls(tls))
    except OSError as exc:
        raise click.ClickException(f"node {node_id} ({host}:{port}): {exc}") from exc
    if code != 200:
        raise click.ClickException(f"node {node_id} ({host}:{port}): HTTP {code}: {answer.get('error', answer)}")
    if not answer.get("was_leader"):
        click.echo(f"node {node_id} does not lead (leader: {answer.get('leader') or 'unknown'}): nothing to hand over")
    elif answer.get("handed_over"):
        click.echo(f"node {node_id} handed its leadership over (leader: {answer.get('leader') or 'being elected'})")
    else:
        raise click.ClickException(f"node {node_id} could not hand its leadership over within the hand-over time")


def _print_ready(how: str, host: str, port: int, mqtt: str | None = None, console: str | None = None) -> None:
    # What `raftmq up`, scripts and tests wait for on stdout: the prefix up to the address.
    click.echo(f"raftmq node listening on {host}:{port} ({how})")
    if mqtt is not None:
        click.echo(f"MQTT 3.1.1 and 5.0 on {mqtt}")
    if console is not None:
        click.echo(f"console: {console} (and /status, /metrics, /health)")
    sys.stdout.flush()
