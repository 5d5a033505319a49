"""The rules a SUBSCRIBE or a BROWSE must pass before the core acts on it.

Pure checks on a command and the session that sent it: each either returns what the command
asked for (its prefetch, its compiled selector) or raises `Refused` naming the broken rule,
which the broker turns into a Reject. The checks run in a fixed order, so a command that
breaks several rules is always refused for the same one on every replica.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftmq.errors import SelectorError
from raftmq.patterns import check_pattern

if TYPE_CHECKING:  # the checks import what they need when they first run: a configuration that
    # reads only the destination names below (raftmq.core.address_settings, `raftmq status`)
    # does not load the commands, the model and the selector compiler with them
    from raftmq.core.commands import Browse, Subscribe
    from raftmq.core.model import Session
    from raftmq.core.selector import Selector

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"


class Refused(Exception):
    """A command broke a rule: `message` and `detail` go into the Reject effect."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message, detail)
        self.message = message
        self.detail = detail


def is_valid_destination(destination: str) -> bool:
    return len(destination) > len(QUEUE_PREFIX) and (
        destination.startswith(QUEUE_PREFIX) or destination.startswith(TOPIC_PREFIX)
    )


def destination_name(destination: str) -> str:
    """The name after `/queue/` or `/topic/`."""
    return destination[len(QUEUE_PREFIX):] if destination.startswith(QUEUE_PREFIX) else destination[len(TOPIC_PREFIX):]


def is_wildcard(destination: str) -> bool:
    """Does the name use ActiveMQ's wildcards (`*` one element, `>` the rest)?"""
    return "*" in destination or ">" in destination


def check_wildcards(destination: str, subscribing: bool) -> None:
    """Refused for a name whose wildcards are misplaced (`a.>.b`, `a*`), and for a wildcard
    where only a subscription may have one (a SEND)."""
    if not is_wildcard(destination):
        return
    if not subscribing:
        raise Refused("wildcards are for subscriptions", f"{destination}: a message goes to one destination")
    try:
        check_pattern(destination_name(destination))
    except ValueError as exc:
        raise Refused("invalid destination", f"{destination}: {exc}") from None



def check_subscribe(session: Session, command: Subscribe, default_prefetch: int) -> tuple[int, Selector | None]:
    """The prefetch and selector of a valid SUBSCRIBE (a prefetch of 0 means the default)."""
    from raftmq.core.commands import ACK_MODES

    _check_sub_id(session, command.sub_id)
    if not is_valid_destination(command.destination):
        raise Refused("invalid destination", command.destination)
    check_wildcards(command.destination, subscribing=True)
    if command.ack not in ACK_MODES:
        raise Refused("invalid ack mode", command.ack)
    if command.prefetch < 0:
        raise Refused("invalid prefetch", str(command.prefetch))
    return command.prefetch or default_prefetch, _selector(command.selector)


def check_browse(session: Session, command: Browse) -> Selector | None:
    """The selector of a valid BROWSE (of a queue, with a limit within bounds)."""
    from raftmq.core.commands import MAX_BROWSE_LIMIT

    _check_sub_id(session, command.sub_id)
    destination = command.destination
    if not destination.startswith(QUEUE_PREFIX) or not is_valid_destination(destination):
        raise Refused("browsing works on queues", destination)
    check_wildcards(destination, subscribing=True)
    if is_wildcard(destination):
        raise Refused("a browser reads one queue", f"{destination}: browse each queue the pattern matches")
    if not 0 < command.limit <= MAX_BROWSE_LIMIT:
        raise Refused("invalid browse limit", str(command.limit))
    return _selector(command.selector)


def _check_sub_id(session: Session, sub_id: str) -> None:
    # A browse takes a subscription id for its copies, so it may not reuse a live one either.
    if sub_id in session.subs:
        raise Refused("duplicate subscription id", sub_id)


def _selector(text: str | None) -> Selector | None:
    if text is None or not text.strip():
        return None
    from raftmq.core.selector import compile_selector

    try:
        return compile_selector(text)
    except SelectorError as error:
        raise Refused("invalid selector", str(error)) from error
