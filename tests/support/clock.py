"""A clock tests move by hand (expiry, ttl), for services that take `clock=`."""

from __future__ import annotations

from datetime import UTC, datetime


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now
