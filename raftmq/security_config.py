"""The security tables of a node or group file: `[security]`, `[[user]]`, `[[acl]]`, `[tls]`.

    [security]
    authentication = true          # default: true when there is a [[user]]
    allow_anonymous = false        # CONNECT without login, as a member of anonymous_groups
    anonymous_groups = ["anonymous"]
    allow_open_admin = false       # an admin port off loopback needs [tls] and logins unless true

    [[user]]
    name = "app"
    password_hash = "scrypt$16384$8$1$..."   # from `raftmq passwd`
    groups = ["producers"]

    [[acl]]
    queue = "orders.>"             # or topic = "prices.*"
    read = ["consumers"]
    write = ["producers"]
    admin = ["admins"]

    [tls]
    cert_file = "server.pem"       # relative paths: from the config file's directory
    key_file = "server.key"
    ca_file = "clients-ca.pem"     # optional: verify client certificates
    require_client_cert = false
    raft = false                   # the Raft port speaks TLS too (members present cert_file to each other)

Every error names the file, the key and what was expected, like the rest of raftmq.config.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from raftmq.errors import ConfigError
from raftmq.passwords import parse_hash
from raftmq.patterns import check_pattern
from raftmq.security import ANONYMOUS_GROUP, KINDS, OPERATIONS, AclEntry, SecurityConfig, TlsConfig, UserEntry
from raftmq.tls import server_ssl_context

SECURITY_TABLES = ("security", "user", "acl", "tls")
_SECURITY_KEYS = ("authentication", "allow_anonymous", "anonymous_groups", "allow_open_admin")
_USER_KEYS = ("name", "password_hash", "groups")
_ACL_KEYS = ("queue", "topic", *OPERATIONS)
_TLS_KEYS = ("cert_file", "key_file", "ca_file", "require_client_cert", "raft")
PASSWD_HINT = "create one with `raftmq passwd`"


def load_security(raw: dict[str, Any], path: Path) -> SecurityConfig:
    """The `SecurityConfig` of a parsed TOML file (its other tables are not looked at)."""
    section = _table(raw, "security", path)
    _known_keys(section, _SECURITY_KEYS, path, "security")
    users = tuple(_user(table, path, f"user[{i}]") for i, table in enumerate(_array(raw, "user", path)))
    names: set[str] = set()
    for i, user in enumerate(users):
        if user.name in names:
            raise ConfigError(f"{path}: user[{i}].name {user.name!r} is used by another [[user]]")
        names.add(user.name)
    authentication = _bool(section, "authentication", path, "security", default=bool(users))
    allow_anonymous = _bool(section, "allow_anonymous", path, "security", default=False)
    anonymous_groups = _groups(section, "anonymous_groups", path, "security", default=(ANONYMOUS_GROUP,))
    if authentication and not users and not allow_anonymous:
        raise ConfigError(
            f"{path}: security.authentication is true but there is no [[user]] and security.allow_anonymous "
            "is false: nobody could connect (add a [[user]] or allow anonymous connections)"
        )
    if users and not authentication:
        raise ConfigError(
            f"{path}: security.authentication = false but [[user]] entries are configured: "
            "set it to true (or remove it) to check their logins, or remove the users"
        )
    acl = tuple(_acl(table, path, f"acl[{i}]") for i, table in enumerate(_array(raw, "acl", path)))
    _check_acl(acl, users, anonymous_groups if allow_anonymous or not authentication else (), path)
    tls_table = raw.get("tls")
    tls = None if tls_table is None else _tls(_table(raw, "tls", path), path)
    allow_open_admin = _bool(section, "allow_open_admin", path, "security", default=False)
    return SecurityConfig(authentication, allow_anonymous, anonymous_groups, users, acl, tls, allow_open_admin)


# Set by `files_named_only()`: a configuration is read for another host (`raftmq deploy render`),
# where the files it names (TLS certificates, keys, CAs) will be put in place.
_NAMES_ONLY: ContextVar[bool] = ContextVar("raftmq_files_named_only", default=False)


@contextmanager
def files_named_only() -> Iterator[None]:
    """Within it, the files a configuration names need not exist here (nor are TLS files
    loaded): it is read for the host it will run on, which has them."""
    token = _NAMES_ONLY.set(True)
    try:
        yield
    finally:
        _NAMES_ONLY.reset(token)


def reading_names_only() -> bool:
    """Whether `files_named_only()` is in effect."""
    return _NAMES_ONLY.get()


# -- tables ---------------------------------------------------------------------------------------


def _user(table: dict[str, Any], path: Path, prefix: str) -> UserEntry:
    if "password" in table:
        raise ConfigError(
            f"{path}: {prefix}.password: plaintext passwords are not accepted; set {prefix}.password_hash "
            f"instead ({PASSWD_HINT})"
        )
    _known_keys(table, _USER_KEYS, path, prefix)
    name = _string(table, "name", path, prefix)
    encoded = _string(table, "password_hash", path, prefix)
    try:
        parse_hash(encoded)
    except ValueError as exc:
        raise ConfigError(f"{path}: {prefix}.password_hash: {exc}; {PASSWD_HINT}") from None
    return UserEntry(name, encoded, _groups(table, "groups", path, prefix, default=()))


def _acl(table: dict[str, Any], path: Path, prefix: str) -> AclEntry:
    _known_keys(table, _ACL_KEYS, path, prefix)
    kinds = [kind for kind in KINDS if kind in table]
    if len(kinds) != 1:
        raise ConfigError(f"{path}: {prefix}: give exactly one of queue = \"PATTERN\" or topic = \"PATTERN\"")
    kind = kinds[0]
    pattern = _string(table, kind, path, prefix)
    if pattern.startswith("/"):
        raise ConfigError(f"{path}: {prefix}.{kind}: a name pattern without the /{kind}/ prefix, "
                          f"like \"orders.>\"; got {pattern!r}")
    try:
        check_pattern(pattern)
    except ValueError as exc:
        raise ConfigError(f"{path}: {prefix}.{kind}: {exc}") from None
    groups = {operation: _groups(table, operation, path, prefix, default=()) for operation in OPERATIONS}
    return AclEntry(kind, pattern, groups[OPERATIONS[0]], groups[OPERATIONS[1]], groups[OPERATIONS[2]])


def _check_acl(acl: tuple[AclEntry, ...], users: tuple[UserEntry, ...], anonymous: tuple[str, ...], path: Path) -> None:
    known = {group for user in users for group in user.groups} | set(anonymous)
    seen: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(acl):
        key = (entry.kind, entry.pattern)
        if key in seen:
            raise ConfigError(f"{path}: acl[{i}].{entry.kind} {entry.pattern!r} is also acl[{seen[key]}]: "
                              "merge the two")
        seen[key] = i
        for operation in OPERATIONS:
            for group in entry.groups(operation):
                if group not in known:
                    members = ", ".join(sorted(known)) or "none"
                    raise ConfigError(
                        f"{path}: acl[{i}].{operation}: group {group!r} has no member (no [[user]] lists it and it is "
                        f"not an anonymous group); known groups: {members}"
                    )


def _tls(table: dict[str, Any], path: Path) -> TlsConfig:
    _known_keys(table, _TLS_KEYS, path, "tls")
    for key in ("cert_file", "key_file"):
        if key not in table:
            raise ConfigError(f"{path}: tls.{key} is required (a PEM file)")
    cert_file = _file(table, "cert_file", path)
    key_file = _file(table, "key_file", path)
    ca_file = _file(table, "ca_file", path) if "ca_file" in table else None
    require = _bool(table, "require_client_cert", path, "tls", default=False)
    if require and ca_file is None:
        raise ConfigError(f"{path}: tls.require_client_cert = true needs tls.ca_file "
                          "(the CA that signs client certificates)")
    tls = TlsConfig(cert_file, key_file, ca_file, require, _bool(table, "raft", path, "tls", default=False))
    if reading_names_only():
        return tls
    try:
        server_ssl_context(tls)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"{path}: tls: cannot load tls.cert_file {cert_file} / tls.key_file {key_file}"
            f"{f' / tls.ca_file {ca_file}' if ca_file else ''}: {exc} "
            "(expected PEM files: a certificate and its private key)"
        ) from None
    return tls


# -- values ---------------------------------------------------------------------------------------


def _table(raw: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {name!r} must be a table ([{name}])")
    return value


def _array(raw: dict[str, Any], name: str, path: Path) -> list[dict[str, Any]]:
    value = raw.get(name, [])
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConfigError(f"{path}: {name!r} must be an array of tables ([[{name}]])")
    return value


def _known_keys(table: dict[str, Any], known: tuple[str, ...], path: Path, prefix: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(f"{path}: unknown key {prefix}.{key} (known: {', '.join(known)})")


def _string(table: dict[str, Any], key: str, path: Path, prefix: str) -> str:
    value = table.get(key)
    if value is None:
        raise ConfigError(f"{path}: {prefix}.{key} is required")
    if not isinstance(value, str) or not value:
        shown = f"{type(value).__name__}" if key == "password_hash" else f"{type(value).__name__} {value!r}"
        raise ConfigError(f"{path}: {prefix}.{key} must be a non-empty string, got {shown}")
    return value


def _bool(table: dict[str, Any], key: str, path: Path, prefix: str, *, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: {prefix}.{key} must be true or false, got {type(value).__name__} {value!r}")
    return value


def _groups(table: dict[str, Any], key: str, path: Path, prefix: str, *, default: tuple[str, ...]) -> tuple[str, ...]:
    if key not in table:
        return default
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{path}: {prefix}.{key} must be a list of group names like [\"admins\"], got {value!r}")
    return tuple(value)


def _file(table: dict[str, Any], key: str, path: Path) -> str:
    value = _string(table, key, path, "tls")
    file = Path(value).expanduser()
    if not file.is_absolute():
        file = path.parent / file
    if not file.is_file() and not reading_names_only():
        raise ConfigError(f"{path}: tls.{key}: file {file} not found (expected a PEM file)")
    return str(file.resolve())
