"""What an MQTT session (raftmq.server.mqtt.session) decides and its shell
(raftmq.server.mqtt.connection) carries out."""

from __future__ import annotations

from dataclasses import dataclass

from raftmq.core.commands import Command


@dataclass(slots=True)
class Propose:
    commands: list[Command]


@dataclass(slots=True)
class Write:
    data: bytes


@dataclass(slots=True)
class CheckLogin:
    username: str | None
    password: str | None


@dataclass(slots=True)
class Close:
    """Close the connection (after writing what was decided before, a DISCONNECT or CONNACK among it)."""

    reason: str
    detail: str = ""


Decision = Propose | Write | CheckLogin | Close
