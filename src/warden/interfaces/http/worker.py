"""The API for a `warden serve --workers N` worker process (uvicorn imports this factory)."""

from __future__ import annotations

from fastapi import FastAPI

__all__ = ["app_from_environment"]


def app_from_environment() -> FastAPI:
    """A worker's API: $WARDEN_HOME and settings from the environment the server passed down."""
    from warden.bootstrap import bootstrap
    from warden.interfaces.http import create_app

    app = bootstrap()
    app.serving = True  # its requests are bots': no terminal's lock is theirs
    return create_app(app)
