"""Logging for node processes: structlog events routed through the stdlib `logging` handlers.

Every event is a dotted `area.event` name (`raft.leader_changed`, `client.connected`,
`journal.fsync_slow`) with key/value fields. Two handlers on the root logger render it:

- a JSON-lines file (`json_path`; a group member's is `<data_dir>/<member id>/raftmq.log.jsonl`):
  one object per line with `timestamp` (ISO 8601, UTC), `level`, `logger`, `event` and the
  fields; size-bounded (`LOG_FILE_MAX_BYTES`, `LOG_FILE_BACKUPS` rotated copies);
- the console on stderr: colourful and aligned when stderr is a terminal, one plain
  `key=value` line per event otherwise (`raftmq up` collects it in `node.log`).

Being on the root logger, the records of pysyncobj, asyncio and other libraries that use the
stdlib `logging` go through the same handlers. The level comes from `level`, else from
`$RAFTMQ_LOG_LEVEL`, else `info`.

`configure_logging` may be called again (nodes run in-process in tests and under the embedded
broker): it replaces the handlers it installed before rather than adding more;
`reset_logging` removes them and restores structlog's defaults.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

LOG_FILE_NAME = "raftmq.log.jsonl"
LEVEL_ENV = "RAFTMQ_LOG_LEVEL"
LEVELS = ("debug", "info", "warning", "error", "critical")
DEFAULT_LEVEL = "info"
# A member logs a few lines per client connection and per leadership change: 64 MiB is weeks
# of an ordinary node's events, and six files bound what a chatty (debug) node can fill.
LOG_FILE_MAX_BYTES = 64 * 2**20
LOG_FILE_BACKUPS = 5
# Fields whose values are credentials whatever event carries them.
SECRET_KEYS = frozenset({"password", "passcode", "secret", "token"})
REDACTED = "<redacted>"

_HEAD_KEYS = ("timestamp", "level", "logger", "event")
_OURS = "_raftmq_handler"  # attribute marking the handlers configure_logging installed
_previous_root_level: int | None = None


def parse_level(level: str | int | None) -> int:
    """`level` (a name, a stdlib number or None for `$RAFTMQ_LOG_LEVEL` / info) as a number."""
    if isinstance(level, int):
        return level
    source = "level"
    if level is None:
        level = os.environ.get(LEVEL_ENV) or DEFAULT_LEVEL
        source = f"${LEVEL_ENV}"
    name = level.strip().lower()
    if name not in LEVELS:
        raise ValueError(f"{source}: unknown log level {level!r} (expected one of: {', '.join(LEVELS)})")
    return logging.getLevelNamesMapping()[name.upper()]


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """A field named like a credential never reaches a handler with its value."""
    for key in SECRET_KEYS.intersection(event_dict):
        if event_dict[key] is not None:
            event_dict[key] = REDACTED
    return event_dict


def _leading_keys(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """`timestamp`, `level`, `logger`, `event` first: a line reads like the console's."""
    head = {key: event_dict.pop(key) for key in _HEAD_KEYS if key in event_dict}
    head.update(event_dict)
    return head


def _shared_processors() -> list[Processor]:
    """What every record goes through, ours and the stdlib's alike, before it is rendered."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]


def _file_formatter() -> logging.Formatter:
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _leading_keys,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
    )


def _console_formatter(pretty: bool) -> logging.Formatter:
    if pretty:
        renderer: Processor = structlog.dev.ConsoleRenderer(
            colors="NO_COLOR" not in os.environ,
            # Locals could hold a password or a passcode: never print them.
            exception_formatter=structlog.dev.RichTracebackFormatter(show_locals=False),
        )
        processors: list[Processor] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]
    else:
        processors = [
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # The traceback becomes one escaped value: still one line per event.
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event", "logger"],
                                                  drop_missing=True),
        ]
    return structlog.stdlib.ProcessorFormatter(foreign_pre_chain=_shared_processors(), processors=processors)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def configure_logging(
    *,
    json_path: str | os.PathLike[str] | None = None,
    console: bool | None = None,
    level: str | int | None = None,
) -> None:
    """Route structlog and stdlib logging to a JSON-lines file at `json_path` (none: no file)
    and to stderr. `console`: True pretty, False plain `key=value` lines, None pretty exactly
    when stderr is a terminal. Calling it again replaces the previous handlers."""
    global _previous_root_level
    numeric_level = parse_level(level)
    handlers: list[logging.Handler] = []
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=LOG_FILE_MAX_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8"
        )
        file_handler.setFormatter(_file_formatter())
        handlers.append(file_handler)
    pretty = _stderr_is_terminal() if console is None else console
    console_handler = logging.StreamHandler(sys.stderr)
    console_handler.setFormatter(_console_formatter(pretty))
    handlers.append(console_handler)

    root = logging.getLogger()
    if _previous_root_level is None:
        _previous_root_level = root.level
    _remove_our_handlers(root)
    for handler in handlers:
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    root.setLevel(numeric_level)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: module-level loggers must follow a later configure_logging or
        # reset_logging in the same process (tests, embedded brokers); nothing logs per message.
        cache_logger_on_first_use=False,
    )


def log_through_stdlib_if_unconfigured() -> None:
    """For a process that embeds raftmq (a test run, an application with an EmbeddedBroker)
    and has not configured structlog: send our events to the standard `logging` module, which
    shows them only where the application (or pytest's log capture) asks. structlog's own
    default prints every event to stdout, from whatever thread logs it, even in the middle of
    pytest's progress line."""
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def reset_logging() -> None:
    """Remove the handlers `configure_logging` installed and restore structlog's defaults."""
    global _previous_root_level
    root = logging.getLogger()
    _remove_our_handlers(root)
    if _previous_root_level is not None:
        root.setLevel(_previous_root_level)
        _previous_root_level = None
    structlog.reset_defaults()


def our_handlers() -> list[logging.Handler]:
    """The handlers `configure_logging` installed (for tests and diagnostics)."""
    return [handler for handler in logging.getLogger().handlers if getattr(handler, _OURS, False)]


def _remove_our_handlers(root: logging.Logger) -> None:
    for handler in list(root.handlers):
        if getattr(handler, _OURS, False):
            root.removeHandler(handler)
            handler.close()

