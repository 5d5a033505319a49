"""MQTT 5 topic aliases a client sends: a number standing for a topic on its connection, set by a
PUBLISH that carries both and used by later ones that carry the number and an empty topic. The
CONNACK allows `TOPIC_ALIAS_MAXIMUM` of them; raftmq sends its clients none."""

from __future__ import annotations

from raftmq.errors import MqttError
from raftmq.protocol.mqtt import reasons as r

TOPIC_ALIAS_MAXIMUM = 64


class TopicAliases:
    def __init__(self, maximum: int = TOPIC_ALIAS_MAXIMUM) -> None:
        self.maximum = maximum
        self._topics: dict[int, str] = {}

    def topic(self, alias: int, topic: str) -> str:
        """The topic of a PUBLISH carrying `alias`: `topic` (now the alias's) or, where it is
        empty, the one the alias was set to; MQTT's reason where neither can be."""
        if not 0 < alias <= self.maximum:
            raise MqttError(r.TOPIC_ALIAS_INVALID, "topic alias invalid",
                            f"topic alias {alias}: this server allows 1 to {self.maximum}")
        if topic:
            self._topics[alias] = topic
            return topic
        known = self._topics.get(alias)
        if known is None:
            raise MqttError(r.PROTOCOL_ERROR, "protocol error", f"topic alias {alias} was never set")
        return known
