"""DURATION values as the user writes them: `30s`, `10m`, `2h`, `7d`."""

from __future__ import annotations

import functools
import math
import re
from datetime import timedelta

from warden.core.errors import InvalidInput

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PATTERN = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
# Longer lifetimes are a typo, and a date that far ahead overflows datetime (year 9999).
MAX_DURATION = timedelta(days=36500)
# The longest wall-clock timeout of one sandboxed command, whatever sandbox.timeout says: the
# HTTP exec body's own cap (interfaces/http/models.py, 86400 s). Far longer waits also overflow
# epoll's millisecond int (about 24.8 days) in the runner's select loop.
MAX_RUN_TIMEOUT = timedelta(days=1)


def parse_duration(text: str) -> timedelta:
    """Parse `30s`, `10m`, `2h`, `7d` or `1w` into a timedelta."""
    match = _PATTERN.match(text)
    if not match:
        raise InvalidInput(f"bad duration {text!r}: write a whole number and a unit, e.g. 30s, 10m, 2h, 7d")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidInput(f"duration {text!r} is longer than 100 years (36500d); give a shorter one")
    return timedelta(seconds=seconds)


def parse_timeout(text: str, *, label: str = "--timeout") -> float:
    """A run's timeout as seconds: a plain number (`90`, `2.5`) or a DURATION (`30s`, `10m`).

    It must be above zero and at most MAX_RUN_TIMEOUT; InvalidInput (naming `label`) otherwise.
    """
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text).total_seconds()
        except InvalidInput:
            raise InvalidInput(f"bad {label} {text!r}: give seconds (e.g. 90) or a duration "
                               "(e.g. 30s, 10m, 2h)") from None
    return check_timeout(seconds, label=label, shown=text)


def check_timeout(seconds: float, *, label: str = "timeout", shown: str | None = None) -> float:
    """`seconds` when it is a usable run timeout: a number above zero, at most MAX_RUN_TIMEOUT."""
    given = shown if shown is not None else f"{seconds:g}"
    if math.isnan(seconds) or seconds <= 0:
        raise InvalidInput(f"bad {label} {given!r}: give a number of seconds above zero (e.g. 30, 10m)")
    limit = MAX_RUN_TIMEOUT.total_seconds()
    if seconds > limit:
        raise InvalidInput(f"{label} {given} is longer than the maximum of "
                           f"{format_duration(MAX_RUN_TIMEOUT)} ({limit:g} s); give a shorter one")
    return seconds


def format_duration(delta: timedelta) -> str:
    """The shortest exact spelling of `delta` in the same units."""
    seconds = int(delta.total_seconds())
    for unit in ("w", "d", "h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(\d{1,15})\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def parse_size(text: str) -> int:
    """Parse `256M`, `1G`, `512k`, `1GiB` or plain bytes into bytes (binary units). Remembered
    per text (a pure function of it): every run reads the same few sizes from the settings."""
    match = _SIZE.match(text)
    if not match:
        raise InvalidInput(f"bad size {text!r}: write a number and an optional unit, e.g. 256M, 1G")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def format_size(size: int) -> str:
    """The shortest exact spelling of `size` bytes in binary units: 16M, 1G, 1536K, 100."""
    for unit in ("T", "G", "M", "K"):
        factor = _SIZE_UNITS[unit.lower()]
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
