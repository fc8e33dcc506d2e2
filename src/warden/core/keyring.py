"""The cluster keyring as the registry stores it: keys wrapped under a key-encryption key.

Several nodes share one PostgreSQL registry, so they need one token pepper and one secrets
data key. Neither is ever stored in plaintext: each is wrapped (AES-256-GCM) under the
cluster key (KEK) that every node holds outside the database (keys/cluster.key or
WARDEN_CLUSTER_KEY). The registry keeps the KEK's check value, so a node holding another KEK
is told so at once instead of refusing every token or failing every secret later.

Pure: key ids and check values are hashes; wrapping itself is the adapter's.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

__all__ = ["PEPPER", "PURPOSES", "SECRETS", "KeyRow", "KeyringState", "Purpose", "kek_id", "new_key_id",
           "wrap_context"]

Purpose = Literal["pepper", "secrets"]
PEPPER: Purpose = "pepper"
SECRETS: Purpose = "secrets"
PURPOSES: tuple[Purpose, ...] = (PEPPER, SECRETS)

# A key's state: `current` seals (or hashes) new values; `previous` only opens (verifies) old
# ones: a pepper until `warden keys retire-pepper`, a data key until the next rotation.
CURRENT = "current"
PREVIOUS = "previous"


def kek_id(kek: bytes) -> str:
    """The cluster key's check value: an HMAC under the key itself (proves which key, reveals nothing)."""
    return "kek_" + hmac.new(kek, b"warden cluster key check value", hashlib.sha256).hexdigest()[:16]


def new_key_id(purpose: Purpose, key: bytes) -> str:
    """The public id of a wrapped key. A secrets data key keeps the id form of the local master
    key (`mk_…`), so a secret row names its key the same way in both."""
    prefix = "mk_" if purpose == SECRETS else "pp_"
    return prefix + hashlib.sha256(b"warden-key-id:" + key).hexdigest()[:16]


def wrap_context(purpose: Purpose, key_id: str) -> bytes:
    """The associated data of a wrapped key: a row moved onto another id or purpose does not unwrap."""
    return f"warden-cluster-key:{purpose}:{key_id}".encode()


@dataclass(frozen=True)
class KeyRow:
    """One wrapped key: `wrapped` is the AES-GCM nonce followed by the ciphertext and tag."""

    id: str
    purpose: Purpose
    state: str
    wrapped: bytes
    kek_id: str
    created_at: str

    def to_json(self) -> dict[str, object]:
        """What may be shown: never the wrapped bytes."""
        return {"id": self.id, "purpose": self.purpose, "state": self.state, "created": self.created_at}


@dataclass(frozen=True)
class KeyringState:
    """The keyring's one row: `version` grows by one with every change (compare-and-set)."""

    version: int
    kek_id: str
    created_at: str
    updated_at: str
