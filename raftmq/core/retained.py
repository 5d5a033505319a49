"""Retained messages (MQTT's): the last message sent to a topic with the header
`mqtt-retain:true` is kept for that topic, and a subscription that asks for them (a `Recover`
after its Subscribe) gets a copy of each kept message its destination matches, marked
`mqtt-retained:1` (so an MQTT session sets the PUBLISH's retain flag). `mqtt-retain:clear` (MQTT's
empty retained message) forgets the topic's. The message is delivered to the topic's subscribers
as any other, either way.

The kept body is bytes, in the state and in snapshots, not a body-journal reference: a retained
message may be kept for months, and a reference would keep every body-journal segment written
after it from being collected. Retained messages are few and small (a device's last state); a
SEND inside a transaction is not retained.
"""

from __future__ import annotations

from raftmq.core.commands import Recover
from raftmq.core.dispatch import Dispatcher
from raftmq.core.message import Message
from raftmq.core.message_headers import read_headers
from raftmq.core.model import selector_headers
from raftmq.core.state import BrokerState
from raftmq.core.store_observer import RETAINED as RECOVERED
from raftmq.core.temporary import MARK
from raftmq.core.validation import TOPIC_PREFIX, destination_name
from raftmq.patterns import pattern_matches
from raftmq.protocol.header_block import first

RETAIN = "mqtt-retain"  # a SEND's: "true" keeps it for its topic, "clear" forgets the topic's
RETAINED_MARK = "mqtt-retained"  # a recovered copy's: "1"


def keep(state: BrokerState, destination: str, headers: str, body: object, now: int) -> None:
    """After a SEND whose header block names `mqtt-retain` (the caller looked): keep or forget."""
    if not destination.startswith(TOPIC_PREFIX) or MARK in destination:
        return
    value = first(headers, RETAIN)
    if value == "clear":
        state.retained.pop(destination, None)
    elif value == "true" and isinstance(body, (bytes, bytearray, memoryview)):
        priority, expires, persistent, group, _dupl_id = read_headers(headers)
        state.retained.pop(destination, None)  # the newest last: kept in the order they were retained
        state.retained[destination] = Message("", destination, headers, bytes(body), priority, expires, now, group,
                                              persistent)


def recover(state: BrokerState, dispatch: Dispatcher, command: Recover) -> None:
    """A copy of each retained message the subscription's destination matches, into its store."""
    session = state.sessions.get(command.session)
    sub = session.subs.get(command.sub_id) if session is not None else None
    if sub is None or sub.store.shared or not sub.destination.startswith(TOPIC_PREFIX):
        return
    wanted = destination_name(sub.destination)
    gone = [topic for topic, message in state.retained.items() if message.expires and message.expires <= command.now]
    for topic in gone:
        del state.retained[topic]
    mark = f"{RETAINED_MARK}:1\n"
    for topic, message in state.retained.items():
        if not pattern_matches(wanted, destination_name(topic)):
            continue
        if sub.selector is not None and not sub.selector.matches(selector_headers(message)):
            continue
        copy = Message(dispatch.mint_id(), topic, message.headers + mark, message.body, message.priority,
                       message.expires, message.timestamp, message.group, message.persistent)
        dispatch.enqueue(sub.store, copy, RECOVERED)

