"""Failover URLs, options and the reconnect schedule: pure computation."""

from __future__ import annotations

import itertools

import pytest

from raftmq.client.failover_url import (
    Address,
    FailoverOptions,
    InvalidFailoverUrl,
    attempt_limit,
    attempt_plan_ms,
    normalize_groups,
    parse_address,
    parse_failover_url,
    reconnect_delays_ms,
)
from raftmq.errors import ConfigError

A = Address("10.0.0.1", 61613)
B = Address("10.0.0.2", 61614)
C = Address("10.0.0.3", 61615)


def test_every_activemq_option_and_ours_is_parsed() -> None:
    target = parse_failover_url(
        "failover:(stomp://10.0.0.1:61613,stomp://10.0.0.2:61614)?initialReconnectDelay=25"
        "&maxReconnectDelay=4000&useExponentialBackOff=false&backOffMultiplier=1.5"
        "&maxReconnectAttempts=7&startupMaxReconnectAttempts=2&timeout=1500&maxRedirects=3&connectTimeout=750"
        "&connectionLoadBalancingPolicy=round-robin"
    )
    assert target.groups == ((A, B),)
    assert target.options == FailoverOptions(
        initial_reconnect_delay_ms=25,
        max_reconnect_delay_ms=4000,
        use_exponential_backoff=False,
        backoff_multiplier=1.5,
        max_reconnect_attempts=7,
        startup_max_reconnect_attempts=2,
        timeout_ms=1500,
        max_redirects=3,
        connect_timeout_ms=750,
        policy="round-robin",
    )
    assert target.options.effective_policy == "round-robin"


def test_the_example_from_the_brief() -> None:
    target = parse_failover_url(
        "failover:(stomp://h1:1,stomp://h2:2)?initialReconnectDelay=10&maxReconnectDelay=30000"
        "&useExponentialBackOff=true&backOffMultiplier=2&maxReconnectAttempts=-1&randomize=false"
    )
    assert target.groups == ((Address("h1", 1), Address("h2", 2)),)
    assert target.options == FailoverOptions(randomize=False)
    assert target.options.effective_policy == "first-element"


def test_defaults_are_activemqs() -> None:
    options = parse_failover_url("failover:(stomp://h:1)").options
    assert options == FailoverOptions()
    assert (options.initial_reconnect_delay_ms, options.max_reconnect_delay_ms) == (10, 30_000)
    assert options.use_exponential_backoff and options.backoff_multiplier == 2.0
    assert options.max_reconnect_attempts == -1
    assert options.effective_policy == "random"  # randomize=true by default


def test_url_forms_without_parentheses_and_plain_host_lists() -> None:
    assert parse_failover_url("failover:stomp://10.0.0.1:61613,tcp://10.0.0.2:61614").groups == ((A, B),)
    assert parse_failover_url("failover://(stomp://10.0.0.1:61613)").groups == ((A,),)
    assert parse_failover_url("10.0.0.1:61613, 10.0.0.2:61614").groups == ((A, B),)
    assert parse_failover_url("stomp://10.0.0.1:61613").groups == ((A,),)
    assert parse_failover_url("10.0.0.1").groups == ((A,),)  # the STOMP port by default
    assert parse_failover_url("stomp://[::1]:7000,[fe80::2]").groups == (
        (Address("::1", 7000), Address("fe80::2", 61613)),
    )
    assert str(Address("::1", 7000)) == "[::1]:7000" and str(A) == "10.0.0.1:61613"


def test_nested_parentheses_are_groups_and_a_bare_address_is_a_group_of_one() -> None:
    target = parse_failover_url("failover:((stomp://10.0.0.1:61613,stomp://10.0.0.2:61614),stomp://10.0.0.3:61615)")
    assert target.groups == ((A, B), (C,))


