"""Waiting for something the test started: poll a predicate until it holds or a deadline passes.

A fixed `time.sleep` before looking is either too short on a busy machine (a false failure) or
longer than needed everywhere else; polling returns as soon as the thing has happened.
Standard library only: `tests/adapters/sandbox/escapes.py` imports this as a plain script too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll", "wait_until"]

T = TypeVar("T")


def poll(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.02, want: bool = True) -> T:
    """Call `predicate` until its answer is true (`want=False`: false, such as an empty list of
    what is left) or `timeout` seconds have passed; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if bool(value) == want or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.02,
               message: str | Callable[[], str] = "") -> T:
    """`poll` until `predicate` answers something true, failing the test when the deadline
    passes first: `message` (or a callable giving it, to show state read then) says what."""
    value = poll(predicate, timeout=timeout, interval=interval)
    if not value:
        said = message() if callable(message) else message
        raise AssertionError(f"{said or getattr(predicate, '__name__', 'the condition')} "
                             f"(not within {timeout:g} s)")
    return value
