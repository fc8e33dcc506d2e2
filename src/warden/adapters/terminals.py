"""Small JSON documents of the home, one per key: each terminal's context (`terminals/<id>.json`)
and each workspace's saved states (`workspace-state/<name>.json`).

A change is read-modify-write under an exclusive flock of the document's lock beside it, and the
file is replaced atomically: two commands of one terminal at once never lose a `ws set`, and a
kill between the two leaves the old file or the new one. Files are the person's own (0600); a
link or FIFO where a document should be is read as no document (never followed, never blocks).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from warden.adapters.atomic import exclusive, write_atomic
from warden.core.context import TerminalContext
from warden.core.errors import InvalidInput

__all__ = ["JsonDocs", "TerminalFiles"]

_MAX_DOC = 256 * 1024


class JsonDocs:
    """core.ports.StateDocs on one folder of the home."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def read(self, key: str) -> dict[str, object]:
        try:
            fd = os.open(self._folder / f"{key}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:  # missing, or a link (O_NOFOLLOW): no document
            return {}
        with os.fdopen(fd, "rb") as file:
            data = file.read(_MAX_DOC + 1)
        try:
            doc = json.loads(data) if len(data) <= _MAX_DOC else {}
        except ValueError:
            doc = {}
        return doc if isinstance(doc, dict) else {}

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with exclusive(self._folder / f".{key}.lock"):
            yield

    def change(self, key: str, how: Callable[[dict[str, object]], dict[str, object]]) -> dict[str, object]:
        with self._locked(key):
            new = how(self.read(key))
            data = json.dumps(new, sort_keys=True).encode()
            if len(data) > _MAX_DOC:  # what `read` would not read back: refused, never lost
                raise InvalidInput(f"{key}'s saved state would be over {_MAX_DOC} bytes; drop some first")
            write_atomic(self._folder / f"{key}.json", data, mode=0o600)
            return new


class TerminalFiles:
    """core.ports.TerminalStore: terminals' contexts as JSON documents."""

    def __init__(self, folder: Path) -> None:
        self._docs = JsonDocs(folder)

    def read(self, terminal: str) -> TerminalContext:
        return TerminalContext.from_json(self._docs.read(terminal))

    def change(self, terminal: str, how: Callable[[TerminalContext], TerminalContext]) -> TerminalContext:
        changed: list[TerminalContext] = []

        def apply(doc: dict[str, object]) -> dict[str, object]:
            changed[:] = [how(TerminalContext.from_json(doc))]
            return changed[0].to_json()

        self._docs.change(terminal, apply)
        return changed[0]
