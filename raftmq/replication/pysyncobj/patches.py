"""The pysyncobj version check, pysyncobj's module-level names we swap (the pickle protocol, the
zlib used on the wire, the rename used for snapshot files, the journal factory), and helpers the
other modules share.

Importing this module imports pysyncobj and raises ImportError unless it is 0.3.17; it changes
nothing in pysyncobj until `apply_module_fixes` runs (`HardenedSyncObj` calls it).
"""

from __future__ import annotations

import ipaddress
import os
import pickle
import threading
import zlib
from collections.abc import Callable
from typing import Any

import pysyncobj.pickle as pso_pickle
import pysyncobj.serializer as pso_serializer
import pysyncobj.syncobj as pso_syncobj
import pysyncobj.tcp_connection as pso_tcp
import structlog
from pysyncobj.journal import Journal
from pysyncobj.pipe_notifier import PipeNotifier
from pysyncobj.version import VERSION

from raftmq.errors import ConfigError

PINNED_VERSION = "0.3.17"
if VERSION != PINNED_VERSION:  # every patch below relies on 0.3.17's internals
    raise ImportError(
        f"raftmq needs pysyncobj=={PINNED_VERSION} exactly (its hardening patches are written against it); "
        f"found {VERSION}"
    )

log = structlog.get_logger("raftmq.replication.pysyncobj")

# How long a candidate waits for the votes of one election round before it tries again. Votes
# answer within milliseconds; waiting a whole election timeout (0.3-0.6 s) after a split vote
# is what made a failover take over a second.
CANDIDATE_ROUND_MIN = 0.10
CANDIDATE_ROUND_MAX = 0.25
WIRE_PICKLE_PROTOCOL = 5
# A deadline this close counts as passed: pysyncobj reads the clock again a moment later in the
# same tick, and a deadline passing in between would let it stand without a pre-vote.
PREVOTE_LOOKAHEAD = 0.02


# ---------------------------------------------------------------------------------------------
# Module-level swaps (pickle protocol, wire zlib, snapshot rename, journal factory)


def fsync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(src: str, dst: str) -> None:
    """Rename that survives power loss: the file's bytes, then the directory entry."""
    fd = os.open(src, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(src, dst)
    fsync_directory(dst)


class _StoredZlib:
    """Stands in for `zlib` in pysyncobj's connection code: our entries are lz4 already, and
    level 3 on top costs ~10 MB/s per follower for nothing. Level 0 stays readable by zlib."""

    @staticmethod
    def compress(data: bytes, level: int = -1) -> bytes:
        return zlib.compress(data, 0)

    decompress = staticmethod(zlib.decompress)


_stock_create_journal = pso_syncobj.createJournal
_patch_lock = threading.Lock()


def _create_journal(journal_file: Any) -> Journal:
    # conf.journalFile carries our already-open journal; anything else keeps stock behaviour.
    if isinstance(journal_file, Journal):
        return journal_file
    return _stock_create_journal(journal_file)


def apply_module_fixes() -> None:
    """Swap pysyncobj's module-level names for ours (idempotent, process-wide)."""
    with _patch_lock:
        pso_syncobj.createJournal = _create_journal
        pso_pickle.__dict__["__protocol"] = WIRE_PICKLE_PROTOCOL
        pso_tcp.zlib = _StoredZlib
        pso_serializer.atomicReplace = durable_replace


assert pickle.HIGHEST_PROTOCOL >= WIRE_PICKLE_PROTOCOL


# ---------------------------------------------------------------------------------------------
# Addresses


def check_raft_address(address: str, password: str | None) -> tuple[str, int]:
    """Whoever talks to the Raft port as a member writes the group's log: off loopback only peers
    holding the password (the wire's secret, raftmq.replication.wire) may. Returns (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"Raft address {address!r}: expected host:port")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not password:
        raise ConfigError(
            f"Raft address {address}: not a loopback address, so a password is required "
            "(whoever reaches the Raft port without one could write the group's log)"
        )
    return host, int(port)


# ---------------------------------------------------------------------------------------------
# Callbacks in the tick thread


def never_raise(fn: Callable[..., Any], what: str,
                on_error: Callable[[BaseException], None] | None = None) -> Callable[..., Any]:
    """Wrap a function that pysyncobj calls in its tick thread: an exception there makes it
    apply an entry twice (callbacks) or retry it forever (apply). We log and go on."""

    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            log.exception("raft.callback_failed", callback=what)
            if on_error is not None:
                try:
                    on_error(exc)
                except Exception:
                    log.exception("raft.error_handler_failed", callback=what)
            return None

    return guarded


# ---------------------------------------------------------------------------------------------
# Waking the tick thread


class WakeOnce(PipeNotifier):
    """pysyncobj's pipe notifier (the loop thread wakes the tick thread's poll when it submits an
    entry) writing a byte only to a tick thread that waits in its poll, and at most one per
    wait: stock writes one per submitted entry, a system call each (and a moment where the loop
    thread lets go of the GIL), while the tick thread is mostly awake already.

    `awake` is true from the moment the tick thread's poll returns until it next begins to wait
    (`wait`, which takes pysyncobj's poller.poll). A notify first sets `due`, then writes a byte
    only if the tick thread is not awake; the tick thread first clears `awake`, then polls
    without waiting if `due` is set. Whatever the interleaving, a submission is either seen by
    the tick thread before it waits (`due`) or wakes it (a byte): set in the other order, a
    notify that read `awake` just before the tick thread cleared it would set `due` too late,
    and its entry would wait for the poll's timeout.

    `pending` is set before a byte is written and cleared only once the pipe is drained. A
    notify that finds it set writes nothing: its entry is in the command queue already, and the
    tick that follows the drain reads that queue. Cleared before the drain instead, a notify in
    between would set it again and have its byte drained with the others: `pending` would stay
    set with the pipe empty, and no later notify would wake the tick thread again (every entry
    then waited for the poll's timeout)."""

    def __init__(self, poller: Any) -> None:
        self.pending = False
        self.awake = False  # until the tick thread's first wait returns, every notify writes
        self.due = False
        super().__init__(poller)

    def notify(self) -> None:
        self.due = True
        if not self.awake and not self.pending:
            self.pending = True
            super().notify()

    def wait(self, poll: Callable[[float], None], timeout: float) -> None:
        """The tick thread's wait: pysyncobj's `poll(timeout)`, or a poll that does not wait when
        a notify came since the last one returned."""
        self.awake = False
        if self.due:
            self.due = False
            timeout = 0.0
        try:
            poll(timeout)
        finally:
            self.awake = True

    def _PipeNotifier__onNewNotification(self, descr: int, event_mask: int) -> None:
        PipeNotifier._PipeNotifier__onNewNotification(self, descr, event_mask)
        self.pending = False
        self.awake = True  # the tick thread ticks before it waits again: a notify now need only set `due`

    def install(self, poller: Any, timeout_for: Callable[[float], float]) -> None:
        """Make `poller.poll` (what pysyncobj's tick waits in) go through `wait`, waiting
        `timeout_for(tick period)` (`tick_wait.poll_timeout`)."""
        stock = poller.poll
        poller.poll = lambda timeout: self.wait(stock, timeout_for(timeout))


def close_notifier(notifier: PipeNotifier, poller: Any) -> None:
    """Unsubscribe a pipe notifier from its poller and close its pipe (stock never does)."""
    for fd in (notifier._PipeNotifier__pipeR, notifier._PipeNotifier__pipeW):
        poller.unsubscribe(fd)
        os.close(fd)
