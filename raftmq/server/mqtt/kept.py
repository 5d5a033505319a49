"""A persistent MQTT session's state, kept in the core: each core subscription of each of its
topic filters is a durable topic subscription, named after the client id and the filter, so that
whichever leader serves the client next finds them (`kept`) and resumes them. While the client is
away, the subscriptions collect what is published (the core's durable subscriptions, replicated
and in the snapshot like any other); a QoS 1 one holds every message until the client's PUBACK.

A name is `mqtt:<length of the client id>:<client id>:<index>:<topic filter>`: the length makes one
client's prefix no other's, the index tells the two core subscriptions of `a/#` apart. A shared
subscription (`$share/GROUP/FILTER`) is kept as a holder of the core's share (raftmq.core.shares)
named the same way, its filter the whole `$share/...` one: the share keeps collecting for it.
MQTT 5's subscription options that outlive a connection follow the index (`Options`): `i<n>` its
subscription identifier, `n` no-local, `r` retain-as-published, and `x` a subscription granted
QoS 2 (`0i7nx:a/b`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftmq.core.commands import ACK_AUTO

PREFIX = "mqtt:"


def prefix_of(client_id: str) -> str:
    return f"{PREFIX}{len(client_id)}:{client_id}:"


@dataclass(frozen=True, slots=True)
class Options:
    """A subscription's MQTT 5 options that its kept session must remember."""

    identifier: int | None = None  # its subscription identifier, sent with each delivery
    no_local: bool = False  # the client's own publications are not delivered to it
    retain_as_published: bool = False  # a live message keeps its retain flag
    exactly_once: bool = False  # granted QoS 2 (the core's ack mode tells 0 from 1, not 1 from 2)

    def part(self) -> str:
        return ((f"i{self.identifier}" if self.identifier else "") + ("n" if self.no_local else "")
                + ("r" if self.retain_as_published else "") + ("x" if self.exactly_once else ""))


_OPTIONS = re.compile(r"\d+(?:i(\d+))?(n)?(r)?(x)?")


def options_of(index_part: str) -> Options:
    match = _OPTIONS.fullmatch(index_part)
    if match is None:
        return Options()
    identifier, no_local, as_published, exactly_once = match.groups()
    return Options(int(identifier) if identifier else None, bool(no_local), bool(as_published), bool(exactly_once))


def durable_name(client_id: str, index: int, topic_filter: str, options: Options = Options()) -> str:
    return f"{prefix_of(client_id)}{index}{options.part()}:{topic_filter}"


@dataclass(frozen=True, slots=True)
class Kept:
    """One durable subscription of a client's session, as the core holds it."""

    name: str
    topic_filter: str
    destination: str
    qos: int  # 1 or 2 where the core waits for each message's acknowledgement, else 0
    holder: str | None  # the core session it is active in, None while the client is away
    share: str | None = None  # the group of a shared subscription (its name is the share's holder)
    options: Options = field(default_factory=Options)


def kept(durables: Mapping[str, Any], client_id: str, shared: Sequence[tuple[str, Any, str | None]] = ()) -> list[Kept]:
    """The durable subscriptions of `client_id`'s session in the core's `durables` (by name),
    in name order (a filter's core subscriptions together, by index), then its shares: `shared`
    is raftmq.core.shares.kept's (holder, share, consuming session) for the client's prefix."""
    prefix = prefix_of(client_id)
    found = []
    for name in sorted(name for name in durables if name.startswith(prefix)):
        sub = durables[name]
        index_part, _colon, topic_filter = name[len(prefix):].partition(":")
        holder = None if sub.session is None else sub.session.session_id
        options = options_of(index_part)
        found.append(Kept(name, topic_filter, sub.destination, _qos(sub.ack, options), holder, options=options))
    for name, share, holder in shared:
        index_part, _colon, topic_filter = name[len(prefix):].partition(":")
        options = options_of(index_part)
        found.append(Kept(name, topic_filter, share.destination, _qos(share.holders[name], options), holder,
                          share.group, options))
    return found


def _qos(ack: str, options: Options) -> int:
    return 0 if ack == ACK_AUTO else 2 if options.exactly_once else 1
