"""What a SEND's `mqtt-` headers ask of the core before it is stored: MQTT QoS 2's exactly once on
the way in, and retained messages (raftmq.core.retained).

A QoS 2 PUBLISH carries `mqtt-once:<key>` (the client id and the packet id, raftmq.server.mqtt):
the first SEND with a key is stored and the key kept; another with the same key, while it is kept,
is the client sending the PUBLISH again (it did not see the PUBREC) and is not stored twice, though
it is answered the same. The client's PUBREL releases the key (`Release`), and so does the end of
a session the client does not keep (every key it holds). Kept keys are replicated and in
snapshots, so a client that finishes its flow with the next leader gets exactly once there too.
The header is not stored with the message. A session the client keeps holds a key of its own
too (`Hold`, `<client prefix>session`), released with the others when the session is given up:
so a later connection learns that the session is there ("session present") even when no
publication of its is in flight (a client told otherwise must discard its session state, its
QoS 2 flows under way with it, as MQTT says).
"""

from __future__ import annotations

from raftmq.core import retained
from raftmq.core.commands import Hold, Release
from raftmq.core.state import BrokerState
from raftmq.protocol.header_block import first, without

ONCE = "mqtt-once"
HELD_SESSION = "session"  # what a kept session's own key ends with, after its client's prefix
_ONCE_ONLY = frozenset({ONCE})


def stored_headers(state: BrokerState, destination: str, headers: str, body: object, now: int) -> str | None:
    """The header block to store for a SEND whose headers carry `mqtt-once` or `mqtt-retain`; None
    when it is a QoS 2 publication stored before (its key still kept): then nothing is stored."""
    if "mqtt-once:" in headers:
        key = first(headers, ONCE)
        if key is not None:
            if key in state.once:
                return None
            state.once[key] = None
            headers = without(headers, _ONCE_ONLY)
    if "mqtt-retain:" in headers:
        retained.keep(state, destination, headers, body, now)
    return headers


def hold(state: BrokerState, command: Hold) -> None:
    """Keep a key that is no publication's: an MQTT session the client keeps marks itself."""
    if command.session in state.sessions:
        state.once[command.key] = None


def release(state: BrokerState, command: Release) -> bool:
    """Forget `command.key` (the PUBREL), or with `every` each key it begins (a session's end).
    True when its session is there to be answered."""
    once = state.once
    if command.every:
        for key in [key for key in once if key.startswith(command.key)]:
            del once[key]
    else:
        once.pop(command.key, None)
    return command.session in state.sessions
