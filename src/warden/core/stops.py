"""A person's stop (the CLI's Terminated for SIGTERM and SIGHUP, KeyboardInterrupt for Ctrl-C)
held back while a write that must be whole is under way, and raised once it is done.

The CLI raises the stop wherever its process is when the signal comes (interfaces/cli/main.py).
Raised in the transaction that gives a run's lease back with its outcome, it rolled that write
back: the run stayed "in progress" (a `run.lost` at the next sweep, its outcome never audited)
and its lease held until it expired. Such a write runs `with whole:` (a `Whole`), and
`whole.raise_held()` raises the stop that came meanwhile once its caller can unwind.

Only the main thread: Python runs signal handlers there, so a stop interrupts nothing else.
"""

from __future__ import annotations

import threading
from types import TracebackType

from warden.core.errors import Terminated

__all__ = ["Whole", "carried", "held_back", "raise_unwritten"]

_under_way: list[Whole] = []  # the main thread's whole writes, the innermost last


class Whole:
    """`with whole:` a write no stop interrupts; `whole.raise_held()` afterwards raises the stop
    that came meanwhile, if one did."""

    def __init__(self) -> None:
        self.held: BaseException | None = None
        self._main = False
        # Set while the write has written nothing yet (a lease's take waiting for the registry's
        # lock): a stop held then may be raised where it waits (`raise_unwritten`), as if it had
        # come before the write began, rather than wait for another process to let go.
        self.unwritten = False

    def __enter__(self) -> Whole:
        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            _under_way.append(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._main:
            _under_way.remove(self)

    def raise_held(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            raise held


def held_back(stop: BaseException) -> bool:
    """Keep `stop` for the whole write under way on the main thread (the first one it gets);
    False when none is: its caller raises it at once."""
    if not _under_way or threading.current_thread() is not threading.main_thread():
        return False
    if _under_way[-1].held is None:
        _under_way[-1].held = stop
    return True


def raise_unwritten() -> None:
    """Where a write waits before it has written anything (the registry's lock): raise the stop
    held by the innermost whole write if that one has written nothing yet."""
    whole = _under_way[-1] if _under_way else None
    if whole is not None and whole.unwritten and whole.held is not None:
        held, whole.held = whole.held, None
        raise held


def carried(exc: BaseException | None) -> KeyboardInterrupt | Terminated | None:
    """The person's stop `exc` is, or carries as its cause: Python 3.11 wraps an exception raised
    in a class's `__set_name__` in a RuntimeError, so a stop that came as a module of dataclasses
    loaded mid-command was taken for an internal error (exit 1) and its run for one that failed
    before it ran (its intent never closed)."""
    for _ in range(8):  # a chain of causes is short; a cycle is not followed for ever
        if exc is None or isinstance(exc, (KeyboardInterrupt, Terminated)):
            return exc
        exc = exc.__cause__
    return None
