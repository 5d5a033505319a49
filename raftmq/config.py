"""Node configuration: frozen dataclasses loaded from TOML, unknown keys rejected.

Every error names the file, the dotted key and what was expected, so an operator can fix a
config without reading our code.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftmq.core.config import CoreConfig
from raftmq.errors import ConfigError
from raftmq.protocol.limits import Limits


@dataclass(frozen=True, slots=True)
class NodeConfig:
    host: str = "127.0.0.1"
    port: int = 61613
    name: str = "node1"  # names this node in logs and session ids
    # What the server offers in CONNECTED heart-beat: (can send every ms, wants to receive every ms).
    heartbeat_send_ms: int = 10_000
    heartbeat_receive_ms: int = 10_000
    # Commands a session may have appended but not yet committed before we stop reading its
    # socket: a fast producer waits for the log instead of growing our memory.
    max_pending_commands: int = 1_000
    tick_interval_ms: int = 1_000  # how often time is fed to the core (message expiry)
    limits: Limits = field(default_factory=Limits)
    core: CoreConfig = field(default_factory=CoreConfig)

    def with_address(self, host: str, port: int) -> NodeConfig:
        return dataclasses.replace(self, host=host, port=port)


# TOML tables and the dataclass each one fills; top-level keys of [node] go to NodeConfig.
_SECTIONS: dict[str, type] = {"node": NodeConfig, "limits": Limits, "core": CoreConfig}


def load_node_config(path: str | Path) -> NodeConfig:
    """Read a node config file. Tables: [node], [limits], [core]; all keys optional."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r} (expected one of: {', '.join(_SECTIONS)})")
    for name, value in raw.items():
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {name!r} must be a table ([{name}])")
    limits = build_dataclass(Limits, raw.get("limits", {}), path, "limits")
    core = build_dataclass(CoreConfig, raw.get("core", {}), path, "core")
    node_table = raw.get("node", {})
    for nested in ("limits", "core"):
        if nested in node_table:
            raise ConfigError(f"{path}: node.{nested}: use a [{nested}] table instead")
    return build_dataclass(NodeConfig, node_table, path, "node", limits=limits, core=core)


def build_dataclass(cls: type, table: dict[str, Any], path: Path, prefix: str, **extra: Any) -> Any:
    """Fill frozen dataclass `cls` from a TOML table, checking every key and type."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in extra}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = dict(extra)
    for key, value in table.items():
        if key not in fields:
            raise ConfigError(f"{path}: unknown key {prefix}.{key} (known: {', '.join(sorted(fields))})")
        kwargs[key] = _check_type(value, hints[key], path, f"{prefix}.{key}")
    return cls(**kwargs)


def _check_type(value: Any, expected: Any, path: Path, key: str) -> Any:
    allowed = typing.get_args(expected) if isinstance(expected, types.UnionType) else (expected,)
    for kind in allowed:
        if kind is type(None) and value is None:
            return value
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ConfigError(f"{path}: {key} must not be negative, got {value}")
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(k, "__name__", str(k)) for k in allowed)
    raise ConfigError(f"{path}: {key} must be {names}, got {type(value).__name__} {value!r}")
