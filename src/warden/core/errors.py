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

import errno

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
    "classify",
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


# errno values that mean "the disk is full" (ENOSPC) or "your share of it is" (EDQUOT).
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def classify(exc: BaseException, where: str | None = None) -> WardenError | None:
    """A foreign error (OSError, sqlite3's or SQLAlchemy's OperationalError) as the WardenError
    of its cause, or None when the cause is not one Warden knows.

    Matched by errno and by SQLite's own messages ("database is locked", "database or disk is
    full", see https://sqlite.org/rescode.html), so this module imports no driver. `where` names
    the file or device when the error itself does not.
    """
    if isinstance(exc, WardenError):
        return exc
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        place = where or exc.filename or "the device"
        return Unavailable(f"no space left on {place}; free some space")
    if "database is locked" in text or "database table is locked" in text:
        place = f" ({where})" if where else ""
        return Locked(f"the registry{place} is locked by another process; wait for it to finish "
                      "(or stop it) and try again")
    if "database or disk is full" in text:
        return Unavailable(f"no space left on {where or 'the registry disk'}; free some space")
    if isinstance(exc, PermissionError):
        place = exc.filename or where or "a file"
        return Denied(f"permission denied by the file system: {place}; use a path your user may "
                      "read and write")
    return None
