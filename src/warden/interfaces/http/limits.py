"""Request body limits (413) and per-request timeouts (503), as one plain ASGI middleware.

Plain ASGI rather than Starlette's BaseHTTPMiddleware: the latter costs a task and a memory
stream per request, which matters at a thousand small file reads a second. The body is read
up to the limit before the application sees it, so an oversized upload is refused before any
byte lands in a workspace and no route can forget the check.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["LimitsMiddleware", "error_bytes"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def error_bytes(code: str, message: str) -> bytes:
    """The JSON error envelope of the API."""
    return json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    body = error_bytes(code, message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": body})


class LimitsMiddleware:
    """Refuse bodies over `limit_for(scope)` bytes with 413; answer 503 after `timeout_for(scope)` s."""

    def __init__(self, app: ASGIApp, *, limit_for: Callable[[Scope], int],
                 timeout_for: Callable[[Scope], float]) -> None:
        self.app = app
        self.limit_for = limit_for
        self.timeout_for = timeout_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _send_error(send, 413, "invalid", f"request body of {declared} bytes is over the limit of "
                              f"{limit} bytes; send a smaller body")
            return
        chunks: list[bytes] = []
        size = 0
        more = scope["method"] not in {"GET", "HEAD", "DELETE", "OPTIONS"} or bool(declared)
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _send_error(send, 413, "invalid", f"request body is over the limit of {limit} bytes; "
                                  "send a smaller body")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for a disconnect, as servers do

        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        timeout = self.timeout_for(scope)
        try:
            async with asyncio.timeout(timeout):  # no extra task per request, unlike wait_for
                await self.app(scope, replay, watch)
        except TimeoutError:
            if not started:
                await _send_error(send, 503, "timeout", f"the request took longer than {timeout:g} s and was "
                                  "abandoned; retry, or raise api.request_timeout")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
