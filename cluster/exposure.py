"""What a member refuses to expose: a port off loopback that strangers could use.

Off loopback the Raft port needs the group's password (peers prove it before a byte of theirs
is read), and the admin port needs TLS and logins (`[tls]` and `[[user]]`; only `/health`,
`/ready` and `/live` stay open, for probes). `[security] allow_open_admin = true` lifts the admin
rule for a private test network. `check_exposure` runs before a member starts and names the
file, the node and the setting.
"""

from __future__ import annotations

import ipaddress

from cluster.group_file import GroupConfig
from raftmq.config import split_address
from raftmq.errors import ConfigError


def is_loopback(host: str) -> bool:
    """True for "localhost" and loopback addresses (127.0.0.0/8, ::1); False for names and the rest."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(group: GroupConfig, node_id: str, source: str) -> None:
    """Raise `ConfigError` when member `node_id` would bind its Raft or admin port off loopback
    without the credentials that guard it. `source`: the group file (or the command) to name."""
    member = group.member(node_id)
    bind = group.server.bind_host
    where = f" (bound on {bind}: --bind-host, RAFTMQ_BIND_HOST or [server] bind_host)" if bind else ""
    if len(group.members) > 1 and not group.password and not is_loopback(bind or split_address(member.raft)[0]):
        raise ConfigError(
            f"{source}: node {node_id}: raft = {member.raft!r}{where} is off loopback, so the group needs a password: "
            "set [group] password_env (or password) on every member"
        )
    security = group.server.security
    if member.admin is None or security.allow_open_admin:
        return
    if is_loopback(bind or split_address(member.admin)[0]):
        return
    protections = (("[tls] (cert_file, key_file)", security.tls is not None),
                   ("logins ([[user]] tables)", security.authentication and bool(security.users)))
    missing = [name for name, present in protections if not present]
    if missing:
        raise ConfigError(
            f"{source}: node {node_id}: admin = {member.admin!r}{where} is off loopback, so the admin port needs "
            f"TLS and logins; missing: {' and '.join(missing)} (or [security] allow_open_admin = true, on a "
            "private test network only)"
        )
