"""How long what an MQTT client keeps outlives its session (MQTT 5's session expiry), and when its
will goes (the will delay). Part of the pure core: the `Expiry` command, a session's end, Ticks.

What a client keeps is named with its key (raftmq.server.mqtt.kept.prefix_of): its kept
subscriptions (durable ones), its places in shares (raftmq.core.shares), its QoS 2 keys
(raftmq.core.exactly_once). Each MQTT session claims its client's key when it connects (an
`Expiry` behind its Connect) and says how long that state lives once the session ends:
`after_ms`, or -1 for "until the client ends it". When the session ends — the client's goodbye, a
lost connection, its leader gone and the next one's sweep — the time starts (`ended`); a later
session claiming the key stops it; a Tick past it drops what the key names (`expire_due`). So a
session the client does not keep (0) leaves nothing behind even when no one was there to clear it.

A will with a delay (raftmq.core.wills) waits here too: published when its delay is over or the
session's state expires, whichever comes first, and not at all if a session claims the key first
(MQTT: the client came back in time). A session with no lifetime (not MQTT's) publishes its will
at once, as does one whose state ends with it.
"""

from __future__ import annotations

from collections.abc import Callable

from raftmq.core import retained, shares
from raftmq.core.commands import Expiry
from raftmq.core.dispatch import Dispatcher
from raftmq.core.model import Lifetime
from raftmq.core.state import BrokerState
from raftmq.core.unsubscribe import drop_topic_subscription

Publish = Callable[[str, str, bytes, int], None]


def claim(state: BrokerState, command: Expiry) -> None:
    if command.session not in state.sessions:
        return
    old = state.lifetimes.get(command.key)
    if old is not None and state.lifetime_of.get(old.session) == command.key:
        del state.lifetime_of[old.session]
    state.lifetimes[command.key] = Lifetime(command.session, command.after_ms)
    state.lifetime_of[command.session] = command.key
    state.delayed_wills.pop(command.key, None)  # back before its will's delay was over: not published


def ended(state: BrokerState, session_id: str, now: int) -> tuple[str, str, bytes, int] | None:
    """A session ended: its key's time starts; its will, to publish now (destination, headers,
    body, now), if it left one that does not wait."""
    key = state.lifetime_of.pop(session_id, None)
    life = state.lifetimes.get(key) if key is not None else None
    if life is not None and life.after_ms >= 0:
        life.due = now + life.after_ms
    will = state.wills.pop(session_id, None)
    if will is None:
        return None
    if will.delay_ms > 0 and key is not None and life is not None and life.after_ms != 0:
        wait = will.delay_ms if life.after_ms < 0 else min(will.delay_ms, life.after_ms)
        state.delayed_wills[key] = (now + wait, will)
        return None
    if "mqtt-retain:" in will.headers:
        retained.keep(state, will.destination, will.headers, will.body, now)
    return will.destination, will.headers, will.body, now


def next_due(state: BrokerState) -> int | None:
    """The earliest time a Tick has a will to publish or a client's state to drop."""
    times = [due for due, _will in state.delayed_wills.values()]
    times += [life.due for life in state.lifetimes.values() if life.due >= 0]
    return min(times) if times else None


def expire_due(state: BrokerState, dispatch: Dispatcher, now: int, publish: Publish) -> None:
    """Publish the wills whose delay is over; drop what each key whose time is up names."""
    if not state.delayed_wills and not state.lifetimes:
        return
    for key in [key for key, (due, _will) in state.delayed_wills.items() if due <= now]:
        _due, will = state.delayed_wills.pop(key)
        publish(will.destination, will.headers, will.body, now)  # (retained as it is published)
    for key in [key for key, life in state.lifetimes.items() if 0 <= life.due <= now]:
        del state.lifetimes[key]
        drop(state, dispatch, key)


def drop(state: BrokerState, dispatch: Dispatcher, key: str) -> None:
    """What `key` names and no live session holds: inactive kept subscriptions (and what they
    collected), places in shares, QoS 2 keys."""
    for name in [name for name in state.durables if name.startswith(key)]:
        sub = state.durables[name]
        if sub.session is None:
            drop_topic_subscription(state, dispatch, sub, [])
    for share in list(state.shares.values()):
        standing = set(share.members.values())
        for holder in [h for h in share.holders if h.startswith(key) and h not in standing]:
            del share.holders[holder]
        if not share.holders:
            shares.drop(state, dispatch, share)
    for once in [once for once in state.once if once.startswith(key)]:
        del state.once[once]
