"""Tests that need the machine to themselves while pytest-xdist runs others beside them.

Most tests share the machine freely. A few cannot: those that measure time, fill memory or
fork until a limit stops them, or judge machine-wide state (every run cgroup on the host).
They are marked `pytest.mark.alone`. Under pytest-xdist each test holds a shared lock on one
file of the session from its set-up to its teardown, and an `alone` test holds it exclusively,
so it starts once the tests in flight on the other workers are done and no test starts beside
it. A waiting exclusive holder goes first (a second, "turnstile" lock keeps new shared holders
out meanwhile), so a stream of short tests cannot starve it. `alone()` gives part of a test
or fixture the same (a module fixture doing the heavy work for many quick tests).

Without xdist the tests run one at a time anyway and no lock is taken.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["MachineLock", "alone"]


class MachineLock:
    """A readers-writer lock between the worker processes of one test session (flock)."""

    def __init__(self, folder: Path) -> None:
        self._main_path = folder / "warden-tests-alone.lock"
        self._turnstile_path = folder / "warden-tests-alone.turnstile"
        self._main: IO[bytes] | None = None
        self.mode: str | None = None  # "shared", "exclusive" or None (not held by this process)

    def _take(self, exclusive: bool) -> None:
        assert self.mode is None
        self._main = open(self._main_path, "ab")  # noqa: SIM115 - held across calls
        with open(self._turnstile_path, "ab") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(self._main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self.mode = "exclusive" if exclusive else "shared"

    def _drop(self) -> None:
        if self._main is not None:
            self._main.close()  # releases the flock
        self._main = None
        self.mode = None

    @contextlib.contextmanager
    def hold(self, *, exclusive: bool) -> Iterator[None]:
        """Hold the lock (a no-op when this process holds it already in a strong enough mode;
        shared turns exclusive meanwhile, by letting go first, so two never wait on each other)."""
        before = self.mode
        if before == "exclusive" or (before == "shared" and not exclusive):
            yield
            return
        self._drop()
        self._take(exclusive)
        try:
            yield
        finally:
            self._drop()
            if before is not None:
                self._take(exclusive=False)


_lock: MachineLock | None = None


def install(lock: MachineLock | None) -> None:
    """Set the session's lock (conftest does, in each xdist worker); None: no other worker."""
    global _lock
    _lock = lock


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """No other test of the session runs while this block does."""
    if _lock is None:
        yield
        return
    with _lock.hold(exclusive=True):
        yield


@contextlib.contextmanager
def beside_others(exclusive: bool) -> Iterator[None]:
    """Held around each whole test (its set-up, call and teardown) by conftest."""
    if _lock is None:
        yield
        return
    with _lock.hold(exclusive=exclusive):
        yield
