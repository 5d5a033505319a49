"""Who may connect and what they may do: users, ActiveMQ-style destination ACLs, TLS.

The settings (`SecurityConfig`, loaded by `raftmq.security_config`) are plain frozen data;
`Security` is what a node builds from them and its sessions ask. Checks run in the server's
shell, never in the replicated core: a refused frame is never appended to the log.

Authentication: with `[[user]]` entries, CONNECT must carry a `login` and a `passcode` that
matches the user's scrypt hash (`raftmq.passwords`); anonymous connections (no `login`) are
let in only with `allow_anonymous`, as members of `anonymous_groups`.

Authorization (on as soon as there is an `[[acl]]` entry): a destination `/queue/NAME` or
`/topic/NAME` is governed by the most specific entry of its kind whose pattern matches NAME.
Names and patterns are split on `.`; `*` matches exactly one element and `>` one or more
trailing elements (ActiveMQ's wildcards). Most specific: compare the matching patterns element
by element from the left; a literal beats `*`, which beats `>`; the first difference decides
(two different patterns that match the same name always differ somewhere). No matching entry:
nothing is allowed. SEND needs `write`, SUBSCRIBE `read`; a SEND or SUBSCRIBE that would
create the destination (the core does not know it yet) needs `admin` as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from raftmq.passwords import DEFAULT_N, DEFAULT_P, DEFAULT_R, HASH_BYTES, ScryptHash, parse_hash, verify_password
from raftmq.patterns import covers, overlaps, pattern_matches, specificity

READ: Final = "read"
WRITE: Final = "write"
ADMIN: Final = "admin"
OPERATIONS = (READ, WRITE, ADMIN)
KINDS = ("queue", "topic")
ANONYMOUS_GROUP = "anonymous"

# Successful logins remembered (keyed by an HMAC of login and passcode under a per-process
# key, never the passcode itself) so that reconnecting clients do not pay scrypt every time.
LOGIN_CACHE_SIZE = 1024
# Destinations whose governing ACL entry is remembered.
ACL_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class UserEntry:
    name: str
    password_hash: str = field(repr=False)
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AclEntry:
    kind: str  # "queue" or "topic"
    pattern: str  # e.g. "orders.>", "prices.*.eu"
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    admin: tuple[str, ...] = ()

    def groups(self, operation: str) -> tuple[str, ...]:
        return getattr(self, operation)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class TlsConfig:
    cert_file: str
    key_file: str
    ca_file: str | None = None  # CAs whose client certificates are accepted
    require_client_cert: bool = False
    raft: bool = False  # the Raft port speaks TLS too, members presenting this certificate to each other


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """Everything open by default: no users, no ACL, no TLS (the broker as it always was)."""

    authentication: bool = False
    allow_anonymous: bool = False
    anonymous_groups: tuple[str, ...] = (ANONYMOUS_GROUP,)
    users: tuple[UserEntry, ...] = ()
    acl: tuple[AclEntry, ...] = ()
    tls: TlsConfig | None = None
    # An admin port off loopback without TLS and logins (a test rig's private network only).
    allow_open_admin: bool = False

    @property
    def authorization(self) -> bool:
        return bool(self.acl)


@dataclass(frozen=True, slots=True)
class Principal:
    """An accepted connection's identity; `name` None for an anonymous one."""

    name: str | None
    groups: frozenset[str]

    def describe(self) -> str:
        return f"user {self.name!r}" if self.name is not None else "an anonymous connection"


# -- patterns ------------------------------------------------------------------------------------


def governing_entry(entries: Iterable[AclEntry], kind: str, name: str) -> AclEntry | None:
    """The most specific entry of `kind` whose pattern matches `name`, or None."""
    best: AclEntry | None = None
    best_rank: tuple[int, ...] = ()
    for entry in entries:
        if entry.kind == kind and pattern_matches(entry.pattern, name):
            rank = specificity(entry.pattern)
            if best is None or rank > best_rank:
                best, best_rank = entry, rank
    return best


def split_destination(destination: str) -> tuple[str, str]:
    """"/queue/a.b" -> ("queue", "a.b"); the session has checked the prefix already."""
    _, kind, name = destination.split("/", 2)
    return kind, name


# -- the runtime object ----------------------------------------------------------------------------


