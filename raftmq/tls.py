"""TLS contexts from `[tls]` (raftmq.security.TlsConfig): the client, WebSocket and admin ports'
server contexts, and a member's client context towards another member, whose certificate it
pins to the group's (a relayed client, a body fetch, the Raft port)."""

from __future__ import annotations

import dataclasses
import hmac
import ssl

from raftmq.security import TlsConfig


def member_client_tls(tls: TlsConfig) -> tuple[ssl.SSLContext, bytes]:
    """(client context, the group's certificate in DER) for a member talking to another member's
    TLS port (a relayed client, a body fetch): every member has the group's `cert_file`, so the
    peer is trusted by comparing its certificate with ours after the handshake (a pin; no CA
    or host name is involved), and ours is presented."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the pin is checked instead (`pinned`)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    with open(tls.cert_file, encoding="ascii") as pem:
        own = ssl.PEM_cert_to_DER_cert(_first_pem_certificate(pem.read()))
    return context, own


def raft_tls_contexts(tls: TlsConfig) -> tuple[ssl.SSLContext, ssl.SSLContext, bytes]:
    """(client context, server context, the group's certificate in DER) for the Raft port. The
    connecting member accepts only a peer presenting the group's certificate (a pin, checked
    after the handshake: no CA, no host name, no key usage involved); the accepting member asks
    for no certificate, as the wire's own handshake inside TLS proves the group password both
    ways."""
    client, own = member_client_tls(tls)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(tls.cert_file, tls.key_file)
    return client, server, own


def pinned(peer_der: bytes | None, own_der: bytes) -> bool:
    """True when the peer's certificate (DER, from the handshake) is the group's."""
    return peer_der is not None and hmac.compare_digest(peer_der, own_der)


def _first_pem_certificate(text: str) -> str:
    """The first certificate of a PEM file (the leaf; a chain may follow it)."""
    end_marker = "-----END CERTIFICATE-----"
    start = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find(end_marker, start)
    if start < 0 or end < 0:
        raise ValueError("no certificate in the [tls] cert_file")
    return text[start:end + len(end_marker)] + "\n"


def admin_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """The admin port's: the client port's certificate; a client certificate is never required
    (probes present none), logins are."""
    return server_ssl_context(dataclasses.replace(tls, require_client_cert=False))


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """TLS 1.2 or later with the configured certificate; raises `ssl.SSLError` / `OSError`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file is not None:
        context.load_verify_locations(cafile=tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    return context
