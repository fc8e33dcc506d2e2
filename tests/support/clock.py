"""A clock tests move by hand (expiry, ttl), for services that take `clock=`."""

from __future__ import annotations

from datetime import UTC, datetime


class Clock:
    def __init__(self, now: datetime | None = None) -> None:
        self.now = now if now is not None else datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now
