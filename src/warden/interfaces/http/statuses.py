"""What the API answers besides its bodies: the HTTP status of each error code, the error
responses every route documents, the answer to an error, and the version it reports."""

from __future__ import annotations

import functools
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.responses import JSONResponse

from warden.core.errors import Pending, TooLarge, WardenError, classify
from warden.interfaces.http.calls import Unauthenticated
from warden.interfaces.http.models import ErrorBody

__all__ = ["ERROR_RESPONSES", "HTTP_STATUS", "SLOT_RULES", "error_response", "package_version", "status_for"]

# A command refused for want of a free exec slot never started: its 503 says Retry-After.
SLOT_RULES = frozenset({"api.max_execs", "api.max_execs_per_bot"})

log = logging.getLogger("warden.http")

# One table: error code → HTTP status. Clients branch on these statuses: never change one.
HTTP_STATUS = {
    "invalid": 400, "not_found": 404, "conflict": 409, "locked": 423, "denied": 403,
    "timeout": 503, "unavailable": 503, "internal": 500, "pending": 202,
    "keys_mismatch": 503,
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (400, "invalid input"), (401, "no credentials"), (403, "permission denied"),
        (404, "not found"), (409, "conflict"), (413, "request body too large"),
        (414, "request URL too long"), (422, "malformed request"), (423, "locked"),
        (431, "request headers too large"), (503, "unavailable or timed out"))
}


def status_for(exc: WardenError) -> int:
    """The HTTP status of a Warden error."""
    if isinstance(exc, Unauthenticated):
        return 401
    if isinstance(exc, TooLarge):
        return 413
    return HTTP_STATUS.get(exc.code, 500)


def error_json(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error envelope, `{"error": {"code", "message"}}`."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def error_response(exc: Exception, method: str, path: str) -> JSONResponse:
    """The answer to an exception a request ended with: a Warden error's status and envelope
    (`Pending` is 202, accepted for a person to answer), another by its cause (a locked
    registry, a full disk), else a one-line 500. The FastAPI app's handlers and the fast paths
    answer through this one function, so both answer an error alike."""
    if not isinstance(exc, WardenError):
        mapped = classify(exc)
        if mapped is None:
            # Logged without the request (its headers hold a token); the caller gets one line.
            log.error("internal error in %s %s: %s: %s", method, path, type(exc).__name__, exc)
            return error_json(500, "internal", f"internal error ({type(exc).__name__}); the server log has details")
        exc = mapped
    if isinstance(exc, Pending):  # not a failure: accepted, waiting for a person
        return JSONResponse({"approval": exc.approval, "message": exc.message}, status_code=202)
    status = status_for(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if exc.rule in SLOT_RULES:
        headers = {"Retry-After": "1"}  # nothing started: the same request may come again (the SDK waits)
    return error_json(status, exc.code, exc.message, headers)


@functools.cache  # read once: /v1/health answers on the event loop
def package_version() -> str:
    try:
        return version("warden")
    except PackageNotFoundError:
        return "0+unknown"
