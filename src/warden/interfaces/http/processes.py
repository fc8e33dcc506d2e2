"""Routes of background processes, for the grant that started them (services/live.py).

`POST /v1/workspaces/{name}/exec` with `"background": true` answers 202 `{"id": …}` (routes.py hands
it here); `GET …/processes` lists the caller's, `GET …/processes/{id}` shows one, `GET
…/processes/{id}/logs` gives its output (`?follow=true`: NDJSON as it comes, the lines of a
streamed exec, `{"type": "stdout"|"stderr", "data"}` then `{"type": "exit", …}`), and `DELETE
…/processes/{id}` signals it (`?signal=TERM`, the default, or KILL, INT, …). Each needs `execute` on
the whole workspace, as exec does, and shows a bot only what its own grant started: another
principal's process is a 404 like one that does not exist. One audit event per request (`Call`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from warden.core.errors import WardenError
from warden.core.run_stream import OutputEvents, error_event, ndjson
from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.models import LogsDropped, ProcessBody, ProcessLogs, UsageBody
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.shares import Shares
from warden.interfaces.http.statuses import ERROR_RESPONSES

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.live import Chunk, ProcessView
    from warden.services.bot_requests import BotRequestService

__all__ = ["MAX_WAIT_S", "ProcessRoutes", "router"]

# A wait holds a server thread: at most this long per request (the SDK asks again).
MAX_WAIT_S = 30.0
# Waits and follows in progress at once, all bots together: the other 24 of Starlette's 40
# threads stay for every other request (the exec slots, api.max_execs, hold 8 of them at most).
MAX_WAITS = 16

NDJSON = "application/x-ndjson"
ProcessId = Annotated[str, Path(pattern=r"^[0-9a-f]{1,16}$", description="a process id, as exec answered it, or "
                                "its start as long as no other process of the bot's begins so")]


def _body(view: ProcessView) -> ProcessBody:
    return ProcessBody(id=view.id, cmd=list(view.cmd), status=view.status,  # type: ignore[arg-type]
                       exit_code=view.exit_code, signal=view.signal, timed_out=view.timed_out,
                       started_at=view.started_at, ended_at=view.ended_at, stopped_by=view.stopped_by,
                       usage=UsageBody.model_validate(view.usage.to_json()) if view.usage is not None else None)


def _events(chunks: Iterator[Chunk | None], max_output: int) -> Iterator[bytes]:
    """A followed process's chunks as NDJSON lines; an empty chunk after each second of quiet, so
    the server's thread comes back to the event loop (and stops once the client has gone)."""
    events = OutputEvents(max_output)
    try:
        for chunk in chunks:
            if chunk is None:
                yield b""
                continue
            if chunk.exited is not None:
                ended = chunk.exited
                yield ndjson([*events.finish(), {"type": "exit", "exit_code": ended.exit_code,
                                                 "timed_out": ended.timed_out, "signal": ended.signal}])
                return
            out = events.feed("stdout" if chunk.stream == "stdout" else "stderr", chunk.data)
            if out:
                yield ndjson(out)
    except WardenError as exc:
        yield ndjson([error_event(exc.code, exc.message)])
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


class _Followed(StreamingResponse):
    """A followed process's NDJSON, which gives its place (`Shares`) back once sent, or once
    dropped unsent (a client gone before the first byte)."""

    def __init__(self, content: Iterator[bytes], give_back: Callable[[], None]) -> None:
        super().__init__(content, media_type=NDJSON)
        self._give_back = give_back
        weakref.finalize(self, give_back)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._give_back()


