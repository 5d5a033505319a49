"""Requests to a node's admin port, over HTTP or HTTPS, with a login when one is given.

An admin address is "host:port" (plain HTTP) or "https://host:port" (the group has `[tls]`:
its admin port speaks HTTPS only). `AdminAccess` says how to reach them: the CAs that verify
the admin ports' certificates (`ca_file`; the system's without one) and the login
(`/status`, `/metrics`, the API and the console need one where [[user]]s are configured).
`AdminAccess.from_environment()` reads `RAFTMQ_TLS_CA`, `RAFTMQ_LOGIN` and `RAFTMQ_PASSCODE`,
the variables the other commands read.
"""

from __future__ import annotations

import base64
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from raftmq.client.tls import client_ssl_context

HTTPS = "https://"


def with_scheme(admin: str, tls: bool) -> str:
    """The admin address to ask: "https://host:port" when the group's admin ports speak TLS."""
    bare = admin.removeprefix(HTTPS).removeprefix("http://")
    return HTTPS + bare if tls else bare


@dataclass(frozen=True)
class AdminAccess:
    ca_file: str | None = None
    login: str | None = None
    passcode: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(cls) -> AdminAccess:
        return cls(os.environ.get("RAFTMQ_TLS_CA") or None, os.environ.get("RAFTMQ_LOGIN") or None,
                   os.environ.get("RAFTMQ_PASSCODE"))

    def request(self, admin: str, path: str, timeout: float, method: str = "GET", body: bytes | None = None,
                content_type: str | None = None) -> tuple[int, bytes]:
        """(HTTP status, body) of one request to `admin` ("host:port" or "https://host:port").
        Raises OSError (urllib's errors are OSErrors) when nothing answers."""
        tls = admin.startswith(HTTPS)
        request = urllib.request.Request(f"{'https' if tls else 'http'}://{with_scheme(admin, False)}{path}",
                                         data=body, method=method)
        if content_type is not None:
            request.add_header("Content-Type", content_type)
        if self.login is not None:
            token = base64.b64encode(f"{self.login}:{self.passcode or ''}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = self._context() if tls else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read() or b""

    def _context(self) -> ssl.SSLContext:
        return client_ssl_context(self.ca_file)
