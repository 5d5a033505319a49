"""Password hashes, ACL wildcard matching and the `Security` decisions (no sockets)."""

from __future__ import annotations

import itertools
import random
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.cli import main
from raftmq.passwords import hash_password, parse_hash, verify_password
from raftmq.patterns import check_pattern, covers, overlaps, pattern_matches
from raftmq.security import (
    ADMIN,
    READ,
    WRITE,
    AclEntry,
    Principal,
    Security,
    SecurityConfig,
    UserEntry,
    governing_entry,
)

FAST = {"n": 16, "r": 1, "p": 1}  # cheap scrypt for tests; the format carries the cost


# -- passwords -----------------------------------------------------------------------------------


def test_hash_round_trip_and_wrong_password() -> None:
    encoded = hash_password("s3cret", **FAST)
    assert encoded.startswith("scrypt$16$1$1$")
    stored = parse_hash(encoded)
    assert verify_password("s3cret", stored)
    assert not verify_password("s3cret ", stored)
    assert not verify_password("", stored)


def test_same_password_gets_a_new_salt_each_time() -> None:
    first, second = hash_password("x", **FAST), hash_password("x", **FAST)
    assert first != second
    assert verify_password("x", parse_hash(first)) and verify_password("x", parse_hash(second))


def test_default_cost_is_the_interactive_scrypt_one() -> None:
    stored = parse_hash(hash_password("pw"))
    assert (stored.n, stored.r, stored.p) == (2**14, 8, 1)
    assert verify_password("pw", stored)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hunter2", "not a raftmq password hash"),
        ("bcrypt$1$2$3$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "not a raftmq password hash"),
        ("scrypt$x$8$1$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "must be integers"),
        ("scrypt$1000$8$1$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "power of two"),
        ("scrypt$16$0$1$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "must be positive"),
        (f"scrypt${2**24}$8$1$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "too large"),
        ("scrypt$16$1$1$!!!$AAAAAAAAAAAAAAAAAAAAAA", "base64"),
        ("scrypt$16$1$1$AAAA$AAAAAAAAAAAAAAAAAAAAAA", "too short"),
    ],
)
def test_malformed_hashes_are_refused_without_echoing_them(text: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected) as info:
        parse_hash(text)
    assert "hunter2" not in str(info.value)


def test_empty_password_is_not_hashed() -> None:
    with pytest.raises(ValueError, match="empty"):
        hash_password("")


def test_passwd_command_reads_stdin_and_prints_a_verifiable_line() -> None:
    result = CliRunner().invoke(main, ["passwd", "--stdin"], input="correct horse\n")
    assert result.exit_code == 0, result.output
    line = result.output.strip()
    assert "correct horse" not in result.output
    assert verify_password("correct horse", parse_hash(line))
    table = CliRunner().invoke(main, ["passwd", "--stdin", "--user", "app"], input="pw\n")
    assert table.exit_code == 0, table.output
    assert table.output.startswith('[[user]]\nname = "app"\npassword_hash = "scrypt$')


def test_passwd_command_prompts_twice_and_refuses_a_mismatch_or_nothing() -> None:
    ok = CliRunner().invoke(main, ["passwd"], input="abc\nabc\n")
    assert ok.exit_code == 0, ok.output
    assert verify_password("abc", parse_hash(ok.output.strip().splitlines()[-1]))
    assert "abc" not in ok.output  # hidden input
    mismatch = CliRunner().invoke(main, ["passwd"], input="abc\nabd\n")
    assert mismatch.exit_code != 0
    empty = CliRunner().invoke(main, ["passwd", "--stdin"], input="\n")
    assert empty.exit_code == 1 and "empty password" in empty.output


# -- patterns ----------------------------------------------------------------------------------------

ELEMENT = st.text(alphabet="abc", min_size=1, max_size=2)
NAME = st.lists(ELEMENT, min_size=1, max_size=5)


def _reference_regex(pattern: str) -> re.Pattern[str]:
    """An independent reading of ActiveMQ's wildcards as a regular expression."""
    parts = []
    for element in pattern.split("."):
        if element == "*":
            parts.append(r"[^.]+")
        elif element == ">":
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(element))
    return re.compile(r"\.".join(parts))


@st.composite
def patterns(draw: st.DrawFn) -> str:
    elements = draw(st.lists(st.one_of(ELEMENT, st.just("*")), min_size=1, max_size=5))
    if draw(st.booleans()):
        elements = elements[: draw(st.integers(0, len(elements) - 1))] + [">"]
    return ".".join(elements)


@given(patterns(), NAME)
def test_matching_agrees_with_a_regular_expression(pattern: str, name: list[str]) -> None:
    check_pattern(pattern)
    text = ".".join(name)
    assert pattern_matches(pattern, text) == bool(_reference_regex(pattern).fullmatch(text))


@given(NAME, st.data())
def test_star_matches_any_one_element_and_gt_one_or_more(name: list[str], data: st.DataObject) -> None:
    text = ".".join(name)
    assert pattern_matches(text, text)
    index = data.draw(st.integers(0, len(name) - 1))
    starred = name[:index] + ["*"] + name[index + 1 :]
    assert pattern_matches(".".join(starred), text)
    assert not pattern_matches(".".join(starred + ["*"]), text)  # one element too many
    assert pattern_matches(".".join(name[:index] + [">"]), text)  # the rest, one element at least
    assert not pattern_matches(".".join(name + [">"]), text)  # ">" needs one element at least


@given(NAME, NAME)
def test_a_literal_pattern_matches_only_itself(a: list[str], b: list[str]) -> None:
    assert pattern_matches(".".join(a), ".".join(b)) == (a == b)


def test_examples_from_the_documentation() -> None:
    assert pattern_matches("orders.>", "orders.eu")
    assert pattern_matches("orders.>", "orders.eu.urgent")
    assert not pattern_matches("orders.>", "orders")
    assert pattern_matches("prices.*", "prices.eu")
    assert not pattern_matches("prices.*", "prices.eu.fx")
    assert not pattern_matches("prices.*", "prices")
    assert pattern_matches(">", "anything.at.all")


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("", "empty pattern"), ("a..b", "empty element"), ("a.", "empty element"), ("a.>.b", "last element"),
     ("ord*", "whole element"), ("a.b>", "whole element")],
)
def test_bad_patterns(pattern: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        check_pattern(pattern)


def _entry(kind: str, pattern: str) -> AclEntry:
    return AclEntry(kind, pattern, read=(pattern,))


@given(NAME, st.lists(patterns(), max_size=8, unique=True), st.randoms(use_true_random=False))
@settings(max_examples=200)
def test_the_governing_entry_matches_and_does_not_depend_on_order(
    name: list[str], pattern_list: list[str], rnd: random.Random
) -> None:
    text = ".".join(name)
    entries = [_entry("queue", p) for p in pattern_list]
    chosen = governing_entry(entries, "queue", text)
    matching = [e for e in entries if pattern_matches(e.pattern, text)]
    assert (chosen is None) == (not matching)
    shuffled = entries[:]
    rnd.shuffle(shuffled)
    assert governing_entry(shuffled, "queue", text) == chosen
    if chosen is not None:
        assert chosen in matching
        assert governing_entry([*entries, _entry("queue", text)], "queue", text) == _entry("queue", text)  # exact wins
        assert governing_entry([*entries, _entry("topic", text)], "queue", text) == chosen  # other kind: ignored


def test_most_specific_entry_wins() -> None:
    entries = [_entry("queue", p)
               for p in (">", "orders.>", "orders.*", "orders.*.urgent", "orders.eu.>", "*.eu.urgent")]
    assert governing_entry(entries, "queue", "orders.eu").pattern == "orders.*"  # "*" beats ">"
    assert governing_entry(entries, "queue", "orders.eu.urgent").pattern == "orders.eu.>"  # literal "eu" first
    assert governing_entry(entries, "queue", "orders.us.urgent").pattern == "orders.*.urgent"
    assert governing_entry(entries, "queue", "billing").pattern == ">"
    assert governing_entry(entries, "topic", "billing") is None


# -- Security decisions ---------------------------------------------------------------------------------


def _security(**changes: object) -> Security:
    users = (
        UserEntry("alice", hash_password("alice-pw", **FAST), ("producers",)),
        UserEntry("bob", hash_password("bob-pw", **FAST), ("consumers", "admins")),
    )
    acl = (
        AclEntry("queue", "orders.>", read=("consumers",), write=("producers",), admin=("admins",)),
        AclEntry("topic", "prices.*", read=("consumers", "anonymous"), write=("producers",), admin=("producers",)),
    )
    values: dict[str, object] = {"authentication": True, "users": users, "acl": acl}
    values.update(changes)
    return Security(SecurityConfig(**values))  # type: ignore[arg-type]


def test_open_broker_lets_everyone_in_without_hashing() -> None:
    security = Security(SecurityConfig())
    assert not security.authenticating and not security.authorizing
    principal = security.quick_login("whoever", "whatever")
    assert principal == Principal(None, frozenset({"anonymous"}))
    assert security.refusal(principal, WRITE, "/queue/x", exists=False) is None  # type: ignore[arg-type]


def test_login_checks_the_passcode_and_remembers_only_successes() -> None:
    security = _security()
    assert security.quick_login("alice", "alice-pw") is True  # needs scrypt
    assert security.login("alice", "alice-pw") == Principal("alice", frozenset({"producers"}))
    assert security.quick_login("alice", "alice-pw") == Principal("alice", frozenset({"producers"}))
    assert security.login("alice", "wrong") is None
    assert security.quick_login("alice", "wrong") is True  # a failure is never cached
    assert security.login("carol", "alice-pw") is None  # unknown user: the same answer
    assert security.login("alice", None) is None
    assert security.login(None, None) is None and security.quick_login(None, None) is None
    assert security.login("", "x") is None


def test_anonymous_connections_only_when_allowed() -> None:
    security = _security(allow_anonymous=True, anonymous_groups=("guests",))
    assert security.quick_login(None, None) == Principal(None, frozenset({"guests"}))
    assert security.login("alice", "wrong") is None  # a login given must still be right


def test_refusals_name_the_operation_and_destination() -> None:
    security = _security()
    alice = security.login("alice", "alice-pw")
    bob = security.login("bob", "bob-pw")
    assert alice is not None and bob is not None
    assert security.refusal(alice, WRITE, "/queue/orders.eu", exists=True) is None
    reason = security.refusal(alice, WRITE, "/queue/orders.eu", exists=False)
    assert reason is not None and "user 'alice' may not create /queue/orders.eu" in reason and ADMIN in reason
    reason = security.refusal(alice, READ, "/queue/orders.eu", exists=True)
    assert reason is not None and "may not read from /queue/orders.eu" in reason
    assert security.refusal(bob, READ, "/queue/orders.eu", exists=False) is None  # read + admin
    reason = security.refusal(bob, READ, "/queue/billing", exists=True)
    assert reason is not None and "no [[acl]] entry covers /queue/billing" in reason
    anonymous = Principal(None, frozenset({"anonymous"}))
    assert security.refusal(anonymous, READ, "/topic/prices.eu", exists=True) is None
    reason = security.refusal(anonymous, READ, "/topic/prices.eu", exists=False)
    assert reason is not None and reason.startswith("an anonymous connection may not create /topic/prices.eu")


def test_reprs_hide_password_hashes() -> None:
    user = UserEntry("alice", hash_password("pw", **FAST), ("g",))
    assert "scrypt" not in repr(user) and "scrypt" not in repr(SecurityConfig(users=(user,)))


# -- wildcard subscriptions --------------------------------------------------------------------------

UNIVERSE = [".".join(p) for n in range(1, 5) for p in itertools.product("abc", repeat=n)]
SMALL_PATTERN = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=3).flatmap(
    lambda elements: st.sampled_from([".".join(elements), ".".join(elements[:-1] + [">"])]))


