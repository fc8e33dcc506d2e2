"""The HTTP API of `warden serve` (FastAPI): the protocol bots use to get and use workspaces.

`create_app` is imported when first asked for: the MCP server over stdio and the CLI use modules
of this package (calls, files, peers) and would otherwise load FastAPI and every route with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warden.interfaces.http.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from warden.interfaces.http.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
