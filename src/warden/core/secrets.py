"""Secrets as the registry stores them: sealed values (AES-GCM ciphertext, nonce, key id) by name."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Sealed", "SecretRow"]


@dataclass(frozen=True)
class Sealed:
    """An encrypted value as it is stored: ciphertext (with the GCM tag), nonce, key id."""

    ciphertext: bytes
    nonce: bytes
    key_id: str


@dataclass(frozen=True)
class SecretRow:
    name: str
    sealed: Sealed
    created_at: str
    updated_at: str

    def to_json(self) -> dict[str, object]:
        """What may be shown about a secret: never its value or ciphertext."""
        return {"name": self.name, "key_id": self.sealed.key_id, "created": self.created_at,
                "updated": self.updated_at}
