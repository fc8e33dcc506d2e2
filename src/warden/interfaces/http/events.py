"""`GET /v1/workspaces/{name}/events`: the workspace's file changes as Server-Sent Events.

Needs `read` on the workspace; a bot is shown only the paths its file policy lets it see (a
grant limited to zones: those zones; never a denied path).
Each debounced batch is one event, `event: change` with `data:` the batch's JSON (the objects
`warden watch --json` prints: `{"changes": [{"change", "path"}], "at", "count"[, "overflow"]}`);
`event: notice` (`{"message"}`) for a folder left unwatched (watch.max_folders, inotify's limits),
filtered like changes (never naming a path the bot may not see);
a comment line (`: keep-alive`) every HEARTBEAT_S so proxies keep the stream open; a last
`event: end` (`data: {"reason": "gone"|"archived"|…|"timeout"|"denied"}`) when the workspace folder
goes, `?timeout=SECONDS` passed, or the token no longer holds `read` there (its grant revoked or
expired: checked before each batch and at each heartbeat, so a revoked bot is told no change
made after its revoke and its stream ends within a heartbeat). The
watch is closed (its inotify descriptor given back, its place in api.max_watches_per_bot freed)
as soon as the client disconnects. One audit event per stream, written when it opens.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated

import anyio
from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from warden.core.errors import Denied, NotFound
from warden.interfaces.http.calls import Call
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.statuses import ERROR_RESPONSES
from warden.services.watching import PolicyFilter

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from warden.bootstrap import App
    from warden.services.watching import Watch

__all__ = ["HEARTBEAT_S", "SSE", "EventStream", "router"]

SSE = "text/event-stream"
HEARTBEAT_S = 15.0


def _event(kind: str, data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _events(watch: Watch, heartbeat_s: float, timeout: float | None,
                  limiter: anyio.CapacityLimiter | None, refusal: Callable[[], str | None]) -> AsyncIterator[bytes]:
    yield b": watching\n\n"  # the headers go out now: the client knows the watch is on
    # Folders left unwatched (limits): changes there are missed. Only notes naming what the bot
    # may see (or nothing) get here, and later ones follow the batch they came with.
    for note in watch.fresh_notes():
        yield _event("notice", note.to_json())
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            yield _event("end", {"reason": "timeout"})
            return
        # Waits in a worker thread; cancelled at once when the client goes (the watch's close
        # wakes that thread, which then gives the descriptor back).
        wait = heartbeat_s if left is None else min(left, heartbeat_s)
        batch = await anyio.to_thread.run_sync(watch.next, wait, abandon_on_cancel=True, limiter=limiter)
        # The token was checked once, when the stream opened; a grant revoked (or expired) since
        # must not go on learning what others change in the workspace, however long it listens.
        refused = await anyio.to_thread.run_sync(refusal, abandon_on_cancel=True, limiter=limiter)
        if refused is not None:
            yield _event("end", {"reason": watch.ended or refused})
            return
        for note in watch.fresh_notes():
            yield _event("notice", note.to_json())
        if batch is not None:
            yield _event("change", batch.to_json())
        elif watch.ended is not None:
            yield _event("end", {"reason": watch.ended})
            return
        elif deadline is None or time.monotonic() < deadline:
            yield b": keep-alive\n\n"


class EventStream(StreamingResponse):
    """A streaming response that always closes its watch, however the stream ends.

    Starlette only listens for the client's disconnect under ASGI specs before 2.4 (after that
    it notices at the next failed write, up to a heartbeat later); here the disconnect is always
    listened for, so a client that leaves frees its watch at once.
    """

    def __init__(self, watch: Watch, refusal: Callable[[], str | None], *, heartbeat_s: float = HEARTBEAT_S,
                 timeout: float | None = None, limiter: anyio.CapacityLimiter | None = None) -> None:
        super().__init__(_events(watch, heartbeat_s, timeout, limiter, refusal), media_type=SSE,
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    await self.stream_response(send)
                    group.cancel_scope.cancel()

                async def listen() -> None:
                    await self.listen_for_disconnect(receive)
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                group.start_soon(listen)
        except OSError:
            pass  # the client went while we wrote: nothing more to tell it
        finally:
            self.watch.close()


def router(app: App) -> APIRouter:
    api = APIRouter(responses=ERROR_RESPONSES, tags=["files"])
    # A waiting stream holds a worker thread for up to a heartbeat: its own tokens, so open
    # streams never take the threads of the other routes (Starlette's shared limiter has 40).
    # The service refuses past api.max_watches, so this never makes a stream wait.
    waiting = anyio.CapacityLimiter(app.settings.get_int("api.max_watches"))

    @api.get("/v1/workspaces/{name}/events", response_class=StreamingResponse, response_model=None,
             responses={200: {"content": {SSE: {"schema": {"type": "string"}}},
                              "description": "Server-Sent Events: `event: change` per batch of file changes"}})
    async def events(name: WorkspaceName, token: Token,
                     timeout: Annotated[float | None, Query(gt=0, description="end the stream after this many seconds "
                                                                             "(`event: end`, reason timeout)")] = None,
                     ) -> EventStream:
        """The workspace's file changes as they happen (needs `read`; a grant sees its zones only)."""

        def opening() -> Watch:
            watch: Watch | None = None
            try:
                with Call(app, "events.watch", name) as call:
                    principal = call.authenticate(token_of(token))
                    record = call.authorize(name, "read")
                    scope = app.auth.zone_scope(principal, lambda: app.sandbox_paths.zones(record))
                    # Told only what its file policy lets it see: its zones, never a denied path.
                    shown = PolicyFilter(app.files(record, actor=call.actor, scope=scope))
                    watch = app.watching.open(name, holder=principal.minter, shown=shown)
                    call.note(zones=None if scope is None else sorted(scope))
            except BaseException:
                if watch is not None:  # its audit failed (a full disk): the watch and its slot go too
                    watch.close()
                raise
            return watch

        def refusal() -> str | None:
            """Why the token no longer holds `read` on the workspace, as the stream's end says it;
            None while it does. Not audited: the stream's opening was, and the revoke, the
            grant's expiry or the destroy is recorded where it happened."""
            try:
                app.auth.authorize(app.auth.authenticate(token_of(token)), name, "read")
            except Denied:
                # A destroy revokes the workspace's grants as it drops it: that stream's end is
                # the workspace's going, as it was before the token was checked again.
                try:
                    app.workspaces.get(name)
                except NotFound:
                    return "gone"
                return "denied"
            return None

        return EventStream(await run_in_threadpool(opening), refusal, timeout=timeout, limiter=waiting)

    return api
