"""Warden: a sandbox and workspace broker for AI agents.

    from warden import Warden
    w = Warden.open()
    ws = w.create("demo", template="minimal")
    ws.run(["python", "-c", "print(1)"], timeout=10)

Names are imported lazily so that `import warden` stays cheap for the CLI.
"""

from __future__ import annotations

from warden._version import __version__ as __version__

# Not `from typing import TYPE_CHECKING`: typing costs the `warden` program's start-up 7 ms
# (interfaces/cli/entry.py, the thin client of the daemon, imports this package); nor the
# errors, which are 1 ms more of it: all are imported when first asked for.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from warden.api import RunResult, Warden, Workspace
    from warden.core.errors import (
        Conflict,
        Denied,
        InvalidInput,
        Locked,
        NotFound,
        TimedOut,
        TooLarge,
        Unavailable,
        WardenError,
    )

_ERRORS = {"Conflict", "Denied", "InvalidInput", "Locked", "NotFound", "TimedOut", "TooLarge", "Unavailable",
           "WardenError"}

__all__ = [
    "Conflict",
    "Denied",
    "InvalidInput",
    "Locked",
    "NotFound",
    "RunResult",
    "TimedOut",
    "TooLarge",
    "Unavailable",
    "Warden",
    "WardenError",
    "Workspace",
]


def __getattr__(name: str) -> Any:
    if name in {"Warden", "Workspace", "RunResult"}:
        from warden import api

        return getattr(api, name)
    if name in _ERRORS:
        from warden.core import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'warden' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The names imported lazily are the package's all the same (a REPL's completion, pydoc).
    return sorted({*globals(), *__all__})
