"""Each terminal's context as a small JSON file of the home: `terminals/<terminal>.json`.

A change is read-modify-write under an exclusive flock of the file's lock beside it, and the
file is replaced atomically: two commands of one terminal at once never lose a `ws set`, and a
kill between the two leaves the old file or the new one. Files are the person's own (0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.core.context import TerminalContext
from warden.core.errors import InvalidInput

__all__ = ["JsonDocs", "TerminalFiles"]

_MAX_FILE = 64 * 1024


class TerminalFiles:
    """core.ports.TerminalStore on the home's `terminals/` folder."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def _path(self, terminal: str) -> Path:
        return self._folder / f"{terminal}.json"

    def read(self, terminal: str) -> TerminalContext:
        try:
            fd = os.open(self._path(terminal), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return TerminalContext()
        with os.fdopen(fd, "rb") as file:
            data = file.read(_MAX_FILE + 1)
        try:
            doc = json.loads(data) if len(data) <= _MAX_FILE else {}
        except ValueError:
            doc = {}
        return TerminalContext.from_json(doc) if isinstance(doc, dict) else TerminalContext()

    @contextlib.contextmanager
    def _locked(self, terminal: str) -> Iterator[None]:
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self._folder / f".{terminal}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def change(self, terminal: str, how: Callable[[TerminalContext], TerminalContext]) -> TerminalContext:
        with self._locked(terminal):
            new = how(self.read(terminal))
            write_atomic(self._path(terminal), json.dumps(new.to_json()).encode(), mode=0o600)
            return new


class JsonDocs:
    """core.ports.StateDocs: small JSON documents of the home, one per key, changed the same way
    (flock, read-modify-write, atomic replace, the person's own)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._files = TerminalFiles(folder)

    def read(self, key: str) -> dict[str, object]:
        try:
            fd = os.open(self._folder / f"{key}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, "rb") as file:
            data = file.read(_MAX_FILE * 4 + 1)
        try:
            doc = json.loads(data) if len(data) <= _MAX_FILE * 4 else {}
        except ValueError:
            doc = {}
        return doc if isinstance(doc, dict) else {}

    def change(self, key: str, how: Callable[[dict[str, object]], dict[str, object]]) -> dict[str, object]:
        with self._files._locked(key):
            new = how(self.read(key))
            data = json.dumps(new, sort_keys=True).encode()
            if len(data) > _MAX_FILE * 4:  # what `read` would not read back: refused, never lost
                raise InvalidInput(f"{key}'s saved state would be over {_MAX_FILE * 4} bytes; drop some first")
            write_atomic(self._folder / f"{key}.json", data, mode=0o600)
            return new
