"""Keys (core.ports.Keys) without files or cryptography, for unit tests of services.

Not a cipher: a sealed value is its name and plaintext side by side, so a test can see what
was sealed. As AES-GCM does, `open` refuses a value moved onto another name (the associated
data) and one whose bytes were altered (the tag: here a digest kept in the nonce's place).
"""

from __future__ import annotations

import contextlib
import hashlib

from warden.core.errors import Unavailable
from warden.core.secrets import Sealed


def _tag(ciphertext: bytes, key_id: str) -> bytes:
    return hashlib.sha256(key_id.encode() + b"\0" + ciphertext).digest()[:12]


class FakeKeys:
    def __init__(self) -> None:
        self.key_id = "k1"
        self._next: str | None = None

    def pepper(self) -> bytes:
        return b"p" * 32

    def peppers(self) -> list[bytes]:
        return [self.pepper()]

    def seal(self, name: str, plaintext: bytes, *, key: tuple[str, bytes] | None = None) -> Sealed:
        key_id = key[0] if key else self.key_id
        ciphertext = name.encode() + b"\0" + plaintext
        return Sealed(ciphertext, _tag(ciphertext, key_id), key_id)

    def open(self, name: str, sealed: Sealed) -> bytes:
        if sealed.key_id not in {self.key_id, self._next}:
            raise Unavailable(f"secret {name!r} was sealed with key {sealed.key_id}, which is not here")
        bound, _, plain = sealed.ciphertext.partition(b"\0")
        if bound != name.encode() or sealed.nonce != _tag(sealed.ciphertext, sealed.key_id):
            raise Unavailable(f"secret {name!r} does not decrypt (the stored row was altered)")
        return plain

    def begin_rotation(self) -> tuple[str, bytes]:
        self._next = f"k{int(self.key_id[1:]) + 1}"
        return self._next, b"k" * 32

    def sealing(self, *, rotating: bool = False) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def finish_rotation(self) -> None:
        assert self._next is not None
        self.key_id, self._next = self._next, None
