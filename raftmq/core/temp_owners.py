"""Who owns which temporary destination (raftmq.core.temporary names them), in the core.

A temporary destination is an ordinary queue or topic plus its owner's record
(`Session.temps`, so it goes when the session ends, on every replica; `BrokerState.
temp_owners` maps each owner's token to its session, derived again after a snapshot load from
the destinations' names). A SEND to one whose owner is gone is dropped (a late reply has
nobody to go to), unless a cluster connection knows a group with a consumer for it: the
owner lives there. Only the owner may consume one, and never durably.
"""

from __future__ import annotations

from raftmq.core.cluster_routing import ClusterRouting
from raftmq.core.dispatch import Dispatcher
from raftmq.core.model import Session
from raftmq.core.state import BrokerState
from raftmq.core.temporary import alias_of, home_group, owner_token, token_of
from raftmq.core.validation import QUEUE_PREFIX
from raftmq.protocol.header_block import first, has
from raftmq.routing.route import TO_HEADER


def refusal(session: Session, destination: str, durable: bool) -> str | None:
    """Why `session` may not consume `destination`, a temporary one (None: it may)."""
    token = owner_token(destination)
    if token != token_of(session.session_id):
        return f"{destination}: a temporary destination of another connection"
    if durable:
        return f"{destination}: a temporary topic ends with its connection, so it takes no durable subscription"
    return None


def claim(state: BrokerState, session: Session, destination: str) -> None:
    """Record `destination` (a temporary one this session names) as the session's."""
    if destination not in session.temps and owner_token(destination) == token_of(session.session_id):
        session.temps[destination] = None
        state.temp_owners[token_of(session.session_id)] = session.session_id


def reply_subscription(session: Session, headers: str) -> str | None:
    """The session's own temporary queue its SEND names in `reply-to` when the session does
    not consume it yet (RabbitMQ subscribes the connection to it), else None."""
    value = first(headers, "reply-to")
    if value is not None and owner_token(value) == token_of(session.session_id) and value.startswith(QUEUE_PREFIX):
        if not any(sub.destination == value for sub in session.subs.values()) and alias_of(value) not in session.subs:
            return value
    return None


def stays(state: BrokerState, routing: ClusterRouting | None, destination: str, headers: str, body: object,
          now: int) -> bool:
    """Whether a message for temporary `destination` is published here: its owner is a session
    of this group. One whose name says it lives in another group is sent there (on the way in,
    not when it passes through: those carry their target); any other is dropped, its owner
    being gone."""
    token = owner_token(destination)
    home = home_group(destination)
    if routing is not None and home is not None and home != routing.own:
        if not has(headers, TO_HEADER):
            routing.send_to_group(destination, headers, body, now, home)
            return False
        return True  # passing through: the cluster routing passes it on
    return bool(token) and token in state.temp_owners


def forget(state: BrokerState, session: Session, dispatch: Dispatcher) -> None:
    """The session ended: its temporary destinations go, with what they held."""
    for destination in session.temps:
        store = state.queues.pop(destination, None)
        if store is not None:
            dispatch.discard(store)
        topic = state.topics.pop(destination, None)
        if topic is not None:
            for sub in list(topic.subs):
                dispatch.discard(sub.store)
            dispatch.patterns.pop(destination, None)
    session.temps.clear()
    state.temp_owners.pop(token_of(session.session_id), None)


def index_owners(state: BrokerState) -> None:
    """After a snapshot load: each session's temporary destinations, found by their names."""
    tokens = {token_of(session_id): session for session_id, session in state.sessions.items()}
    for destination in [*state.queues, *state.topics]:
        token = owner_token(destination)
        session = tokens.get(token) if token else None
        if session is not None:
            session.temps[destination] = None
            state.temp_owners[token_of(session.session_id)] = session.session_id
