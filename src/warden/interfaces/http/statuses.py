"""What the API answers besides its bodies: the HTTP status of each error code, the error
responses every route documents, and the version it reports."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from warden.core.errors import TooLarge, WardenError
from warden.interfaces.http.calls import Unauthenticated
from warden.interfaces.http.models import ErrorBody

__all__ = ["ERROR_RESPONSES", "HTTP_STATUS", "package_version", "status_for"]

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


@functools.cache  # read once: /v1/health answers on the event loop
def package_version() -> str:
    try:
        return version("warden")
    except PackageNotFoundError:
        return "0+unknown"
