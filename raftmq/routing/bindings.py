"""What a group knows of the other groups' destinations: bindings learned hop by hop.

Each group's leader tells each neighbour, in an `Advert`, what can be reached through it:
its own queues (with their consumers' selectors) and topic subscriptions (durable ones too,
active or not) at one hop, and what it learned from its other neighbours one hop further —
never what it learned from that neighbour itself (split horizon), never the neighbour's own
bindings, and nothing beyond the destination's `max_hops`. The receiving core keeps the
latest advert of each neighbour as committed state (raftmq.core.cluster_routing), so a new leader
routes as the old one did.

Consumers are summarised as (selector text or None, count): the routing decision only asks
whether some consumer of a group would take a message. A queue binding also says whether that
group's queue has room (`Binding.room`): no message waits there and one of its consumers could
take another delivery now. LOCAL_FIRST sends overflow and moves backlogs only to groups with
room. On the wire the bindings without room are listed apart (`busy`), so that an advert from
a version that does not know room reads as "room everywhere" (ON_DEMAND's assumption).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

Consumers = tuple[tuple[str | None, int], ...]  # (selector, how many), in selector order


@dataclass(frozen=True, slots=True)
class Binding:
    """Group `group` has `destination`, `hops` links away from the advert's receiver."""

    destination: str
    group: str
    hops: int
    consumers: Consumers  # a queue's active consumers; a topic's subscriptions
    room: bool = True  # a queue: nothing waits there and a consumer could take another message


@dataclass(frozen=True, slots=True)
class Advert:
    """What neighbour `sender` advertises; `position` orders its adverts (a later one replaces
    an earlier one; a stale one arriving late is ignored)."""

    sender: str
    position: int
    groups: tuple[tuple[str, int], ...]  # every group reachable through the sender, with hops
    bindings: tuple[Binding, ...]


@dataclass(frozen=True, slots=True)
class Route:
    """How to reach `group` from here: `hops` links, the first of them to `via`."""

    group: str
    hops: int
    via: str
    consumers: Consumers
    room: bool = True  # as the group's `Binding.room` says

    @property
    def consumer_count(self) -> int:
        return sum(count for _, count in self.consumers)


def summarise(selectors: Iterable[str | None]) -> Consumers:
    counts: dict[str | None, int] = {}
    for selector in selectors:
        counts[selector] = counts.get(selector, 0) + 1
    return tuple(sorted(counts.items(), key=lambda item: (item[0] is not None, item[0] or "")))


def advert_for(
    own: str,
    neighbour: str,
    position: int,
    local: Mapping[str, Consumers],
    learned: Mapping[str, Advert],
    max_hops: Callable[[str], int | None],
    busy: Iterable[str] = (),
) -> Advert:
    """The advert `own` sends `neighbour`. `local`: own destinations and their consumers;
    `learned`: the latest advert of each of own's neighbours; `max_hops(destination)`: the
    limit of the connection linking own and neighbour that governs it (None: not carried);
    `busy`: own queues without room."""
    best: dict[tuple[str, str], Binding] = {}
    full = set(busy)
    for destination, consumers in local.items():
        limit = max_hops(destination)
        if limit is not None and limit >= 1:
            best[(destination, own)] = Binding(destination, own, 1, consumers, destination not in full)
    groups: dict[str, int] = {own: 1}
    for sender in sorted(learned):
        if sender == neighbour:
            continue  # split horizon
        advert = learned[sender]
        for group, hops in advert.groups:
            if group not in (neighbour, own) and hops + 1 < groups.get(group, 1 << 30):
                groups[group] = hops + 1
        for binding in advert.bindings:
            if binding.group in (neighbour, own):
                continue
            limit = max_hops(binding.destination)
            if limit is None or binding.hops + 1 > limit:
                continue
            key = (binding.destination, binding.group)
            known = best.get(key)
            if known is None or binding.hops + 1 < known.hops:
                best[key] = Binding(binding.destination, binding.group, binding.hops + 1, binding.consumers,
                                    binding.room)
    bindings = tuple(sorted(best.values(), key=lambda b: (b.destination, b.group)))
    return Advert(own, position, tuple(sorted(groups.items())), bindings)


def routes(learned: Mapping[str, Advert], own: str) -> tuple[dict[str, dict[str, Route]], dict[str, tuple[int, str]]]:
    """From the neighbours' adverts: per destination, the best route to each group holding it
    (fewest hops, then the neighbour first in name order), and per group its distance and next
    hop. Deterministic: every replica computes the same from the same adverts."""
    by_destination: dict[str, dict[str, Route]] = {}
    next_hops: dict[str, tuple[int, str]] = {}
    for sender in sorted(learned):
        advert = learned[sender]
        for group, hops in advert.groups:
            if group != own and (group not in next_hops or hops < next_hops[group][0]):
                next_hops[group] = (hops, sender)
        for binding in advert.bindings:
            if binding.group == own:
                continue
            table = by_destination.setdefault(binding.destination, {})
            known = table.get(binding.group)
            if known is None or binding.hops < known.hops:
                table[binding.group] = Route(binding.group, binding.hops, sender, binding.consumers, binding.room)
    return by_destination, next_hops


# -- the wire form: JSON in a header of the advert's SEND -------------------------------------


def encode_advert(advert: Advert) -> str:
    data: dict[str, object] = {
        "sender": advert.sender,
        "position": advert.position,
        "groups": [list(item) for item in advert.groups],
        "bindings": [[b.destination, b.group, b.hops, [list(c) for c in b.consumers]] for b in advert.bindings],
    }
    busy = [[b.destination, b.group] for b in advert.bindings if not b.room]
    if busy:
        data["busy"] = busy
    return json.dumps(data, separators=(",", ":"))


def decode_advert(text: str) -> Advert:
    """Raise `ValueError` on anything but what `encode_advert` writes."""
    try:
        data = json.loads(text)
        sender = data["sender"]
        position = data["position"]
        groups = tuple((str(g), _count(h)) for g, h in data["groups"])
        busy = {(str(d), str(g)) for d, g in data.get("busy", ())}
        bindings = tuple(
            Binding(str(d), str(g), _count(h), tuple((None if s is None else str(s), _count(n)) for s, n in consumers),
                    (str(d), str(g)) not in busy)
            for d, g, h, consumers in data["bindings"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a cluster advert: {exc}") from None
    if not isinstance(sender, str) or not sender or isinstance(position, bool) or not isinstance(position, int):
        raise ValueError("not a cluster advert: bad sender or position")
    return Advert(sender, position, groups, bindings)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a count, got {value!r}")
    return value
