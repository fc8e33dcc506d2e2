"""The HTTP API of `warden serve` (FastAPI): the bot protocol of seed 000."""

from __future__ import annotations

from warden.interfaces.http.app import create_app

__all__ = ["create_app"]
