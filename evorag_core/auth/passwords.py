"""Password hashes for every login of the studio (the users file and the store's users): argon2id via argon2-cffi.

`hash_password` writes argon2id PHC strings (`$argon2id$v=19$m=65536,t=3,p=4$salt$hash`: RFC 9106's low-memory
profile, argon2-cffi's defaults). `check_password` verifies them, and also the `scrypt$n$r$p$salt$hash` strings that
earlier versions stored for store users; `needs_rehash` is True for those (and for argon2 hashes with older
parameters), so a successful login can replace them. Comparisons are constant-time (inside libargon2, and
`hmac.compare_digest` for scrypt); `check_unknown_user` spends the time of a real check on a name that does not
exist, so the reply time does not tell which names do.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

__all__ = ["hash_password", "check_password", "needs_rehash", "check_unknown_user", "is_password_hash"]

_HASHER = PasswordHasher()  # argon2id, t=3, m=64 MiB, p=4


def hash_password(password: str) -> str:
    """A new argon2id hash of `password` (random salt); ValueError for an empty password."""
    if not password:
        raise ValueError("the password is empty")
    return _HASHER.hash(password)


def check_password(password: str, stored: str) -> bool:
    """True iff `password` matches `stored` (an argon2 or a legacy scrypt hash); False for anything malformed."""
    if stored.startswith("$argon2"):
        try:
            return _HASHER.verify(stored, password)
        except (VerificationError, InvalidHashError):
            return False
    if stored.startswith("scrypt$"):
        return _check_scrypt(password, stored)
    return False


def needs_rehash(stored: str) -> bool:
    """True unless `stored` is an argon2 hash with today's parameters."""
    if not stored.startswith("$argon2"):
        return True
    try:
        return _HASHER.check_needs_rehash(stored)
    except InvalidHashError:
        return True


def is_password_hash(stored: str) -> bool:
    """Whether `stored` looks like a hash this module verifies (argon2 or legacy scrypt), not a plain password."""
    return stored.startswith(("$argon2", "scrypt$"))


def check_unknown_user(password: str) -> bool:
    """Always False, after as long as a real check takes (an argon2 check against a throwaway hash)."""
    check_password(password, _throwaway_hash())
    return False


@functools.cache
def _throwaway_hash() -> str:
    return hash_password(secrets.token_urlsafe(16))


def _check_scrypt(password: str, stored: str) -> bool:
    """'scrypt$n$r$p$salt$hash' (base64 salt and hash), as hashlib.scrypt wrote them before argon2."""
    parts = stored.split("$")
    if len(parts) != 6:
        return False
    try:
        n, r, p = (int(v) for v in parts[1:4])
        salt, expected = base64.b64decode(parts[4]), base64.b64decode(parts[5])
        digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=len(expected))
    except ValueError:  # also binascii.Error, and scrypt's refusal of bad parameters
        return False
    return hmac.compare_digest(digest, expected)
