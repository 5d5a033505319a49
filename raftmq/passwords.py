"""Password hashes for `[[user]]` entries: scrypt (stdlib `hashlib`), one self-describing line.

    scrypt$N$r$p$SALT$HASH      N, r, p: scrypt's cost parameters; SALT, HASH: base64, unpadded

The parameters travel with the hash, so raising the cost later does not invalidate the
hashes already in configs. `raftmq passwd` prints such a line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SCHEME = "scrypt"
# 2**14 / 8 / 1: the widely used interactive-login cost (~50 ms, 16 MiB per check).
DEFAULT_N = 2**14
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
# scrypt needs 128 * N * r * p bytes; a hash demanding more than this is refused at load time
# rather than failing (or swapping) at the first login.
MAX_MEMORY_BYTES = 256 * 2**20
FORMAT_HINT = "scrypt$N$r$p$SALT$HASH"


@dataclass(frozen=True, slots=True)
class ScryptHash:
    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def encode(self) -> str:
        return f"{SCHEME}${self.n}${self.r}${self.p}${_b64(self.salt)}${_b64(self.digest)}"


def hash_password(password: str, *, n: int = DEFAULT_N, r: int = DEFAULT_R, p: int = DEFAULT_P) -> str:
    """A new hash line for `password` with a fresh random salt."""
    if not password:
        raise ValueError("the password is empty")
    _check_cost(n, r, p)
    salt = secrets.token_bytes(SALT_BYTES)
    return ScryptHash(n, r, p, salt, _derive(password, salt, n, r, p, HASH_BYTES)).encode()


def parse_hash(encoded: str) -> ScryptHash:
    """Decode a hash line; `ValueError` says what is wrong without repeating the text (an
    operator who pasted a plaintext password there must not see it echoed into logs)."""
    parts = encoded.split("$")
    if len(parts) != 6 or parts[0] != SCHEME:
        raise ValueError(f"not a raftmq password hash (expected {FORMAT_HINT})")
    try:
        n, r, p = (int(part) for part in parts[1:4])
    except ValueError:
        raise ValueError(f"N, r and p must be integers ({FORMAT_HINT})") from None
    _check_cost(n, r, p)
    try:
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except (binascii.Error, ValueError):
        raise ValueError(f"SALT and HASH must be base64 ({FORMAT_HINT})") from None
    if len(salt) < 8 or len(digest) < 16:
        raise ValueError("salt or hash too short (at least 8 and 16 bytes)")
    return ScryptHash(n, r, p, salt, digest)


def verify_password(password: str, stored: ScryptHash) -> bool:
    """True when `password` hashes to `stored`; the comparison takes constant time."""
    candidate = _derive(password, stored.salt, stored.n, stored.r, stored.p, len(stored.digest))
    return hmac.compare_digest(candidate, stored.digest)


def _derive(password: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    memory = 128 * n * r * p + 2**20
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=memory, dklen=length)


def _check_cost(n: int, r: int, p: int) -> None:
    if n < 2 or n & (n - 1):
        raise ValueError(f"N must be a power of two greater than 1, got {n}")
    if r < 1 or p < 1:
        raise ValueError(f"r and p must be positive, got r={r} p={p}")
    if 128 * n * r * p > MAX_MEMORY_BYTES:
        raise ValueError(f"N*r*p too large: scrypt would need more than {MAX_MEMORY_BYTES // 2**20} MiB per check")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    if not text:
        raise ValueError("empty")
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
