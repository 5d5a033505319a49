"""Will messages (MQTT's): a session may leave a message behind (the `Will` command, after its
Connect), which the core publishes when the session ends any way but the client's own goodbye:
its connection lost, its keep-alive missed, its node gone (the next leader's sweep ends it), or
another connection taking its client id over. The client's goodbye clears it first (a `Will`
with no destination), so a session's end never needs to say how it ended.

Kept with its body as bytes, like a retained message (raftmq.core.retained), in the state and in
snapshots; one with `mqtt-retain:true` is retained too when it is published. When the session's
end publishes it — at once, or after its delay (MQTT 5's will delay interval) unless the client
came back first — is raftmq.core.lifetimes's.
"""

from __future__ import annotations

from raftmq.core.commands import Will
from raftmq.core.state import BrokerState


def set_will(state: BrokerState, command: Will) -> None:
    if command.session not in state.sessions:
        return
    if command.destination:
        state.wills[command.session] = command
    else:
        state.wills.pop(command.session, None)
