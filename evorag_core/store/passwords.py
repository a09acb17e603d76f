"""Password hashing with hashlib.scrypt; the stored form carries its parameters and salt."""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

__all__ = ["hash_password", "check_password"]

_N, _R, _P, _LEN = 2**14, 8, 1, 32


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def hash_password(password: str) -> str:
    """'scrypt$n$r$p$salt$hash' (base64 salt and hash)."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, dklen=_LEN)
    return f"scrypt${_N}${_R}${_P}${_b64(salt)}${_b64(digest)}"


def check_password(password: str, stored: str) -> bool:
    """True iff `password` matches `stored` (constant-time comparison); False for a malformed `stored`."""
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        return False
    try:
        n, r, p = (int(v) for v in parts[1:4])
        salt, expected = base64.b64decode(parts[4]), base64.b64decode(parts[5])
        digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=len(expected))
    except ValueError:  # also binascii.Error, and scrypt's refusal of bad parameters
        return False
    return hmac.compare_digest(digest, expected)
