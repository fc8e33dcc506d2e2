"""Fast paths for the hottest requests: `GET /v1/workspaces/{name}/files/content?path=P` and a
plain `POST /v1/workspaces/{name}/exec`.

FastAPI's routing, dependency solving and response machinery cost about as much CPU as the
read itself, and about a millisecond of each exec. These plain ASGI middlewares answer the
clean, common form of those requests by calling the very functions the FastAPI routes call
(`files.read_content`, `BotRoutes.exec_awaited`: the same authentication, grant decision,
service, limits and audit event); anything else — another method, a missing or repeated
parameter, no bearer token, an odd name, a body FastAPI would refuse, a streamed or background
exec — falls through to FastAPI unchanged, so its validation and error answers stay the only ones.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from warden.core.errors import WardenError, classify
from warden.core.names import name_pattern
from warden.interfaces.http.limits import ASGIApp, Message, Receive, Scope, Send, error_bytes, replay
from warden.interfaces.http.statuses import error_response

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.interfaces.http.files import Content, FileServices
    from warden.interfaces.http.models import ExecRequest
    from warden.interfaces.http.routes import BotRoutes

__all__ = ["CONTENT_PATH", "EXEC_PATH", "FastExecs", "FastReads", "Mounted"]

log = logging.getLogger("warden.http")

# A file's content; group 1 is the workspace name (models.NAME).
CONTENT_PATH = re.compile(rf"^/v1/workspaces/({name_pattern()})/files/content$")
# A command run in the workspace; group 1 is its name.
EXEC_PATH = re.compile(rf"^/v1/workspaces/({name_pattern()})/exec$")


def _bearer(scope: Scope) -> str | None:
    """The token of the request's one `Authorization: Bearer` header (None: none, several or
    another form, which FastAPI's HTTPBearer is left to read)."""
    tokens = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
    if len(tokens) != 1 or not tokens[0].startswith(b"Bearer "):
        return None
    return tokens[0][7:].decode("latin-1").strip() or None


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
        token = _bearer(scope)
        if token is None:
            return None
        return found.group(1), query[0][1], token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self._match(scope)
        if matched is None:
            await self.inner(scope, receive, send)
            return
        from warden.interfaces.http.files import read_content
        from warden.interfaces.http.statuses import SLOT_RULES, status_for

        name, path, token = matched
        headers: list[tuple[bytes, bytes]] = []
        read = _Abandonable(lambda: read_content(self.app, self.services, token, name, path))
        try:
            content = await run_in_threadpool(read.run)
        except WardenError as exc:
            status, body, kind = status_for(exc), error_bytes(exc.code, exc.message), b"application/json"
            if exc.rule in SLOT_RULES:
                headers.append((b"retry-after", b"1"))  # as the FastAPI handler says it (statuses.py)
        except Exception as exc:  # the same one-line answer as the FastAPI handler gives
            mapped = classify(exc)  # a full disk, a locked registry: by cause
            if mapped is not None:
                status, body, kind = status_for(mapped), error_bytes(mapped.code, mapped.message), b"application/json"
            else:
                log.error("internal error in GET %s: %s: %s", scope["path"], type(exc).__name__, exc)
                status, kind = 500, b"application/json"
                body = error_bytes("internal", f"internal error ({type(exc).__name__}); the server log has details")
        except BaseException:
            # Cancelled (the request's timeout) while the read ran or as it ended: its room goes
            # back, now or once the read ends. Kept, four reads whose audit waited on a busy
            # registry past the timeout made the bot's large reads 503 until a restart.
            read.abandon()
            raise
        else:
            try:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/octet-stream"),
                                        (b"content-length", str(content.size).encode("ascii"))]})
            except BaseException:
                content.close()
                raise
            await content.send(send)  # gives the room back and closes the file however it ends
            return
        headers += [(b"content-type", kind), (b"content-length", str(len(body)).encode("ascii"))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Abandonable:
    """A file read run in a thread (`read_content`) whose awaiting request may be cancelled: the
    room its answer took (files.ContentHeld) is given back then, whether the read had ended or not."""

    def __init__(self, read: Callable[[], Content]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._abandoned = False
        self._content: Content | None = None

    def run(self) -> Content:
        content = self._read()
        with self._lock:
            if self._abandoned:
                content.close()
            else:
                self._content = content
        return content

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._content is not None:
                self._content.close()


class FastExecs:
    """`POST …/exec` of a plain command — a JSON object FastAPI would accept, neither `stream` nor
    `background` — answered by `BotRoutes.exec_awaited`, as the FastAPI route answers it; any
    other form, and a body FastAPI would refuse, goes on to FastAPI with the body as it came."""

    def __init__(self, inner: ASGIApp, *, routes: BotRoutes) -> None:
        self.inner = inner
        self.routes = routes

    @staticmethod
    def _match(scope: Scope) -> tuple[str, str] | None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("query_string"):
            return None
        found = EXEC_PATH.match(scope["path"])
        if found is None:
            return None
        kinds = [v for k, v in scope.get("headers", ()) if k == b"content-type"]
        if kinds != [b"application/json"]:
            return None  # FastAPI says what it thinks of another content type, or of none
        token = _bearer(scope)
        return (found.group(1), token) if token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self._match(scope)
        if matched is None:
            await self.inner(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return  # the client went away while sending it: nobody to answer
        request = _plain_exec(body)
        if request is None:
            await self.inner(scope, replay(body, receive), send)
            return
        name, token = matched
        try:
            answer = await self.routes.exec_awaited(receive, name, request, token)
        except Exception as exc:
            await error_response(exc, "POST", scope["path"])(scope, receive, send)
            return
        content = answer.__pydantic_serializer__.to_json(answer, by_alias=True)  # as FastAPI's response_model
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(content)).encode("ascii")),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": content})


def _plain_exec(body: bytes) -> ExecRequest | None:
    """The exec a body asks for, read as FastAPI reads it (json.loads, then the model); None for
    one FastAPI is to answer: not JSON, not valid, streamed or in the background."""
    from warden.interfaces.http.models import ExecRequest

    try:
        data = json.loads(body)
        request = ExecRequest.model_validate(data) if isinstance(data, dict) else None
    except (ValueError, RecursionError, ValidationError):  # (a JSONDecodeError and a UnicodeDecodeError are
        return None  # ValueErrors; json.loads raises RecursionError on deep nesting, which FastAPI answers 400)
    if request is None or request.stream or request.background:
        return None
    return request


async def _body(receive: Receive) -> bytes | None:
    """The request's whole body (LimitsMiddleware bounded its size and time); None: the client left."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


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
