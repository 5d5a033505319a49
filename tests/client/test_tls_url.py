"""TLS in failover URLs: `stomp+ssl://` and `ssl://` make the whole target TLS."""

from __future__ import annotations

import ssl

import pytest

from raftmq.client.failover_url import Address, InvalidFailoverUrl, parse_failover_url
from raftmq.client.tls import client_ssl_context, resolve_ssl_context
from raftmq.errors import ClientError


@pytest.mark.parametrize(
    ("url", "tls"),
    [
        ("stomp://h:1", False),
        ("h:1,h:2", False),
        ("stomp+ssl://h:1", True),
        ("ssl://h:1,h:2", True),  # an address without a scheme follows the others
        ("failover:(stomp+ssl://a:1,stomp+ssl://b:2)?randomize=false", True),
        ("failover:((ssl://a:1,ssl://a:2),(SSL://b:1))", True),
        ("failover:(tcp://a:1,b:2)", False),
    ],
)
def test_tls_is_a_property_of_the_url(url: str, tls: bool) -> None:
    target = parse_failover_url(url)
    assert target.tls is tls
    assert all(isinstance(address, Address) for group in target.groups for address in group)


@pytest.mark.parametrize("url", ["stomp://a:1,ssl://b:2", "failover:((stomp+ssl://a:1),(tcp://b:1))"])
def test_mixing_tls_and_plain_is_refused(url: str) -> None:
    with pytest.raises(InvalidFailoverUrl, match="mixes TLS"):
        parse_failover_url(url)


def test_unknown_scheme_names_the_tls_ones() -> None:
    with pytest.raises(InvalidFailoverUrl, match=r"stomp\+ssl:// or ssl:// for TLS"):
        parse_failover_url("stomps://h:1")


def test_context_resolution(tmp_path) -> None:  # noqa: ANN001
    assert resolve_ssl_context(None, None, tls=False) is None
    default = resolve_ssl_context(None, None, tls=True)
    assert isinstance(default, ssl.SSLContext) and default.check_hostname
    assert default.minimum_version == ssl.TLSVersion.TLSv1_2
    given = ssl.create_default_context()
    assert resolve_ssl_context(given, None, tls=False) is given
    missing = tmp_path / "missing-ca.pem"
    with pytest.raises(ClientError, match="cannot set up TLS from .*missing-ca.pem"):
        client_ssl_context(str(missing))