class Security:
    """Built once per node from its `SecurityConfig`; `login` may run in a worker thread."""

    def __init__(self, config: SecurityConfig) -> None:
        self.config = config
        self._hashes: dict[str, tuple[ScryptHash, frozenset[str]]] = {
            user.name: (parse_hash(user.password_hash), frozenset(user.groups)) for user in config.users
        }
        self._anonymous = Principal(None, frozenset(config.anonymous_groups))
        # Unknown users are checked against this, so a refusal takes as long either way.
        self._decoy = ScryptHash(DEFAULT_N, DEFAULT_R, DEFAULT_P, secrets.token_bytes(16),
                                 secrets.token_bytes(HASH_BYTES))
        self._cache_key = secrets.token_bytes(32)
        self._verified: dict[bytes, Principal] = {}
        self._lock = threading.Lock()
        self._acl_cache: dict[tuple[str, str], AclEntry | None] = {}

    @property
    def authenticating(self) -> bool:
        return self.config.authentication

    @property
    def authorizing(self) -> bool:
        return self.config.authorization

    # -- authentication ----------------------------------------------------------------------

    def quick_login(self, login: str | None, passcode: str | None) -> Principal | None | bool:
        """Decide without hashing when possible: a `Principal` (accepted), None (refused), or
        True when only `login()` can tell."""
        if not self.config.authentication:
            return self._anonymous
        if not login:
            return self._anonymous if self.config.allow_anonymous else None
        cached = self._verified.get(self._cache_token(login, passcode or ""))
        return cached if cached is not None else True

    def login(self, login: str | None, passcode: str | None) -> Principal | None:
        """The principal for these credentials, or None. Costs one scrypt (tens of ms) unless
        `quick_login` already decided; safe to call from a worker thread."""
        quick = self.quick_login(login, passcode)
        if quick is not True:
            return quick  # type: ignore[return-value]
        assert login
        known = self._hashes.get(login)
        stored, groups = known if known is not None else (self._decoy, frozenset())
        if not verify_password(passcode or "", stored) or known is None:
            return None
        principal = Principal(login, groups)
        with self._lock:
            if len(self._verified) >= LOGIN_CACHE_SIZE:
                self._verified.clear()  # rare; the next logins pay scrypt again
            self._verified[self._cache_token(login, passcode or "")] = principal
        return principal

    def _cache_token(self, login: str, passcode: str) -> bytes:
        message = login.encode("utf-8") + b"\0" + passcode.encode("utf-8")
        return hmac.new(self._cache_key, message, hashlib.sha256).digest()

    # -- authorization -------------------------------------------------------------------------

    def refusal(self, principal: Principal, operation: str, destination: str, exists: bool) -> str | None:
        """None when `principal` may perform `operation` (READ, WRITE, or ADMIN: an operator's
        change) on `destination` (creating it when it does not `exist`); else the reason,
        naming both."""
        if not self.config.acl:
            return None
        _kind, name = split_destination(destination)
        if "*" in name or ">" in name:
            return self._pattern_refusal(principal, operation, destination, exists)
        entry = self._entry(destination)
        needed = (operation,) if exists else (operation, ADMIN)
        for what in needed:
            allowed = entry.groups(what) if entry is not None else ()
            if principal.groups.isdisjoint(allowed):
                verb = {READ: "read from", WRITE: "write to",
                        ADMIN: "administer" if operation == ADMIN else "create"}[what]
                where = (
                    f"no [[acl]] entry covers {destination}"
                    if entry is None
                    else f"{entry.kind} = {entry.pattern!r} grants {what} to {', '.join(allowed) or 'nobody'}"
                )
                return f"{principal.describe()} may not {verb} {destination} ({what} permission; {where})"
        return None

    def _pattern_refusal(self, principal: Principal, operation: str, destination: str, exists: bool) -> str | None:
        """A wildcard subscription reads every destination its pattern matches: it is allowed
        only when an entry covering the whole pattern grants the operation, and so does every
        more specific entry that shares a name with it (a narrower entry refusing one topic
        must not be bypassed by subscribing to its parent with `>`)."""
        kind, name = split_destination(destination)
        entries = [entry for entry in self.config.acl if entry.kind == kind]
        covering = [entry for entry in entries if covers(entry.pattern, name)]
        base = max(covering, key=lambda entry: specificity(entry.pattern)) if covering else None
        verb = {READ: "read from", WRITE: "write to", ADMIN: "administer"}[operation]
        if base is None:
            return (f"{principal.describe()} may not {verb} {destination} "
                    "(no [[acl]] entry covers every destination it matches)")
        needed = (operation,) if exists else (operation, ADMIN)
        narrower = [entry for entry in entries
                    if overlaps(entry.pattern, name) and specificity(entry.pattern) > specificity(base.pattern)]
        for entry in (base, *narrower):
            for what in needed:
                if principal.groups.isdisjoint(entry.groups(what)):
                    return (f"{principal.describe()} may not {verb} {destination} ({what} permission; "
                            f"{entry.kind} = {entry.pattern!r} grants {what} to "
                            f"{', '.join(entry.groups(what)) or 'nobody'})")
        return None

    def _entry(self, destination: str) -> AclEntry | None:
        key = split_destination(destination)
        cache = self._acl_cache
        if key in cache:
            return cache[key]
        if len(cache) >= ACL_CACHE_SIZE:
            cache.clear()
        entry = cache[key] = governing_entry(self.config.acl, *key)
        return entry
