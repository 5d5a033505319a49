"""Reading one TOML table of a topology file (`[[cluster_connection]]`, `[[network_connector]]`,
`[[broadcast_group]]`, `[[discovery_group]]`): unknown keys refused, and every error a
`ConfigError` naming the file, the table and the key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

from raftmq.errors import ConfigError


class Table:
    def __init__(self, path: Path, prefix: str, raw: dict[str, Any], keys: tuple[str, ...], kind: str) -> None:
        self.path, self.prefix, self.raw = path, prefix, raw
        for key in raw:
            if key not in keys:
                self.fail(key, f"is not a {kind} key (known: {', '.join(keys)})")

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(f"{self.path}: {self.prefix}.{key} {problem}")

    def text(self, key: str, default: str | None = None, *, required: bool = False, empty: bool = False) -> str | None:
        value = self.raw.get(key, default)
        if value is None and required:
            self.fail(key, "is required")
        if value is not None and (not isinstance(value, str) or (not value and not empty)):
            self.fail(key, f"must be a non-empty string, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {value!r}")
        return value

    def integer(self, key: str, default: int, minimum: int, *, minus_one: bool = False) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {value!r}")
        if value < minimum and not (minus_one and value == -1):
            self.fail(key, f"must be at least {minimum}{' (or -1)' if minus_one else ''}, got {value}")
        return int(value)

    def number(self, key: str, default: float, minimum: float) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            self.fail(key, f"must be a number of at least {minimum:g}, got {value!r}")
        return float(value)

    def credentials(self, user_key: str, password_key: str, env_key: str) -> tuple[str | None, str | None]:
        """A login and its password, given outright or as the environment variable holding it
        (one of the two); a password needs a login."""
        user = self.text(user_key)
        password = self.text(password_key)
        env = self.text(env_key)
        if password is not None and env is not None:
            self.fail(env_key, f"and {password_key} are both set: name one")
        if env is not None:
            password = os.environ.get(env)
            if password is None:
                self.fail(env_key, f"names {env}, which is not set in the environment")
        if password is not None and user is None:
            self.fail(user_key, f"is required with a {password_key.replace('_', ' ')}")
        return user, password

    def port(self, key: str) -> int:
        if key not in self.raw:
            self.fail(key, "is required")
        value = self.raw[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            self.fail(key, f"must be a port number (1-65535), got {value!r}")
        return int(value)


def tables(path: Path, key: str, entries: Any) -> list[dict[str, Any]]:
    """The entries of an array of tables `[[key]]`."""
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConfigError(f"{path}: {key} must be an array of tables ([[{key}]])")
    return entries