def test_artemis_policy_class_names_and_url_encoding() -> None:
    artemis_class = "org.apache.activemq.artemis.api.core.client.loadbalance.RandomStickyConnectionLoadBalancingPolicy"
    url = f"failover:(h:1)?connectionLoadBalancingPolicyClassName={artemis_class}"
    assert parse_failover_url(url).options.effective_policy == "random-sticky"
    encoded = "failover:(h:1)?connectionLoadBalancingPolicy=first%2Delement"
    assert parse_failover_url(encoded).options.policy == "first-element"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty broker URL"),
        ("failover:(h:1?x=1)", "per-address options"),
        ("failover:(h:1)?bogus=1", "unknown failover option 'bogus'"),
        ("failover:(h:1)?initialreconnectdelay=1", "did you mean 'initialReconnectDelay'"),
        ("failover:(h:1)?trackMessages=true", "'trackMessages' is not supported"),
        ("failover:(h:1)?maxReconnectAttempts=lots", "maxReconnectAttempts='lots'"),
        ("failover:(h:1)?maxReconnectAttempts=-2", "maxReconnectAttempts must be -1"),
        ("failover:(h:1)?startupMaxReconnectAttempts=-5", "startupMaxReconnectAttempts must be"),
        ("failover:(h:1)?useExponentialBackOff=yes", "expected true or false"),
        ("failover:(h:1)?initialReconnectDelay=-1", "initialReconnectDelay must be >= 0"),
        ("failover:(h:1)?maxReconnectDelay=-1", "maxReconnectDelay must be >= 0"),
        ("failover:(h:1)?backOffMultiplier=0.5", "backOffMultiplier must be >= 1"),
        ("failover:(h:1)?timeout=0", "timeout must be -1"),
        ("failover:(h:1)?connectTimeout=0", "connectTimeout must be > 0"),
        ("failover:(h:1)?maxRedirects=-1", "maxRedirects must be >= 0"),
        ("failover:(h:1)?initialReconnectDelay=nan", "initialReconnectDelay='nan'"),
        ("failover:(h:1)?timeout", "option 'timeout' has no value"),
        ("failover:(h:1)?timeout=5&timeout=6", "given twice"),
        ("failover:(h:1)?connectionLoadBalancingPolicy=sideways", "choose one of round-robin"),
        ("failover:(h:1)?randomize=true&connectionLoadBalancingPolicy=random", "either randomize or"),
        ("failover:(h:1", "unbalanced parentheses"),
        ("failover:(h:1))", "unexpected ')'"),
        ("failover:(h:1,,h:2)", "empty entry"),
        ("failover:(h:1,h:1)", "listed twice"),
        ("failover:(((h:1)))", "nest deeper"),
        ("failover:((h:1)x,h:2)", "unexpected text after group"),
        ("failover:h:1,h:2?timeout=5", "parentheses to give options"),
        ("h:1,h:2?timeout=5", "options need the failover:"),
        ("(h:1,h:2),(h:3)", "need the failover: prefix"),
        ("amqp://h:1", "unsupported scheme 'amqp'"),
        ("stomp://h:0", "bad port '0'"),
        ("stomp://h:70000", "bad port '70000'"),
        ("stomp://:61613", "missing host"),
        ("stomp://h:1/queue", "no path"),
        ("::1:61613", "IPv6 host in brackets"),
        ("[::1", "unclosed '['"),
    ],
)
def test_bad_urls_are_refused_with_a_message_naming_the_fault(url: str, message: str) -> None:
    with pytest.raises(InvalidFailoverUrl) as info:
        parse_failover_url(url)
    assert message in str(info.value)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


def test_options_built_in_code_are_checked_too() -> None:
    with pytest.raises(InvalidFailoverUrl, match="backOffMultiplier"):
        FailoverOptions(backoff_multiplier=0.9)
    assert FailoverOptions(policy="FirstElementConnectionLoadBalancingPolicy").policy == "first-element"


def test_groups_given_in_code() -> None:
    assert normalize_groups([[("10.0.0.1", 61613), "stomp://10.0.0.2:61614"], [C]]) == ((A, B), (C,))
    with pytest.raises(InvalidFailoverUrl, match="list of lists"):
        normalize_groups([("10.0.0.1", 61613)])  # type: ignore[list-item]
    with pytest.raises(InvalidFailoverUrl, match="at least one address"):
        normalize_groups([[]])
    with pytest.raises(InvalidFailoverUrl, match="no broker addresses"):
        normalize_groups([])
    assert parse_address("tcp://h:5") == Address("h", 5)


# -- the back-off schedule ----------------------------------------------------------------------


def test_exponential_back_off_doubles_up_to_the_cap() -> None:
    options = FailoverOptions(initial_reconnect_delay_ms=10, max_reconnect_delay_ms=100, backoff_multiplier=2)
    assert list(itertools.islice(reconnect_delays_ms(options), 7)) == [10, 20, 40, 80, 100, 100, 100]


def test_other_multipliers_and_an_initial_delay_above_the_cap() -> None:
    options = FailoverOptions(initial_reconnect_delay_ms=100, max_reconnect_delay_ms=1000, backoff_multiplier=1.5)
    assert list(itertools.islice(reconnect_delays_ms(options), 5)) == [100, 150, 225, 337.5, 506.25]
    capped = FailoverOptions(initial_reconnect_delay_ms=500, max_reconnect_delay_ms=200)
    assert list(itertools.islice(reconnect_delays_ms(capped), 3)) == [200, 200, 200]


def test_without_exponential_back_off_the_delay_stays_at_the_initial_one() -> None:
    options = FailoverOptions(initial_reconnect_delay_ms=250, use_exponential_backoff=False, max_reconnect_delay_ms=10)
    assert list(itertools.islice(reconnect_delays_ms(options), 4)) == [250, 250, 250, 250]


def test_attempt_plans_follow_max_reconnect_attempts() -> None:
    limited = FailoverOptions(initial_reconnect_delay_ms=10, max_reconnect_attempts=3)
    # A first connect tries at once; a reconnect waits before every attempt.
    assert list(attempt_plan_ms(limited, startup=True)) == [0, 10, 20]
    assert list(attempt_plan_ms(limited, startup=False)) == [10, 20, 40]
    never = FailoverOptions(max_reconnect_attempts=0)
    assert list(attempt_plan_ms(never, startup=True)) == [0]  # the first connect is still tried
    assert list(attempt_plan_ms(never, startup=False)) == []
    forever = FailoverOptions(initial_reconnect_delay_ms=1, max_reconnect_delay_ms=8)
    assert attempt_limit(forever, startup=False) is None
    assert list(itertools.islice(attempt_plan_ms(forever, startup=False), 6)) == [1, 2, 4, 8, 8, 8]


def test_startup_max_reconnect_attempts_applies_to_the_first_connect_only() -> None:
    options = FailoverOptions(max_reconnect_attempts=5, startup_max_reconnect_attempts=2)
    assert attempt_limit(options, startup=True) == 2
    assert attempt_limit(options, startup=False) == 5
    unlimited_start = FailoverOptions(max_reconnect_attempts=-1, startup_max_reconnect_attempts=-1)
    assert attempt_limit(unlimited_start, startup=True) is None
