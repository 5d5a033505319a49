"""Groups that find each other: Artemis's broadcast and discovery groups, and a file for places
without multicast. Pure: the settings, the announcement's wire form, and the table of what was
heard when; cluster.discovery_tables parses the settings from a topology file, and
raftmq.server.links.discovery does the sending, listening and reading.

    [[broadcast_group]]            # each group's leader announces its group here
    name = "bg"
    group_address = "231.7.7.7"
    group_port = 9876
    broadcast_period_ms = 2000

    [[discovery_group]]            # where a group learns of the others
    name = "dg"
    group_address = "231.7.7.7"    # or: file = "members.json" (re-read every refresh_timeout_ms / 4)
    group_port = 9876
    refresh_timeout_ms = 10000     # a group not heard of for this long is shown down

    [[cluster_connection]]
    name = "main"
    discovery_group = "dg"         # instead of groups/links: every group discovered is a neighbour

An announcement names the group and its members' STOMP addresses, when it was sent (the
sender's clock, ms since the epoch), which announcer sent it (a random id per leader's
announcer) and its sequence number there. With a cluster password it carries an HMAC-SHA256 of
all of that under the password, and one without a valid tag is dropped: a stranger on the
multicast address cannot point the bridges somewhere else. Nor can one replay what it heard
(`Freshness`): an announcement is taken once, only while younger than the discovery group's
`refresh_timeout_ms` (the sender's clock against the receiver's: they must agree within that),
and only after those its announcer sent before; so a group that went down is not shown up
again by its old announcements. Without a password anyone may announce anything: an
announcement of an older raftmq (no time, no sequence) is taken then, as it was. The file holds
`{"groups": {"g2": ["host:port", ...], ...}}` (`parse_members` reads its text).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path

MAX_ANNOUNCEMENT_BYTES = 8192


@dataclass(frozen=True, slots=True)
class BroadcastGroup:
    name: str
    group_address: str
    group_port: int
    broadcast_period_ms: int = 2000
    local_bind_address: str | None = None


@dataclass(frozen=True, slots=True)
class DiscoveryGroup:
    name: str
    group_address: str | None = None
    group_port: int | None = None
    refresh_timeout_ms: int = 10_000
    file: Path | None = None
    local_bind_address: str | None = None


@dataclass(frozen=True, slots=True)
class Announcement:
    cluster: str  # the cluster connection's name: groups of another cluster are ignored
    group: str
    clients: tuple[str, ...]
    sent_ms: int = 0  # the sender's clock (ms since the epoch)
    sender: str = ""  # the announcer (random, one per leader's announcer); "": an older raftmq's
    seq: int = 0  # this announcement's number among the sender's


def encode_announcement(announcement: Announcement, password: str | None) -> bytes:
    body = json.dumps({"cluster": announcement.cluster, "group": announcement.group,
                       "clients": list(announcement.clients), "sent": announcement.sent_ms,
                       "sender": announcement.sender, "seq": announcement.seq},
                      separators=(",", ":"), sort_keys=True)
    tag = "" if password is None else hmac.new(password.encode(), body.encode(), hashlib.sha256).hexdigest()
    return json.dumps({"body": body, "tag": tag}, separators=(",", ":")).encode()


def decode_announcement(data: bytes, password: str | None) -> Announcement:
    """Raise ValueError on anything but a well-formed announcement (signed, when `password`)."""
    if len(data) > MAX_ANNOUNCEMENT_BYTES:
        raise ValueError("announcement too large")
    try:
        outer = json.loads(data)
        body = outer["body"]
        tag = outer["tag"]
        inner = json.loads(body)
        cluster, group, clients = inner["cluster"], inner["group"], inner["clients"]
        sent, sender, seq = inner.get("sent", 0), inner.get("sender", ""), inner.get("seq", 0)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not an announcement: {exc}") from None
    if password is not None:
        wanted = hmac.new(password.encode(), str(body).encode(), hashlib.sha256).hexdigest()
        if not isinstance(tag, str) or not hmac.compare_digest(tag, wanted):
            raise ValueError("announcement not signed with the cluster password")
        if not sender:
            raise ValueError("announcement without a time and sequence (an older raftmq's?): "
                             "a replay could not be told")
    if not (isinstance(cluster, str) and isinstance(group, str) and group and isinstance(clients, list)
            and clients and all(isinstance(c, str) and ":" in c for c in clients)):
        raise ValueError("announcement with a bad group or addresses")
    if not (type(sent) is int and type(seq) is int and isinstance(sender, str) and len(sender) <= 64):
        raise ValueError("announcement with a bad time, sender or sequence")
    return Announcement(cluster, group, tuple(clients), sent, sender, seq)


@dataclass
class Freshness:
    """Which announcements to take: each once, in its sender's order, while younger than
    `max_age_ms` (a discovery group's refresh_timeout_ms). What a listener heard on the
    multicast address and replays is refused, and so is what it heard elsewhere once it is
    older than that."""

    max_age_ms: int
    last: dict[str, tuple[int, int]] = field(default_factory=dict)  # sender -> (its latest sequence, sent then)

    def refusal(self, heard: Announcement, now_ms: int) -> str | None:
        """None: take `heard` (and remember it); else why not."""
        if not heard.sender:
            return None  # an older raftmq's, unsigned (decode_announcement refuses it signed)
        age = now_ms - heard.sent_ms
        if age > self.max_age_ms:
            return (f"stale: sent {age / 1000:.1f} s ago, past refresh_timeout_ms "
                    "(replayed, or this host's clock is ahead)")
        if age < -self.max_age_ms:
            return f"sent {-age / 1000:.1f} s ahead of this host's clock (past refresh_timeout_ms): check the clocks"
        last = self.last.get(heard.sender)
        if last is not None and heard.seq <= last[0]:
            return f"replayed: sequence {heard.seq} of its sender, which sent {last[0]} already"
        if last is None:  # forget senders too old for any of theirs to pass the age check
            self.last = {sender: seen for sender, seen in self.last.items() if now_ms - seen[1] <= self.max_age_ms}
        self.last[heard.sender] = (heard.seq, heard.sent_ms)
        return None


def parse_members(text: str, where: str) -> dict[str, tuple[str, ...]]:
    """The groups a discovery file's `text` lists; raises ValueError naming `where` and what is wrong."""
    try:
        groups = json.loads(text)["groups"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{where}: not a discovery file ({exc})") from None
    if not isinstance(groups, dict):
        raise ValueError(f"{where}: 'groups' must map group names to lists of host:port")
    members: dict[str, tuple[str, ...]] = {}
    for name, clients in groups.items():
        if not (isinstance(clients, list) and clients and all(isinstance(c, str) and ":" in c for c in clients)):
            raise ValueError(f"{where}: group {name!r} must list its members' host:port")
        members[str(name)] = tuple(clients)
    return members


@dataclass
class DiscoveryTable:
    """What one group has heard of the others: their addresses and when last."""

    own: str
    refresh_timeout_ms: int
    heard: dict[str, tuple[tuple[str, ...], float]] = field(default_factory=dict)  # group -> (clients, when)

    def hear(self, group: str, clients: tuple[str, ...], now: float) -> bool:
        """Note `group`; True when it is new or its addresses changed."""
        if group == self.own:
            return False
        known = self.heard.get(group)
        self.heard[group] = (clients, now)
        return known is None or known[0] != clients

    def up(self, group: str, now: float) -> bool:
        known = self.heard.get(group)
        return known is not None and now - known[1] <= self.refresh_timeout_ms / 1000

    def groups(self) -> dict[str, tuple[str, ...]]:
        return {group: clients for group, (clients, _) in sorted(self.heard.items())}
