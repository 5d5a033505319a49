"""TLS for the client: the `ssl.SSLContext` a connection to a `[tls]` listener uses."""

from __future__ import annotations

import ssl

from raftmq.errors import ClientError

# URL schemes that mean TLS (`ssl://` is ActiveMQ's name, `stomp+ssl://` its STOMP one).
TLS_SCHEMES = ("stomp+ssl", "ssl")


def client_ssl_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """TLS 1.2+ with the server's certificate and host name checked against `ca_file` (the
    system's CAs without one); `cert_file`/`key_file` present a client certificate."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f for f in (ca_file, cert_file, key_file) if f) or "the system's CA store"
        raise ClientError(f"cannot set up TLS from {files}: {exc}") from None
    return context


def resolve_ssl_context(
    ssl_context: ssl.SSLContext | None, ca_file: str | None, tls: bool = False
) -> ssl.SSLContext | None:
    """The context a connection uses: the one given, else one built from `ca_file`, else the
    default one when `tls` (a TLS URL scheme) asks for it; None means plain TCP."""
    if ssl_context is not None:
        if ca_file is not None:
            raise ValueError("give ssl_context or ca_file, not both")
        return ssl_context
    if ca_file is not None or tls:
        return client_ssl_context(ca_file)
    return None
