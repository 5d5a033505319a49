"""Which destinations a cluster connection covers: Artemis's `address` setting.

`address` is a comma list of destination-name patterns (ActiveMQ's syntax, raftmq.patterns:
`orders.>`, `prices.*`); a pattern starting with `!` excludes. A name is covered when it
matches an include (or there is none) and no exclude. The names are those after `/queue/` or
`/topic/`, so one connection covers a queue and a topic of the same name alike — unless the
pattern itself starts with `/queue/` or `/topic/` (`/queue/orders.>`), which covers that kind
only (ActiveMQ Classic's destination lists name the kind; cluster.network). An empty
`address` covers everything. Destinations raftmq keeps for itself (`$.raftmq.` names) are
never covered.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftmq.patterns import check_pattern, pattern_matches

INTERNAL_NAME_PREFIX = "$.raftmq."


@dataclass(frozen=True, slots=True)
class AddressFilter:
    text: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AddressFilter:
        """Raise `ValueError` naming the bad pattern."""
        include: list[str] = []
        exclude: list[str] = []
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            target = include
            if item.startswith("!"):
                item = item[1:].strip()
                target = exclude
            check_pattern(_split(item)[1])
            target.append(item)
        return cls(text, tuple(include), tuple(exclude))

    def covers(self, destination: str) -> bool:
        """Whether `destination` ("/queue/NAME" or "/topic/NAME") travels on this connection."""
        kind, name = _split(destination)
        if name.startswith(INTERNAL_NAME_PREFIX):
            return False
        if self.include and not any(_matches(item, kind, name) for item in self.include):
            return False
        return not any(_matches(item, kind, name) for item in self.exclude)


_KINDS = ("/queue/", "/topic/")


def _split(text: str) -> tuple[str | None, str]:
    """("/queue/", "orders") of "/queue/orders"; (None, "orders") of a bare "orders"."""
    for kind in _KINDS:
        if text.startswith(kind):
            return kind, text[len(kind):]
    return None, text.split("/", 2)[-1] if text.startswith("/") else text


def _matches(item: str, kind: str | None, name: str) -> bool:
    wanted, pattern = _split(item)
    return (wanted is None or wanted == kind) and pattern_matches(pattern, name)
