"""What one bench run does: a picklable description shared by every worker process."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from raftmq.client.failover_url import FailoverTarget, parse_failover_url
from raftmq.core.commands import ACK_MODES as ACK_MODES  # re-exported: the CLI's choices

# A failover URL that does not say how often to retry gets this many connect attempts per
# connection (back-off from 10 ms: ~0.3 s in all), enough to ride out a leader election.
FAILOVER_STARTUP_ATTEMPTS = 6


def is_failover_url(url: str) -> bool:
    """`failover:(...)` or a list of addresses: each connection looks for the group's leader."""
    return url.strip().lower().startswith(("failover:", "ws://")) or "," in url


def parse_failover(url: str) -> FailoverTarget:
    """A failover URL for the bench; raises ValueError naming what is wrong."""
    target = parse_failover_url(url)  # InvalidFailoverUrl is a ValueError
    if target.tls:
        raise ValueError("raftmq bench does not speak TLS (stomp+ssl://): give stomp:// addresses")
    options = target.options
    if options.startup_max_reconnect_attempts == -1 and options.max_reconnect_attempts == -1:
        options = options.replace(startup_max_reconnect_attempts=FAILOVER_STARTUP_ATTEMPTS)
    return FailoverTarget(target.groups, options, target.tls, target.websocket_path)


def parse_url(url: str) -> tuple[str, int]:
    """`stomp://host:port` (also `tcp://`, or bare `host:port`) to (host, port)."""
    text = url if "://" in url else f"stomp://{url}"
    parts = urlsplit(text)
    if parts.scheme not in ("stomp", "tcp"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} (use stomp://host:port)")
    try:
        port = parts.port or 61613
    except ValueError as exc:
        raise ValueError(f"bad port in {url!r}") from exc
    if not parts.hostname:
        raise ValueError(f"no host in {url!r}")
    return parts.hostname, port


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` split into `parts` shares that differ by at most one, larger first."""
    if parts <= 0:
        return []
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    host: str = "127.0.0.1"
    port: int = 61613
    # A failover URL (`failover:(stomp://h1:p1,...)` or h1:p1,h2:p2): every connection goes to
    # the leader, found as `raftmq send` finds it; host and port are then its first address.
    failover_url: str | None = None
    # Consumers connect here instead (a failover URL): producers on one group of a cluster,
    # consumers on another.
    consumer_url: str | None = None
    # Several groups of a cluster (failover URLs, given after the first): producer i connects to
    # the i-th URL of (failover_url, *more_urls) round robin, consumer j to the j-th of
    # (consumer_url, *more_consumer_urls), or of the producers' URLs when no consumer URL is given.
    more_urls: tuple[str, ...] = ()
    more_consumer_urls: tuple[str, ...] = ()
    # The first `slow_consumers` consumers work `consumer_work_ms` on each message, one message
    # at a time, before acknowledging it (a consumer that cannot keep up).
    slow_consumers: int = 0
    consumer_work_ms: float = 0.0
    login: str | None = None
    passcode: str | None = None
    vhost: str | None = None
    extra_headers: tuple[tuple[str, str], ...] = ()
    destination: str = "/queue/bench"
    producers: int = 1
    consumers: int = 1
    size: int = 1024
    messages: int | None = 10_000  # total measured messages, over all producers
    duration: float | None = None  # seconds of sending instead of a message count
    persistent: bool = True
    receipt_window: int = 1  # receipts in flight per producer; 0 = send without receipts
    prefetch: int | None = None
    ack: str = "client-individual"
    processes: int = 1
    warmup: int = 0  # total messages sent before measuring, over all producers
    drain_timeout: float = 10.0  # seconds consumers keep waiting after the producers finished
    connect_timeout: float = 10.0
    run_id: str = "run"
    heartbeat_ms: int = 0

    @property
    def url(self) -> str:
        return self.failover_url or f"stomp://{self.host}:{self.port}"

    @property
    def producer_urls(self) -> tuple[str, ...]:
        """The failover URLs producers connect to, round robin (empty: host and port)."""
        return (self.failover_url, *self.more_urls) if self.failover_url is not None else ()

    @property
    def consumer_urls(self) -> tuple[str, ...]:
        """The failover URLs consumers connect to, round robin (empty: host and port)."""
        if self.consumer_url is not None:
            return (self.consumer_url, *self.more_consumer_urls)
        return self.producer_urls

    def url_of(self, index: int, *, consumer: bool) -> str | None:
        """The failover URL of producer (or consumer) `index`; None: host and port."""
        urls = self.consumer_urls if consumer else self.producer_urls
        return urls[index % len(urls)] if urls else None

    def producers_of(self, process: int) -> list[int]:
        return [p for p in range(self.producers) if p % self.processes == process]

    def consumers_of(self, process: int) -> list[int]:
        return [c for c in range(self.consumers) if c % self.processes == process]

    def messages_of(self, producer: int) -> int | None:
        if self.messages is None:
            return None
        return split_evenly(self.messages, self.producers)[producer]

    def warmup_of(self, producer: int) -> int:
        return split_evenly(self.warmup, self.producers)[producer]
