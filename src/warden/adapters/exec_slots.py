"""The API's exec slots as files every server worker of a home sees (`warden serve --workers N`).

Each worker keeps files of `HOME/run/exec-slots/` under an exclusive flock for as long as it
lives; a file says `running` and whose (a digest of the bot's name) while a command of that bot
holds it, `idle` otherwise. The count of files saying `running` is the count of commands running,
whichever worker runs them. A worker that dies lets go of its locks with its descriptors, so its
files free themselves (the next count removes them, whatever they say). Taking a slot counts and
marks one under a lock of the folder, so two workers never both take the last one.

A worker reuses its idle files rather than making and removing one per command: making and
removing a file are journaled changes of the folder, from 0.03 to 0.7 ms each exec on this
project's machines (more as the disk is busier), against a few microseconds to rewrite a file's
33 bytes in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["HeldSlots"]

_LOCK = ".lock"
_IDLE = b"-" * 33  # what a kept file says between two commands; as long as a running one's mark
_RUNNING = b"R"  # the first byte of a running slot's mark, then the digest of its bot's name
# Idle files a worker keeps: every count opens each, so few (more commands at once than this
# make and remove a file each, as all did before).
_KEPT = 2


def _mark(bot: str) -> bytes:
    """What a slot held by `bot` says (a digest: the folder shows no bot's name)."""
    return _RUNNING + hashlib.blake2b(bot.encode(), digest_size=16).hexdigest().encode("ascii")


class HeldSlots:
    """The exec slots held on this machine for one home (interfaces/http/running.ExecSlots)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._mutex = threading.Lock()  # over `_idle`, shared by this worker's threads
        self._idle: list[tuple[int, str]] = []  # (descriptor, path) of this worker's files, locked, idle
        self._pid = os.getpid()  # a forked child holds copies of the parent's locks: not its to reuse

    @contextlib.contextmanager
    def take(self, bot: str, admit: Callable[[int, int], None]) -> Iterator[None]:
        """Hold one slot of `bot` while the block runs; `admit(all, bots)` is called with the
        slots held now (every worker's), under the folder's lock, and raises to refuse."""
        mark = _mark(bot)
        with self._folder_locked():
            admit(*self._count(mark))
            slot = self._reused() or self._made()
            try:
                os.pwrite(slot[0], mark, 0)  # the same length as the idle mark: rewritten in place
            except BaseException:
                self._drop(slot)
                raise
        try:
            yield
        finally:
            self._give_back(slot)

    def counts(self, bot: str) -> tuple[int, int]:
        """(all, `bot`'s) slots every worker holds now."""
        with self.counted(bot) as held:
            return held

    @contextlib.contextmanager
    def counted(self, bot: str) -> Iterator[tuple[int, int]]:
        """(all, `bot`'s) slots every worker holds now, with no slot taken until the block ends:
        a background start counts them and records its process in the block, so that a take
        meanwhile, which counts the background processes under the same lock, sees it."""
        with self._folder_locked():
            yield self._count(_mark(bot))

    @contextlib.contextmanager
    def _folder_locked(self) -> Iterator[None]:
        """The folder's lock, on a descriptor of its own (flock excludes this worker's other
        threads too: each has its own open file)."""
        try:
            lock = self._open_lock()
        except FileNotFoundError:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            lock = self._open_lock()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # lets go of the folder's lock

    def _open_lock(self) -> int:
        return os.open(self.folder / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)

    def _reused(self) -> tuple[int, str] | None:
        """One of this worker's idle files still in the folder, or None."""
        with self._mutex:
            if self._pid != os.getpid():
                self._idle, self._pid = [], os.getpid()  # the parent's (its locks stay the parent's)
            while self._idle:
                fd, path = self._idle.pop()
                if os.fstat(fd).st_nlink > 0:
                    return fd, path
                os.close(fd)  # its folder was removed meanwhile
        return None

    def _made(self) -> tuple[int, str]:
        path = str(self.folder / secrets.token_hex(8))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            self._drop((fd, path))
            raise
        return fd, path

    def _give_back(self, slot: tuple[int, str]) -> None:
        """The slot idle again, kept for this worker's next command (or removed beyond _KEPT)."""
        try:
            os.pwrite(slot[0], _IDLE, 0)
        except OSError:
            self._drop(slot)  # it may still say running: removed, so that it is never counted again
            raise
        with self._mutex:
            if self._pid == os.getpid() and len(self._idle) < _KEPT:
                self._idle.append(slot)
                return
        self._drop(slot)

    @staticmethod
    def _drop(slot: tuple[int, str]) -> None:
        fd, path = slot
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)

    def _count(self, mark: bytes) -> tuple[int, int]:
        """(all, `mark`'s) slots held now; the files of workers that died are removed."""
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
                    try:
                        said = os.pread(fd, len(_IDLE) + 1, 0)
                    except OSError:
                        said = b""  # not a file of ours (a folder?), yet held: counted, as it always was
                    if said != _IDLE:  # anything else its live worker holds counts as running
                        everyone += 1
                        mine += said == mark
                    continue
                path.unlink(missing_ok=True)  # nobody holds it: its worker died
            finally:
                os.close(fd)
        return everyone, mine
