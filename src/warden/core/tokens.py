"""Opaque tokens and their accessors (pure: randomness and the pepper are passed in).

A token is `wdn_` + 32 random bytes in URL-safe base64 (no padding). It is shown once and
stored only as HMAC-SHA256 under a pepper that lives outside the database (keys/pepper), so
a copy of the registry alone cannot be used to forge or test tokens offline (the approach of
HashiCorp Vault's token store and GitHub's token scanning formats). An accessor is a second,
non-secret handle of the same grant for listing, audit and revocation; it cannot
authenticate.
"""

from __future__ import annotations

import base64
import hmac
import re
from hashlib import sha256

__all__ = [
    "ACCESSOR_PREFIX",
    "TOKEN_BYTES",
    "TOKEN_PREFIX",
    "hash_token",
    "is_accessor",
    "looks_like_token",
    "make_accessor",
    "make_token",
    "same_hash",
]

TOKEN_PREFIX = "wdn_"  # noqa: S105 (a prefix, not a password)
ACCESSOR_PREFIX = "acc_"
TOKEN_BYTES = 32
ACCESSOR_BYTES = 12

# 32 bytes in unpadded URL-safe base64 are exactly 43 characters.
_TOKEN = re.compile(r"^wdn_[A-Za-z0-9_-]{43}$")
_ACCESSOR = re.compile(r"^acc_[0-9a-f]{24}$")


def make_token(random: bytes) -> str:
    """A new token from exactly TOKEN_BYTES of randomness."""
    if len(random) != TOKEN_BYTES:
        raise ValueError(f"a token needs {TOKEN_BYTES} random bytes, got {len(random)}")
    return TOKEN_PREFIX + base64.urlsafe_b64encode(random).rstrip(b"=").decode("ascii")


def make_accessor(random: bytes) -> str:
    """A new non-secret accessor id from ACCESSOR_BYTES of randomness."""
    if len(random) != ACCESSOR_BYTES:
        raise ValueError(f"an accessor needs {ACCESSOR_BYTES} random bytes, got {len(random)}")
    return ACCESSOR_PREFIX + random.hex()


def looks_like_token(text: object) -> bool:
    """True when `text` has the shape of a Warden token (says nothing of its validity)."""
    return isinstance(text, str) and _TOKEN.match(text) is not None


def is_accessor(text: object) -> bool:
    """True when `text` has the shape of an accessor id."""
    return isinstance(text, str) and _ACCESSOR.match(text) is not None


def hash_token(token: str, pepper: bytes) -> str:
    """The HMAC-SHA256 of `token` under `pepper`, hex: the only form a token is stored in."""
    if len(pepper) < 16:
        raise ValueError("the pepper must hold at least 16 bytes")
    return hmac.new(pepper, token.encode("utf-8"), sha256).hexdigest()


def same_hash(a: str, b: str) -> bool:
    """Constant-time comparison of two stored hashes."""
    return hmac.compare_digest(a.encode("ascii", "replace"), b.encode("ascii", "replace"))