@given(SMALL_PATTERN, SMALL_PATTERN)
def test_covers_and_overlaps_agree_with_the_names_they_match(outer: str, inner: str) -> None:
    # Patterns of at most three elements differ on names of at most four: this universe decides.
    matched_outer = {n for n in UNIVERSE if pattern_matches(outer, n)}
    matched_inner = {n for n in UNIVERSE if pattern_matches(inner, n)}
    assert covers(outer, inner) == (matched_inner <= matched_outer)
    assert overlaps(outer, inner) == bool(matched_inner & matched_outer)


def test_a_wildcard_subscription_needs_every_destination_it_matches() -> None:
    acl = (
        AclEntry("topic", "prices.>", read=("consumers",)),
        AclEntry("topic", "prices.secret", read=("admins",)),
        AclEntry("topic", "news.*", read=("consumers",)),
    )
    security = _security(acl=acl)
    bob = security.login("bob", "bob-pw")  # consumers and admins
    alice = security.login("alice", "alice-pw")  # producers
    carol = Principal("carol", frozenset({"consumers"}))
    assert bob is not None and alice is not None
    assert security.refusal(bob, READ, "/topic/prices.>", exists=True) is None
    reason = security.refusal(carol, READ, "/topic/prices.>", exists=True)  # would bypass prices.secret
    assert reason is not None and "'prices.secret' grants read to admins" in reason
    assert security.refusal(carol, READ, "/topic/prices.*.eu", exists=True) is None  # no name it matches is secret
    assert security.refusal(carol, READ, "/topic/news.*", exists=True) is None
    reason = security.refusal(carol, READ, "/topic/news.>", exists=True)  # news.a.b is covered by no entry
    assert reason is not None and "no [[acl]] entry covers every destination it matches" in reason
    assert security.refusal(alice, READ, "/topic/news.*", exists=True) is not None
