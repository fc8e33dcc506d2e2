"""Where this process's key for the names of Warden's temporary files comes from (safefs/temps.py).

Apart from safefs so that bootstrap can name the source without importing safe file access
(ctypes, hashlib): a read of the registry (`warden list`) loads neither.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["key_source", "use_key_source"]

_source: Callable[[bool], bytes | None] | None = None


def use_key_source(source: Callable[[bool], bytes | None] | None) -> None:
    """`source(make)` gives the key, made first when `make` (a write) and missing; None: no key."""
    global _source
    _source = source


def key_source() -> Callable[[bool], bytes | None] | None:
    return _source
