"""Will messages (MQTT's): a session may leave a message behind (the `Will` command, after its
Connect), which the core publishes when the session ends any way but the client's own goodbye:
its connection lost, its keep-alive missed, its node gone (the next leader's sweep ends it), or
another connection taking its client id over. The client's goodbye clears it first (a `Will`
with no destination), so a session's end never needs to say how it ended.

Kept with its body as bytes, like a retained message (raftmq.core.retained), in the state and in
snapshots; a will with a delay (MQTT 5's will delay interval) is published as a scheduled message
(`AMQ_SCHEDULED_DELAY`, raftmq.core.schedule), and one with `mqtt-retain:true` is retained too.
"""

from __future__ import annotations

from raftmq.core import retained
from raftmq.core.commands import Will
from raftmq.core.state import BrokerState


def set_will(state: BrokerState, command: Will) -> None:
    if command.session not in state.sessions:
        return
    if command.destination:
        state.wills[command.session] = command
    else:
        state.wills.pop(command.session, None)


def take(state: BrokerState, session_id: str, now: int) -> tuple[str, str, bytes, int] | None:
    """The ending session's will, to publish now (destination, headers, body, now), if it left one."""
    will = state.wills.pop(session_id, None)
    if will is None:
        return None
    headers = will.headers
    if will.delay_ms > 0:
        headers += f"AMQ_SCHEDULED_DELAY:{will.delay_ms}\n"
    elif "mqtt-retain:" in headers:  # (a delayed one is retained when it is published, not before)
        retained.keep(state, will.destination, headers, will.body, now)
    return will.destination, headers, will.body, now
