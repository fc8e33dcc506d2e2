"""The API's description (/openapi.json): the errors each route can really answer, with an
example body apiece, and an example of every request body.

FastAPI lists the same error responses on every route a router declares them for, so a client
reading the schema could not tell that /v1/health never answers 401 or that a list has nothing
to find (404). The errors an operation can answer follow from its shape: authentication from
its security scheme, "not found" from a path parameter naming a thing, input errors from its
parameters and body, conflicts from a change. They are derived here, in one place, from the
same routes the server runs, so the schema stays true as routes are added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["REQUEST_EXAMPLES", "errors_of", "install"]

# status → (the `code` in its body, what it means, an example message)
_ERRORS: dict[int, tuple[str, str, str]] = {
    400: ("invalid", "invalid input", "workspace name 'Demo!' is not valid: use a-z, 0-9 and -"),
    401: ("denied", "no credentials", "authentication required: send `Authorization: Bearer <token>`"),
    403: ("denied", "permission denied", "permission denied"),
    404: ("not_found", "not found", "no workspace named 'demo': `warden list` shows the workspaces"),
    409: ("conflict", "conflict with the current state",
          "workspace 'demo' already exists; pick another name or `warden destroy` it first"),
    413: ("invalid", "request body too large",
          "request body of 20000000 bytes is over the limit of 16777216 bytes; send a smaller body"),
    414: ("invalid", "request URL too long",
          "the request's URL is over the limit of 16384 bytes; send a shorter one"),
    422: ("invalid", "malformed request", "malformed request: cmd: Field required (see /openapi.json)"),
    423: ("locked", "locked", "workspace 'demo' is locked by terminal t-1 until 12:00; try again later"),
    503: ("unavailable", "unavailable or timed out", "no space left on the disk of Warden's home"),
}
_CHANGES = frozenset({"post", "put", "patch", "delete"})
# Answered before a route is reached: 414 is listed where parameters can make a URL long,
# 431 (headers too large) only once, in the API's description.
_ANY_ROUTE = frozenset({414, 431})

# One example body per operation that takes one: (method, path) → body. A test checks each
# against the route's own model, and that no operation with a body lacks one.
REQUEST_EXAMPLES: dict[tuple[str, str], Any] = {
    ("post", "/v1/workspaces"): {
        "bot": "claude-1", "request": "workspace",
        "params": {"name": "demo", "python": "3.11", "requirements": ["requests"]}},
    ("post", "/v1/workspaces/{name}/exec"): {"cmd": ["python", "-c", "print(1 + 1)"], "timeout": 30},
    ("post", "/v1/workspaces/{name}/install"): {"packages": ["requests>=2.31"]},
    ("post", "/v1/workspaces/{name}/grants"): {
        "bot": "helper", "permissions": ["read", "execute"], "zones": ["src:ro"], "ttl": "2h"},
    ("put", "/v1/workspaces/{name}/files/content"): "print('hello')\n",  # the file's bytes
    ("post", "/v1/workspaces/{name}/files/move"): {"source": "notes/a.txt", "destination": "notes/b.txt"},
    ("post", "/v1/approvals/{approval_id}/approve"): {"note": "looks right"},
    ("post", "/v1/approvals/{approval_id}/deny"): {"note": "not this file"},
    ("post", "/v1/workspaces/{name}/git/stage"): {"message": "Fix the parser's off-by-one"},
    ("post", "/v1/workspaces/{name}/git/push"): {"proposal": "p-3f2a9c"},
    ("post", "/v1/workspaces/{name}/checkpoints"): {"message": "before the refactor"},
}


def errors_of(method: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer, from its shape."""
    params = operation.get("parameters", [])
    body = "requestBody" in operation
    secured = bool(operation.get("security"))
    found: set[int] = set()
    if secured:
        # A token that is missing or does not allow it; a held lock (a workspace's, or the
        # registry's past its busy timeout); a full disk or a run that timed out.
        found |= {401, 403, 423, 503}
    if any(p.get("in") == "path" for p in params):
        found.add(404)
    if body or params:
        found |= {400, 422}
    if params:
        found.add(414)
    if body:
        found.add(413)
    if method in _CHANGES and secured:
        found.add(409)
    return sorted(found)


def _error_response(status: int) -> dict[str, Any]:
    code, meaning, message = _ERRORS[status]
    return {"description": meaning, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ErrorBody"},
        "example": {"error": {"code": code, "message": message}}}}}


def _document(schema: dict[str, Any]) -> dict[str, Any]:
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in [s for s in responses if s.isdigit() and (int(s) in _ERRORS or int(s) in _ANY_ROUTE)]:
                del responses[status]  # the router's blanket list
            for status in errors_of(method, operation):
                responses[str(status)] = _error_response(status)
            example = REQUEST_EXAMPLES.get((method, path))
            if example is not None and "requestBody" in operation:
                for media in operation["requestBody"].get("content", {}).values():
                    media["example"] = example
    return schema


def install(api: FastAPI) -> None:
    """Make `api.openapi()` (and /openapi.json) answer the documented schema, built once."""
    plain = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = _document(plain())
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
