"""MQTT topics in raftmq's address space (raftmq.protocol.mqtt.topics): the mapping is a bijection
on names, and for any filter and topic, raftmq's own matcher (raftmq.patterns, what the core's
dispatch runs) over the filter's destinations, with the `$` rule, gives exactly MQTT's matching."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftmq.errors import MqttError
from raftmq.patterns import pattern_matches
from raftmq.protocol.mqtt import reasons
from raftmq.protocol.mqtt.topics import (
    TOPIC_PREFIX,
    destination_of,
    destinations_of,
    dollar_excluded,
    matches,
    shared,
    topic_of,
)

PROPERTY = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
level = st.sampled_from(["", "a", "b", "$SYS", "v1.2", "x.", "é"])
topics = st.lists(level, min_size=1, max_size=4).map("/".join)
filters = st.tuples(st.lists(st.sampled_from(["", "a", "b", "$SYS", "v1.2", "+"]), max_size=3),
                    st.booleans()).map(lambda t: "/".join([*t[0], "#"] if t[1] else t[0])).filter(bool)


def raftmq_matches(topic_filter: str, topic: str) -> bool:
    name = destination_of(topic)[len(TOPIC_PREFIX):]
    found = any(pattern_matches(pattern[len(TOPIC_PREFIX):], name) for pattern in destinations_of(topic_filter))
    return found and not (dollar_excluded(topic_filter) and topic.startswith("$"))


@PROPERTY
@given(filters, topics)
def test_raftmq_matching_over_the_mapped_filter_is_mqtts_matching(topic_filter: str, topic: str) -> None:
    assert raftmq_matches(topic_filter, topic) == matches(topic_filter, topic)


@PROPERTY
@given(topics)
def test_a_topic_maps_to_one_destination_and_back(topic: str) -> None:
    destination = destination_of(topic)
    assert destination.startswith(TOPIC_PREFIX) and topic_of(destination) == topic


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), [
    ("sport/tennis/#", "sport/tennis", True),  # '#' matches the parent level
    ("sport/tennis/#", "sport/tennis/player1/ranking", True),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),  # an empty level is a level
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("#", "$SYS/broker", False),  # a filter starting with a wildcard never matches a '$' topic
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/broker", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
])
def test_the_specifications_examples(topic_filter: str, topic: str, expected: bool) -> None:
    assert matches(topic_filter, topic) is expected
    assert raftmq_matches(topic_filter, topic) is expected


def test_the_names_a_stomp_client_sees() -> None:
    assert destination_of("sensors/temp") == "/topic/sensors.temp"
    assert destination_of("v1.2/x") == "/topic/v1/2.x"  # '/' and '.' swapped
    assert destination_of("a//b") == "/topic/a..b"
    assert destinations_of("sensors/+/temp") == ["/topic/sensors.*.temp"]
    assert destinations_of("sensors/#") == ["/topic/sensors", "/topic/sensors.>"]
    assert destinations_of("#") == ["/topic/>"]
    assert topic_of("/queue/orders") is None


@pytest.mark.parametrize("bad", ["", "a/#/b", "a#", "a/b+", "a/*", "a/>/b"])
def test_a_filter_mqtt_or_raftmq_cannot_hold_is_refused_with_its_reason(bad: str) -> None:
    with pytest.raises(MqttError) as refused:
        destinations_of(bad)
    assert refused.value.reason_code == reasons.TOPIC_FILTER_INVALID


def test_a_topic_raftmq_would_read_as_a_wildcard_is_refused() -> None:
    for bad in ("a/*", "price>3"):
        with pytest.raises(MqttError) as refused:
            destination_of(bad)
        assert refused.value.reason_code == reasons.TOPIC_NAME_INVALID


def test_shared_subscriptions() -> None:
    assert shared("$share/workers/jobs/#") == ("workers", "jobs/#")
    assert shared("jobs/#") == (None, "jobs/#")
    for bad in ("$share/workers", "$share//jobs", "$share/w+/jobs"):
        with pytest.raises(MqttError):
            shared(bad)