class ProcessRoutes:
    """The process routes of one server (the start is exec's: routes.py)."""

    def __init__(self, app: App, requests: BotRequestService) -> None:
        self.app = app
        self.requests = requests
        # The waits and followed logs in progress, each holding one of the server's threads for up
        # to MAX_WAIT_S (a follow, a second at a time for as long as its process runs). Unbounded,
        # one bot's 60 waits on its own `sleep` took all of Starlette's 40 threads, and every other
        # request of every bot (a file read) waited 28 s for one; 200 follows, 8 s each.
        self.waits = Shares(app.settings.get_int("api.max_execs_per_bot"), MAX_WAITS,
                            bot_full=lambda n: f"this bot already waits on or follows {n} processes at once "
                                               "(api.max_execs_per_bot); retry when one ends",
                            all_full=lambda n: f"{n} waits and follows are in progress on this server; retry in "
                                               "a moment")

    def list(self, name: WorkspaceName, token: Token) -> list[ProcessBody]:
        """The caller's background processes in the workspace (needs `execute`), oldest first."""
        with Call(self.app, "process.list", name) as call:
            return [_body(v) for v in self.requests.processes(call.authenticate(token_of(token)), name, trail=call)]

    def get(self, name: WorkspaceName, process_id: ProcessId, token: Token) -> ProcessBody:
        """One of the caller's background processes."""
        with Call(self.app, "process.get", name) as call:
            return _body(self.requests.process(call.authenticate(token_of(token)), name, process_id, trail=call))

    def logs(self, name: WorkspaceName, process_id: ProcessId, token: Token,
             follow: Annotated[bool, Query(description="stream NDJSON as the output comes, until it ends")] = False,
             ) -> ProcessLogs | StreamingResponse:
        """What the process printed (as much as its rings kept); `follow=true` goes on as it prints."""
        with Call(self.app, "process.logs", name) as call:
            principal = call.authenticate(token_of(token))
            if follow:
                give_back = self.waits.take(principal.minter)
                try:
                    chunks = self.requests.follow_process(principal, name, process_id, trail=call)
                except BaseException:
                    give_back()
                    raise
                return _Followed(_events(chunks, self.requests.settings.max_output), give_back)
            logs_of, logs = self.requests.process_logs(principal, name, process_id, trail=call)
            data = logs.to_json()
            return ProcessLogs(id=logs_of, stdout=str(data["stdout"]), stderr=str(data["stderr"]),
                               dropped=LogsDropped(stdout=logs.dropped_stdout, stderr=logs.dropped_stderr))

    def wait(self, name: WorkspaceName, process_id: ProcessId, token: Token,
             timeout: Annotated[float, Query(gt=0, le=MAX_WAIT_S,
                                             description=f"seconds to wait, at most {MAX_WAIT_S:g}")] = MAX_WAIT_S,
             ) -> ProcessBody:
        """The process once it has ended, or as it is after `timeout` seconds (still `running`:
        ask again). Holds one of the server's threads meanwhile, hence the bound."""
        with Call(self.app, "process.wait", name) as call:
            principal = call.authenticate(token_of(token))
            with self.waits.held(principal.minter):
                return _body(self.requests.wait_process(principal, name, process_id, timeout, trail=call))

    def kill(self, name: WorkspaceName, process_id: ProcessId, token: Token,
             signal: Annotated[str, Query(max_length=8, description="TERM (default), KILL, INT, HUP, …")] = "TERM",
             ) -> ProcessBody:
        """Signal the process and what it started (its process group); SIGKILL ends it for sure."""
        from warden.core.live import signal_number

        with Call(self.app, "process.kill", name) as call:
            principal = call.authenticate(token_of(token))
            sig = signal_number(signal)
            return _body(self.requests.kill_process(principal, name, process_id, sig, trail=call))


def router(app: App) -> APIRouter:
    """The process routes for one App."""
    routes = ProcessRoutes(app, app.bot_requests)
    api = APIRouter(responses=ERROR_RESPONSES)
    add = api.add_api_route
    add("/v1/workspaces/{name}/processes", threaded(routes.list), methods=["GET"],
        response_model=list[ProcessBody], tags=["processes"])
    add("/v1/workspaces/{name}/processes/{process_id}", threaded(routes.get), methods=["GET"],
        response_model=ProcessBody, tags=["processes"])
    add("/v1/workspaces/{name}/processes/{process_id}/logs", threaded(routes.logs), methods=["GET"],
        response_model=ProcessLogs, tags=["processes"],
        responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}},
                         "description": "with follow=true, one JSON object a line as the output comes"}})
    add("/v1/workspaces/{name}/processes/{process_id}/wait", threaded(routes.wait), methods=["GET"],
        response_model=ProcessBody, tags=["processes"])
    add("/v1/workspaces/{name}/processes/{process_id}", threaded(routes.kill), methods=["DELETE"],
        response_model=ProcessBody, tags=["processes"])
    return api
