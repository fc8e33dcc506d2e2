"""The HTTP API of `warden serve` (FastAPI): the protocol bots use to get and use workspaces."""

from __future__ import annotations

from warden.interfaces.http.app import create_app

__all__ = ["create_app"]
