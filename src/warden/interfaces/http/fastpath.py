"""A fast path for the hottest request, `GET /v1/workspaces/{name}/files/content?path=P`.

FastAPI's routing, dependency solving and response machinery cost about as much CPU as the
read itself. This plain ASGI middleware answers the clean, common form of that request by
calling the very function the FastAPI route calls (`files.read_content`: the same
authentication, grant decision, file service and audit event); anything else — another
method, a missing or repeated parameter, no bearer token, an odd name — falls through to
FastAPI unchanged, so its validation and error answers stay the only ones.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool

from warden.core.errors import WardenError, classify
from warden.core.names import name_pattern
from warden.interfaces.http.limits import ASGIApp, Message, Receive, Scope, Send, error_bytes

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.interfaces.http.files import FileServices

__all__ = ["CONTENT_PATH", "FastReads", "Mounted"]

log = logging.getLogger("warden.http")

# A file's content; group 1 is the workspace name (models.NAME).
CONTENT_PATH = re.compile(rf"^/v1/workspaces/({name_pattern()})/files/content$")


class FastReads:
    def __init__(self, inner: ASGIApp, *, app: App, services: FileServices) -> None:
        self.inner = inner
        self.app = app
        self.services = services

    def _match(self, scope: Scope) -> tuple[str, str, str] | None:
        if scope["type"] != "http" or scope["method"] != "GET":
            return None
        found = CONTENT_PATH.match(scope["path"])
        if found is None:
            return None
        try:
            query = parse_qsl(scope.get("query_string", b"").decode("ascii"), keep_blank_values=True,
                              strict_parsing=True)
        except (UnicodeDecodeError, ValueError):
            return None
        if len(query) != 1 or query[0][0] != "path" or not 1 <= len(query[0][1]) <= 4096:
            return None
        tokens = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        if len(tokens) != 1 or not tokens[0].startswith(b"Bearer "):
            return None
        token = tokens[0][7:].decode("latin-1").strip()
        if not token:
            return None
        return found.group(1), query[0][1], token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self._match(scope)
        if matched is None:
            await self.inner(scope, receive, send)
            return
        from warden.interfaces.http.files import read_content
        from warden.interfaces.http.statuses import status_for

        name, path, token = matched
        try:
            data = await run_in_threadpool(read_content, self.app, self.services, token, name, path)
        except WardenError as exc:
            status, body, kind = status_for(exc), error_bytes(exc.code, exc.message), b"application/json"
        except Exception as exc:  # the same one-line answer as the FastAPI handler gives
            mapped = classify(exc)  # a full disk, a locked registry: by cause
            if mapped is not None:
                status, body, kind = status_for(mapped), error_bytes(mapped.code, mapped.message), b"application/json"
            else:
                log.error("internal error in GET %s: %s: %s", scope["path"], type(exc).__name__, exc)
                status, kind = 500, b"application/json"
                body = error_bytes("internal", f"internal error ({type(exc).__name__}); the server log has details")
        else:
            status, body, kind = 200, data, b"application/octet-stream"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})


class Mounted:
    """One path answered by its own ASGI app ahead of FastAPI's routing (which tries every route of
    the API before a path appended last); an exception escaping it gets the API's one-line 500."""

    def __init__(self, inner: ASGIApp, *, path: str, endpoint: ASGIApp) -> None:
        self.inner = inner
        self.path = path
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.inner(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.endpoint(scope, receive, sending)
        except Exception as exc:
            log.error("internal error in %s %s: %s: %s", scope.get("method"), self.path, type(exc).__name__, exc)
            if started:
                raise
            body = error_bytes("internal", f"internal error ({type(exc).__name__}); the server log has details")
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode("ascii"))]})
            await send({"type": "http.response.body", "body": body})
