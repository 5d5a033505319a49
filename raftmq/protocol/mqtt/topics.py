"""MQTT topics and topic filters in raftmq's one address space, by the convention ActiveMQ,
Artemis and RabbitMQ share: an MQTT topic's levels are a destination's elements, `/` and `.`
swapped, so MQTT `sensors/temp` is STOMP `/topic/sensors.temp` and MQTT `v1.2/x` is
`/topic/v1/2.x`; `+` is `*` and `#` is `>`.

MQTT's whole topic syntax is kept: empty levels (`a//b` is `a..b`, `/a` is `.a`); `#` matches its
parent level too (`a/#` matches `a`: it is subscribed as `a` and `a.>`); a filter that starts with
a wildcard does not match a topic that starts with `$` (`dollar_excluded`: the session drops
such a match). What raftmq's names cannot hold is refused with MQTT's reason: a topic with a `*` or
`>` in it (raftmq reads those as wildcards), a filter that breaks MQTT's rules.
"""

from __future__ import annotations

from raftmq.errors import MqttError
from raftmq.protocol.mqtt.reasons import TOPIC_FILTER_INVALID, TOPIC_NAME_INVALID

TOPIC_PREFIX = "/topic/"
SHARE_PREFIX = "$share/"
_SWAP = str.maketrans("/.", "./")


def destination_of(topic: str) -> str:
    """The raftmq destination an MQTT PUBLISH to `topic` goes to."""
    if "*" in topic or ">" in topic:
        raise MqttError(TOPIC_NAME_INVALID, "topic name invalid",
                        f"{topic!r}: raftmq reads '*' and '>' in a name as wildcards")
    return TOPIC_PREFIX + topic.translate(_SWAP)


def topic_of(destination: str) -> str | None:
    """The MQTT topic of a raftmq topic destination; None for anything else (a queue)."""
    if not destination.startswith(TOPIC_PREFIX):
        return None
    return destination[len(TOPIC_PREFIX):].translate(_SWAP)


def check_filter(topic_filter: str) -> None:
    """MQTT's rules for a topic filter: not empty; `#` alone in the last level; `+` alone in its level."""
    if not topic_filter:
        raise MqttError(TOPIC_FILTER_INVALID, "topic filter invalid", "an empty topic filter")
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise MqttError(TOPIC_FILTER_INVALID, "topic filter invalid",
                            f"{topic_filter!r}: '#' must be a whole level, and the last")
        if "+" in level and level != "+":
            raise MqttError(TOPIC_FILTER_INVALID, "topic filter invalid",
                            f"{topic_filter!r}: '+' must be a whole level")
        if "*" in level or ">" in level:
            raise MqttError(TOPIC_FILTER_INVALID, "topic filter invalid",
                            f"{topic_filter!r}: raftmq reads '*' and '>' in a name as wildcards")


def shared(topic_filter: str) -> tuple[str | None, str]:
    """(share name, filter) of `$share/NAME/FILTER`; (None, filter) for a filter not shared."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    name, slash, rest = topic_filter[len(SHARE_PREFIX):].partition("/")
    if not name or not slash or "+" in name or "#" in name:
        raise MqttError(TOPIC_FILTER_INVALID, "topic filter invalid",
                        f"{topic_filter!r}: a shared subscription is $share/NAME/FILTER")
    return name, rest


def destinations_of(topic_filter: str) -> list[str]:
    """The raftmq destinations (patterns where the filter has wildcards) whose union is what the
    MQTT filter matches, but for `dollar_excluded`: `a/#` is `a` and `a.>`; `#` alone is `>`."""
    check_filter(topic_filter)
    levels = ["*" if level == "+" else level.translate(_SWAP) for level in topic_filter.split("/")]
    if levels[-1] != "#":
        return [TOPIC_PREFIX + ".".join(levels)]
    parent = levels[:-1]
    whole = [TOPIC_PREFIX + ".".join([*parent, ">"])]
    return whole if not parent else [TOPIC_PREFIX + ".".join(parent), *whole]


def dollar_excluded(topic_filter: str) -> bool:
    """Does the filter start with a wildcard, so that it matches no topic starting with `$`?"""
    return topic_filter.startswith(("+", "#"))


def matches(topic_filter: str, topic: str) -> bool:
    """MQTT's matching, read straight from the specification: the reference the mapping is held to."""
    if dollar_excluded(topic_filter) and topic.startswith("$"):
        return False
    wanted, levels = topic_filter.split("/"), topic.split("/")
    for index, level in enumerate(wanted):
        if level == "#":
            return True  # this level and all below, the parent included
        if index >= len(levels) or (level != "+" and level != levels[index]):
            return False
    return len(wanted) == len(levels)
