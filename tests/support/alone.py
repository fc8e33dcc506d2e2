"""Tests that need the machine to themselves while pytest-xdist runs others beside them.

Most tests share the machine freely. A few cannot: those that measure time, fill memory or
fork until a limit stops them, or judge machine-wide state (every run cgroup on the host).
They are marked `pytest.mark.alone`, or hold `alone()` for the part that needs it. Under
pytest-xdist each test holds a shared lock on one file of the session from its set-up to its
teardown, and an `alone` test holds it exclusively: it starts once the tests in flight on the
other workers are done, and no test starts beside it. A waiting exclusive holder goes first
(a second, "turnstile" lock keeps new shared holders out meanwhile), so a stream of short
tests cannot starve it; a worker keeps the exclusive lock from one `alone` test to the next.

Without xdist the tests run one at a time anyway and no lock is taken.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["MachineLock", "alone", "beside_others", "install"]


class MachineLock:
    """A readers-writer lock between the worker processes of one test session (flock)."""

    def __init__(self, folder: Path) -> None:
        self._main_path = folder / "warden-tests-alone.lock"
        self._turnstile_path = folder / "warden-tests-alone.turnstile"
        self._main: IO[bytes] | None = None
        self.mode: str | None = None  # "shared", "exclusive" or None (not held by this process)

    def take(self, *, exclusive: bool) -> None:
        """Hold the lock in this mode (letting go of another mode first: a shared holder that
        waited for the exclusive lock could wait for another one doing the same)."""
        wanted = "exclusive" if exclusive else "shared"
        if self.mode == wanted:
            return
        self.drop()
        main = open(self._main_path, "ab")  # noqa: SIM115 - held until drop()
        with open(self._turnstile_path, "ab") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self._main, self.mode = main, wanted

    def drop(self) -> None:
        if self._main is not None:
            self._main.close()  # releases the flock
        self._main, self.mode = None, None


_lock: MachineLock | None = None


def install(lock: MachineLock | None) -> None:
    """Set the session's lock (conftest does, in each xdist worker); None: no other worker."""
    global _lock
    _lock = lock


@contextlib.contextmanager
def beside_others(*, exclusive: bool, keep: bool = False) -> Iterator[None]:
    """Held around each whole test by conftest; `keep`: still held after it (the next test
    wants the same exclusive lock)."""
    if _lock is None:
        yield
        return
    _lock.take(exclusive=exclusive)
    try:
        yield
    finally:
        if not keep:
            _lock.drop()


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """No other test of the session runs while this block of a test or fixture does."""
    if _lock is None or _lock.mode == "exclusive":
        yield
        return
    before = _lock.mode
    _lock.take(exclusive=True)
    try:
        yield
    finally:
        _lock.drop()
        if before is not None:
            _lock.take(exclusive=False)
