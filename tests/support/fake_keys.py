"""Keys (core.ports.Keys) without files or cryptography, for unit tests of services.

Not a cipher: a sealed value is its name and plaintext side by side, so a test can see what
was sealed; `open` refuses a value moved onto another name, as AES-GCM's associated data does.
"""

from __future__ import annotations

from warden.core.errors import Unavailable
from warden.core.secrets import Sealed


class FakeKeys:
    def __init__(self) -> None:
        self.key_id = "k1"
        self._next: str | None = None

    def pepper(self) -> bytes:
        return b"p" * 32

    def seal(self, name: str, plaintext: bytes, *, key: tuple[str, bytes] | None = None) -> Sealed:
        return Sealed(name.encode() + b"\0" + plaintext, b"n" * 12, key[0] if key else self.key_id)

    def open(self, name: str, sealed: Sealed) -> bytes:
        bound, _, plain = sealed.ciphertext.partition(b"\0")
        if bound != name.encode() or sealed.key_id not in {self.key_id, self._next}:
            raise Unavailable(f"the secret {name!r} cannot be decrypted")
        return plain

    def begin_rotation(self) -> tuple[str, bytes]:
        self._next = f"k{int(self.key_id[1:]) + 1}"
        return self._next, b"k" * 32

    def finish_rotation(self) -> None:
        assert self._next is not None
        self.key_id, self._next = self._next, None
