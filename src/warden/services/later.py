"""What this process must do later, if it still runs then, on one thread kept for it.

A run holds its lease renewed every ttl/3 and registers as an instance once it has run one
heartbeat interval (services/leases.py, services/instances.py); each used to start a thread of
its own for that. Starting a thread waits for the new thread to be scheduled: 0.25 ms at the
median and several at the 90th percentile on a busy 2-core machine, twice per `warden run`,
whose command has nearly always ended before either is due. Here a due time is a heap entry;
the one timer thread is started once per process (the daemon's spare starts it while it waits:
`ready`), and a job that comes due runs in a thread of its own, so that one held up (a locked
registry) delays no other.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable

__all__ = ["call", "ready"]


class _Later:
    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Also in a forked child: the parent's thread is not there, and its lock may have been
        # held at the fork.
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._pending: set[int] = set()  # the numbers of the jobs in `_due`
        self._cancelled: set[int] = set()  # of those, the ones cancelled (dropped when due)
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    def ready(self) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="warden-later", daemon=True)
                self._thread.start()

    def call(self, delay_s: float, job: Callable[[], object]) -> Callable[[], None]:
        with self._cond:
            number = next(self._numbers)
            heapq.heappush(self._due, (time.monotonic() + max(delay_s, 0.0), number, job))
            self._pending.add(number)
            self._cond.notify()
        self.ready()

        def cancel() -> None:
            with self._cond:
                if number in self._pending:
                    self._cancelled.add(number)

        return cancel

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._due:
                        self._cond.wait()
                        continue
                    when, number, job = self._due[0]
                    cancelled = number in self._cancelled
                    if cancelled or when <= time.monotonic():
                        heapq.heappop(self._due)
                        self._pending.discard(number)
                        self._cancelled.discard(number)
                        if cancelled:
                            continue
                        break
                    self._cond.wait(when - time.monotonic())
            threading.Thread(target=job, name="warden-later-job", daemon=True).start()


_LATER = _Later()
os.register_at_fork(after_in_child=_LATER._reset)


def call(delay_s: float, job: Callable[[], object]) -> Callable[[], None]:
    """Run `job` in a thread of its own `delay_s` seconds from now; the function returned cancels
    it (nothing once it has started)."""
    return _LATER.call(delay_s, job)


def ready() -> None:
    """Start the timer thread now, before the work that will need it."""
    _LATER.ready()
