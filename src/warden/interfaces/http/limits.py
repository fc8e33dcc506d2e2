"""Request body limits (413) and per-request timeouts (503), as one plain ASGI middleware.

Plain ASGI rather than Starlette's BaseHTTPMiddleware: the latter costs a task and a memory
stream per request, which matters at a thousand small file reads a second. The body is read
up to the limit before the application sees it, so an oversized upload is refused before any
byte lands in a workspace and no route can forget the check.

A request allowed a body larger than `screen_above` (a file upload) is first put to `screen`,
which checks its credentials before a byte of the body is read: otherwise anyone could make
the server hold a hundred megabytes per connection without a token. A refusal is answered at
once and the connection closed, so the unread body is never received.

Any other body past `door_above` bytes (a JSON route's, up to api.max_body) is held only for a
caller whose token authenticates (`door`), asked before the first byte past it is read: a JSON
route parses its body before it authenticates (FastAPI), so without a token a client could make
the server hold 16 MiB per connection for two minutes, and parse each into some 30 times its size
while every other request waited on the event loop.

A body a route parses as JSON (`parsed(scope)`) past `door_above` bytes is also measured before
the route sees it (core/bodies.py): past MAX_JSON_VALUES values it is refused with 413, never
parsed. Only its count is costly to parse; its size is bounded above.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from warden.core.bodies import MAX_JSON_VALUES, json_values

__all__ = ["ADMITTED", "RELEASE", "LimitsMiddleware", "Refusal", "bearer_token", "disconnected", "error_bytes",
           "replay"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Bodies are held in pieces of about this size (see LimitsMiddleware.__call__).
_MIN_RATE = 256 * 1024  # bytes a second a body must keep up after the first timeout's worth
_PIECE = 1 << 20
# Set in a request's scope once its token let its body in (the screen or the door).
ADMITTED = "warden.admitted"
# Set in a request's scope by its screen: what gives back the room its body took (files.ContentHeld),
# called once the request is over, answered or abandoned.
RELEASE = "warden.release"


def error_bytes(code: str, message: str) -> bytes:
    """The JSON error envelope of the API."""
    return json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")


@dataclass(frozen=True)
class Refusal:
    """A request turned away before its body is read: the status and error envelope to answer."""

    status: int
    code: str
    message: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


async def _send_error(send: Send, status: int, code: str, message: str,
                      headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = error_bytes(code, message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii")), *headers]})
    await send({"type": "http.response.body", "body": body})


class LimitsMiddleware:
    """Refuse bodies over `limit_for(scope)` bytes with 413; answer 503 after `timeout_for(scope)` s.

    When `limit_for(scope)` is over `screen_above`, `screen(scope)` (blocking; run in the
    threadpool) is asked first and a `Refusal` it returns is the answer, the body unread.
    Otherwise `door(scope)` is asked the same way before more than `door_above` bytes of a
    body are read (at once when Content-Length declares more).
    A body must arrive within `body_timeout` s (by default the request's own timeout), plus a
    second for every _MIN_RATE bytes received; else 408 and the connection is closed.
    A body `parsed(scope)` says the route reads as JSON, past `door_above` bytes, is refused
    with 413 when it holds more than MAX_JSON_VALUES values.
    """

    def __init__(self, app: ASGIApp, *, limit_for: Callable[[Scope], int],
                 timeout_for: Callable[[Scope], float],
                 screen: Callable[[Scope], Refusal | None] | None = None, screen_above: int = 0,
                 door: Callable[[Scope], Refusal | None] | None = None, door_above: int = 0,
                 parsed: Callable[[Scope], bool] | None = None, body_timeout: float | None = None) -> None:
        self.app = app
        self.limit_for = limit_for
        self.timeout_for = timeout_for
        self.screen = screen
        self.screen_above = screen_above
        self.door = door
        self.door_above = door_above
        self.parsed = parsed
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self._bounded(scope, receive, send)
        finally:
            release = scope.pop(RELEASE, None)
            if release is not None:
                release()

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limit_for(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            # Connection: close, as for every answer given before its body was read (protocol.py
            # closes such a connection whatever the answer says).
            await _send_error(send, 413, "invalid", f"request body of {declared} bytes is over the limit of "
                              f"{limit} bytes; send a smaller body", ((b"connection", b"close"),))
            return
        screened = self.screen is not None and limit > self.screen_above
        if screened:
            assert self.screen is not None
            if not await _let_in(self.screen, scope, send):
                return
        # The door: asked once, before the first byte past door_above is held.
        knock = self.door if not screened else None
        if knock is not None and declared is not None and declared > self.door_above:
            if not await _let_in(knock, scope, send):
                return
            knock = None
        # The body is kept as pieces of at least _PIECE bytes (small messages merged, so a
        # trickle of tiny ones costs no per-object overhead) and handed on piece by piece, each
        # dropped here once handed: no joined copy is kept here beside the application's own
        # (a body of one piece reaches Starlette's join as the very object, not copied).
        chunks: deque[bytes] = deque()
        pending = bytearray()
        size = 0
        more = scope["method"] not in {"GET", "HEAD", "DELETE", "OPTIONS"} or bool(declared)
        timeout = self.timeout_for(scope)
        # The body must arrive in time too: a client trickling a byte at a time would otherwise
        # hold a connection and its buffer for as long as it likes (an exec's processing time is
        # long, its body's is not). Each _MIN_RATE bytes received earn a second more, so a big
        # upload on a slow link still fits.
        deadline = asyncio.get_running_loop().time() + (self.body_timeout or timeout)
        while more:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                await _send_error(send, 408, "timeout", f"the request body did not arrive in time ({size} bytes "
                                  "so far); send it faster, or raise api.request_timeout",
                                  ((b"connection", b"close"),))
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            deadline += len(chunk) / _MIN_RATE
            if size > limit:
                await _send_error(send, 413, "invalid", f"request body is over the limit of {limit} bytes; "
                                  "send a smaller body", ((b"connection", b"close"),))
                return
            if knock is not None and size > self.door_above:  # chunked, or more than it declared
                if not await _let_in(knock, scope, send):
                    return
                knock = None
            if not pending and len(chunk) >= _PIECE:
                chunks.append(chunk)
            else:
                pending += chunk
                if len(pending) >= _PIECE:
                    chunks.append(bytes(pending))
                    pending.clear()
            more = message.get("more_body", False)
        if pending:
            chunks.append(bytes(pending))
        del pending
        if size > self.door_above and self.parsed is not None and self.parsed(scope):
            # Measured whole (a piece's edge may cut a string); handed on as that one object.
            body = b"".join(chunks)
            chunks.clear()
            values = json_values(body)
            if values is not None:
                await _send_error(send, 413, "invalid", f"request body holds {values} JSON values (arrays, objects, "
                                  f"strings), over the limit of {MAX_JSON_VALUES}; send fewer (large data goes "
                                  "in one string, such as stdin, or as a file upload)")
                return
            chunks.append(body)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                body = chunks.popleft() if chunks else b""
                replayed = not chunks
                return {"type": "http.request", "body": body, "more_body": not replayed}
            return await receive()  # after the body: wait for a disconnect, as servers do

        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            async with asyncio.timeout(timeout):  # no extra task per request, unlike wait_for
                await self.app(scope, replay, watch)
        except TimeoutError:
            if not started:
                await _send_error(send, 503, "timeout", f"the request took longer than {timeout:g} s and was "
                                  "abandoned; retry, or raise api.request_timeout")


async def _let_in(check: Callable[[Scope], Refusal | None], scope: Scope, send: Send) -> bool:
    """Whether `check` (blocking) lets the request in; else its refusal is answered."""
    refusal = await run_in_threadpool(check, scope)
    if refusal is None:
        # Its body is a token holder's: the connection cap never takes it for a stalled one
        # (protocol.py), however slowly it comes.
        scope[ADMITTED] = True
        return True
    # Connection: close makes the server drop the connection after the answer,
    # so the body the client may still be sending is never received.
    await _send_error(send, refusal.status, refusal.code, refusal.message,
                      (*refusal.headers, (b"connection", b"close")))
    return False


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def bearer_token(scope: Scope) -> str | None:
    """The token of a request's `Authorization: Bearer` header, read as FastAPI's HTTPBearer does."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":  # the first one, as Starlette's Headers.get
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


async def disconnected(receive: Receive) -> bool:
    """Wait for the client to go away, its request's body read already: True then. False, and no
    more waiting, should it be sent anything else a thousand times (only a disconnect is expected
    here; never spin on something else)."""
    for _ in range(1000):
        if (await receive())["type"] == "http.disconnect":
            return True
    return False


def replay(body: bytes, original: Receive) -> Receive:
    """A `receive` that gives `body` (already read, by a fast path or node forwarding that looked
    at it) once, then the client's own messages (its disconnect, which a streaming answer waits for)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await original()

    return receive
