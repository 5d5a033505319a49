"""An MQTT session's subscriptions, sans-I/O (raftmq.server.mqtt.session owns one): each topic
filter the client subscribed to and the core subscriptions it is made of — a plain filter's
(durable ones, named after the client: raftmq.server.mqtt.kept, where the session is kept), a
shared one's places in the core's shares (raftmq.core.shares); what SUBSCRIBE, UNSUBSCRIBE and a
resumed session propose, and their SUBACK and UNSUBACK once that commits."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Protocol

from raftmq.core.commands import (
    ACK_AUTO,
    ACK_CLIENT_INDIVIDUAL,
    Command,
    Noop,
    Recover,
    Send,
    Share,
    Subscribe,
    Unsubscribe,
)
from raftmq.errors import MqttError
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons as r
from raftmq.protocol.mqtt.codec import encode
from raftmq.protocol.mqtt.packets import MQTT_5
from raftmq.protocol.mqtt.topics import destinations_of, shared
from raftmq.server.mqtt.decisions import Decision, Write
from raftmq.server.mqtt.kept import Kept, Options, durable_name
from raftmq.server.mqtt.outbound import Outbound, Subscription

MAX_QOS = 2


class Owner(Protocol):
    """The session, as its subscriptions read it."""

    session_id: str
    client_id: str | None
    persistent: bool
    version: int | None

    def allowed(self, command: Send | Subscribe | Share, packet: p.Publish | None,
                decisions: list[Decision]) -> bool: ...


class Subscriptions:
    def __init__(self, owner: Owner, out: Outbound) -> None:
        self._owner = owner
        self._out = out
        self.filters: dict[str, Subscription] = {}  # by topic filter (a shared one's whole `$share/...`)
        self.durable: set[str] = set()  # core sub ids of durable subscriptions and kept shares (made or resumed)
        self.subacks: dict[str, p.SubAck] = {}  # by receipt: answered once the Subscribes commit
        self.unsubacks: dict[str, p.UnsubAck] = {}
        self._numbers = itertools.count(1)
        self._no_local = False

    def no_local(self) -> bool:
        """Whether a subscription is no-local (its client's publications are then marked)."""
        return self._no_local

    def _changed(self) -> None:
        self._no_local = any(subscription.no_local for subscription in self.filters.values())

    def resume(self, kept: list[Kept], clean_start: bool, now: int) -> list[Command]:
        """The core subscriptions of what the core kept of the client's session: resumed, or
        (a clean start) dropped."""
        commands: list[Command] = []
        for k in kept:
            sub_id = f"m{next(self._numbers)}"
            if clean_start:
                commands += [Share(self._owner.session_id, sub_id, k.share, k.destination, now, holder=k.name)
                             if k.share is not None else
                             Subscribe(self._owner.session_id, sub_id, k.destination, now, durable_name=k.name),
                             Unsubscribe(self._owner.session_id, sub_id, now, drop_durable=True)]
                continue
            o = k.options
            subscription = self.filters.setdefault(k.topic_filter, Subscription(
                shared(k.topic_filter)[1], k.qos, o.retain_as_published, [], o.identifier, o.no_local))
            subscription.sub_ids.append(sub_id)
            self._out.filters[sub_id] = subscription
            self.durable.add(sub_id)
            commands.append(self._core_subscribe(sub_id, k.destination, k.qos, now, k.name) if k.share is None
                            else self._core_share(sub_id, k.share, k.destination, k.qos, now, k.name))
        self._changed()
        return commands

    def subscribe(self, packet: p.Subscribe, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        """A SUBSCRIBE: the core subscriptions of each filter granted, its SUBACK once they commit."""
        owner = self._owner
        five = owner.version == MQTT_5
        identifier = next(iter(packet.properties.get("subscription_identifier", ())), None)
        codes: list[int] = []
        subscribes: list[Subscribe | Share] = []
        recovering: list[Command] = []  # the topics' retained messages, after the SUBACK's receipt
        for wanted in packet.subscriptions:
            try:
                share, topic_filter = shared(wanted.topic_filter)
                if share is not None and wanted.no_local:
                    raise MqttError(r.PROTOCOL_ERROR, "protocol error", "no local on a shared subscription")
                destinations = destinations_of(topic_filter)
            except MqttError as refused:
                codes.append(refused.reason_code if five else r.SUBACK_FAILURE_311)
                continue
            qos = min(wanted.qos, MAX_QOS)
            options = Options(identifier, wanted.no_local, wanted.retain_as_published, qos == 2) if five \
                else Options(exactly_once=qos == 2)
            subscription = Subscription(topic_filter, qos, options.retain_as_published, [], identifier,
                                        options.no_local)
            made: list[Subscribe | Share] = []
            for index, destination in enumerate(destinations):
                sub_id = f"m{next(self._numbers)}"
                name = (durable_name(owner.client_id or "", index, wanted.topic_filter, options)
                        if owner.persistent else None)
                made.append(self._core_subscribe(sub_id, destination, qos, now, name) if share is None
                            else self._core_share(sub_id, share, destination, qos, now, name))
                subscription.sub_ids.append(sub_id)
            if not all(owner.allowed(subscribe, None, decisions) for subscribe in made):
                codes.append(r.NOT_AUTHORIZED if five else r.SUBACK_FAILURE_311)
                continue
            old = self.filters.pop(wanted.topic_filter, None)  # the same filter again replaces it
            if old is not None:  # (a durable one is resumed by the same name: what it collected stays)
                renamed = (old.identifier, old.no_local, old.retain_as_published, old.qos == 2) != (
                    identifier, options.no_local, options.retain_as_published, qos == 2)
                commands.extend(self.unsubscribe_commands(old, now, drop=not owner.persistent or renamed))
            if share is None and (wanted.retain_handling == 0 or (wanted.retain_handling == 1 and old is None)):
                recovering += [Recover(owner.session_id, subscribe.sub_id, now) for subscribe in made]
            self.filters[wanted.topic_filter] = subscription
            for subscribe in made:
                self._out.filters[subscribe.sub_id] = subscription
                if (subscribe.durable_name if isinstance(subscribe, Subscribe) else subscribe.holder) is not None:
                    self.durable.add(subscribe.sub_id)
            subscribes += made
            codes.append(qos)
        self._changed()
        suback = p.SubAck(packet.packet_id, codes)
        if not subscribes:
            decisions.append(Write(encode(suback, owner.version or p.MQTT_311)))
            return
        receipt = f"s{packet.packet_id}"
        subscribes[-1] = dataclasses.replace(subscribes[-1], receipt=receipt)
        self.subacks[receipt] = suback
        commands.extend(subscribes)
        commands.extend(recovering)

    def _core_subscribe(self, sub_id: str, destination: str, qos: int, now: int, name: str | None,
                        receipt: str | None = None) -> Subscribe:
        """A clean session's subscription takes its messages at once (auto); a durable QoS 1 one
        leaves each in the core until the client's PUBACK, at most the client's window at a time."""
        if name is not None and qos:
            return Subscribe(self._owner.session_id, sub_id, destination, now, ACK_CLIENT_INDIVIDUAL,
                             prefetch=self._out.window, durable_name=name, receipt=receipt)
        return Subscribe(self._owner.session_id, sub_id, destination, now, ACK_AUTO, durable_name=name, receipt=receipt)

    def _core_share(self, sub_id: str, group: str, destination: str, qos: int, now: int, name: str | None) -> Share:
        """A shared subscription's consumer: QoS 1 leaves each message in the core until the
        client's PUBACK (another member gets it if this one leaves first)."""
        if qos:
            return Share(self._owner.session_id, sub_id, group, destination, now, ACK_CLIENT_INDIVIDUAL,
                         self._out.window, name)
        return Share(self._owner.session_id, sub_id, group, destination, now, ACK_AUTO, holder=name)

    def unsubscribe_commands(self, subscription: Subscription, now: int, drop: bool) -> list[Command]:
        for sub_id in subscription.sub_ids:
            self._out.filters.pop(sub_id, None)
        durable = self.durable
        session_id = self._owner.session_id
        commands: list[Command] = [Unsubscribe(session_id, sub_id, now, drop_durable=drop and sub_id in durable)
                                   for sub_id in subscription.sub_ids]
        self.durable.difference_update(subscription.sub_ids)
        return commands

    def unsubscribe(self, packet: p.Unsubscribe, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        codes = []
        for topic_filter in packet.topic_filters:
            subscription = self.filters.pop(topic_filter, None)
            codes.append(r.SUCCESS if subscription is not None else r.NO_SUBSCRIPTION_EXISTED)
            if subscription is not None:
                commands.extend(self.unsubscribe_commands(subscription, now, drop=True))
        self._changed()
        receipt = f"u{packet.packet_id}"
        self.unsubacks[receipt] = p.UnsubAck(packet.packet_id, codes)
        commands.append(Noop(self._owner.session_id, now, receipt))  # answered once what came before committed
