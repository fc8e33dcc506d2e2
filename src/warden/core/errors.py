"""The one error tree of Warden.

    WardenError                (code: internal)
    ├── InvalidInput           (code: invalid)      bad argument, value or file
    ├── NotFound               (code: not_found)    no such workspace, file, key
    ├── Conflict               (code: conflict)     already exists, wrong state
    ├── Locked                 (code: locked)       held by someone else
    ├── Denied                 (code: denied)       refused by policy or permissions
    ├── TimedOut               (code: timeout)      a limit of time ran out
    ├── Unavailable            (code: unavailable)  a piece of the machine is missing
    │   └── KeysMismatch       (code: keys_mismatch) this node's keys are not its cluster's
    └── TooLarge               (code: invalid)      a size limit was exceeded

    Refused                    (the reason's code)  Warden refused to start a command

Interfaces map `code` to an exit status (CLI) or an HTTP status (API), each in one table.
A `Refused` error is the reason's own error (a Denied, a Locked, ...) marked so: its code and
HTTP status are the reason's, and `warden run` exits with its `exit_status` (126) instead.
Every message is one line that says what was wrong and what to do.
"""

from __future__ import annotations

import errno

__all__ = [
    "Conflict",
    "Denied",
    "InvalidInput",
    "KeysMismatch",
    "Locked",
    "NotFound",
    "Pending",
    "Refused",
    "Terminated",
    "TimedOut",
    "TooLarge",
    "Unavailable",
    "WardenError",
    "classify",
]


class Terminated(BaseException):
    """A termination signal (SIGTERM, SIGHUP) the CLI turns into an exception, as Python does
    SIGINT: what runs is unwound as for Ctrl-C (the command ended, its outcome audited) rather
    than the process vanishing with a run's intent and no outcome."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name


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


class KeysMismatch(Unavailable):
    """This node's cluster key (or the keys it unwraps) is not the one its registry was sealed
    with: serving would refuse every token and fail every secret, so it is refused up front."""

    code = "keys_mismatch"


class Pending(WardenError):
    """The operation waits for a person's answer: not a failure (HTTP 202 with the approval).

    `approval` is what the requester is shown (core/approvals.py `ApprovalRecord.view`);
    `approval_id` its id, what `Client.wait_for_approval` takes."""

    code = "pending"

    def __init__(self, message: str, *, approval: dict[str, object], rule: str | None = None) -> None:
        super().__init__(message, rule=rule)
        self.approval = approval
        self.approval_id = str(approval.get("id", ""))


class Refused(WardenError):
    """Warden refused to start a command (`warden run` exits `exit_status`, whatever the reason).

    Never raised bare: `Refused.of(Denied(...))` is that Denied with this class mixed in, so
    `except Denied`, its `code` and its HTTP status stay what they were, and only the CLI's
    exit status changes: 126, what a shell answers for a command it found but could not run.
    """

    exit_status = 126

    @staticmethod
    def of(reason: WardenError) -> Refused:
        """`reason` as a refusal: the same class, message, rule and attributes, plus Refused."""
        if isinstance(reason, Refused):
            return reason
        kind = _refused_class(type(reason))
        refused = kind.__new__(kind)
        refused.__dict__.update(reason.__dict__)
        refused.args = reason.args
        return refused


_REFUSED: dict[type[WardenError], type[Refused]] = {}


def _refused_class(reason: type[WardenError]) -> type[Refused]:
    """`reason`'s class with Refused mixed in (one per class: `except` and `isinstance` see both)."""
    if reason not in _REFUSED:
        _REFUSED[reason] = type(f"Refused{reason.__name__}", (Refused, reason),
                                {"__module__": reason.__module__, "__doc__": Refused.__doc__})
    return _REFUSED[reason]


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
    if "deadlock detected" in text or "could not serialize access" in text:
        # PostgreSQL undid this transaction to let another one through: nothing of it was written.
        return Locked("the registry undid this command's changes to let another Warden process's through "
                      "(a deadlock); nothing was changed; try again", rule="registry.deadlock")
    if "database or disk is full" in text:
        return Unavailable(f"no space left on {where or 'the registry disk'}; free some space")
    if isinstance(exc, PermissionError):
        place = exc.filename or where or "a file"
        return Denied(f"permission denied by the file system: {place}; use a path your user may "
                      "read and write")
    return None
