"""The API's exec slots as files every server worker of a home sees (`warden serve --workers N`).

Each exec the API runs holds a file of `HOME/run/exec-slots/` under an exclusive flock for as
long as its command runs; the count of held files is the count of commands running, whichever
worker runs them. A worker that dies lets go of its locks with its descriptors, so its slots
free themselves (the next count removes their files). Taking a slot counts and adds one under
a lock of the folder, so two workers never both take the last one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["HeldSlots"]

_LOCK = ".lock"


class HeldSlots:
    """The exec slots held on this machine for one home (interfaces/http/running.ExecSlots)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @contextlib.contextmanager
    def take(self, bot: str, admit: Callable[[int, int], None]) -> Iterator[None]:
        """Hold one slot of `bot` while the block runs; `admit(all, bots)` is called with the
        slots held now (every worker's), under the folder's lock, and raises to refuse."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(self.folder / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        held: int | None = None
        path = self.folder / f"{bot.encode().hex()}.{secrets.token_hex(8)}"
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            everyone, mine = self._count(bot)
            admit(everyone, mine)
            held = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            fcntl.flock(held, fcntl.LOCK_EX)
        except BaseException:
            if held is not None:
                path.unlink(missing_ok=True)
                os.close(held)
            raise
        finally:
            os.close(lock)  # lets go of the folder's lock
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            os.close(held)

    def counts(self, bot: str) -> tuple[int, int]:
        """(all, `bot`'s) slots every worker holds now."""
        with self.counted(bot) as held:
            return held

    @contextlib.contextmanager
    def counted(self, bot: str) -> Iterator[tuple[int, int]]:
        """(all, `bot`'s) slots every worker holds now, with no slot taken until the block ends:
        a background start counts them and records its process in the block, so that a take
        meanwhile, which counts the background processes under the same lock, sees it."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(self.folder / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield self._count(bot)
        finally:
            os.close(lock)

    def _count(self, bot: str) -> tuple[int, int]:
        """(all, `bot`'s) slots held now; the files of workers that died are removed."""
        prefix = bot.encode().hex() + "."
        everyone = mine = 0
        for name in os.listdir(self.folder):
            if name == _LOCK:
                continue
            path = self.folder / name
            try:
                # Non-blocking: a FIFO in its place would otherwise hold the open forever.
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # released meanwhile
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    everyone += 1
                    mine += name.startswith(prefix)
                    continue
                path.unlink(missing_ok=True)  # nobody holds it: its worker died mid-command
            finally:
                os.close(fd)
        return everyone, mine
