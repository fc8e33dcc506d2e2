"""The one error tree of Warden.

    WardenError                (code: internal)
    ├── InvalidInput           (code: invalid)      bad argument, value or file
    ├── NotFound               (code: not_found)    no such workspace, file, key
    ├── Conflict               (code: conflict)     already exists, wrong state
    ├── Locked                 (code: locked)       held by someone else
    ├── Denied                 (code: denied)       refused by policy or permissions
    ├── TimedOut               (code: timeout)      a limit of time ran out
    ├── Unavailable            (code: unavailable)  a piece of the machine is missing
    └── TooLarge               (code: invalid)      a size limit was exceeded

Interfaces map `code` to an exit status (CLI) or an HTTP status (API), each in one table.
Every message is one line that says what was wrong and what to do.
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Denied",
    "InvalidInput",
    "Locked",
    "NotFound",
    "TimedOut",
    "TooLarge",
    "Unavailable",
    "WardenError",
]


class WardenError(Exception):
    """Base of every error Warden raises on purpose; `code` is stable across releases."""

    code = "internal"

    def __init__(self, message: str, *, rule: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # The policy rule that decided, when a decision caused the error.
        self.rule = rule


class InvalidInput(WardenError):
    code = "invalid"


class TooLarge(InvalidInput):
    """A size limit (file, request body, archive) was exceeded."""


class NotFound(WardenError):
    code = "not_found"


class Conflict(WardenError):
    code = "conflict"


class Locked(WardenError):
    code = "locked"


class Denied(WardenError):
    code = "denied"


class TimedOut(WardenError):
    code = "timeout"


class Unavailable(WardenError):
    code = "unavailable"
