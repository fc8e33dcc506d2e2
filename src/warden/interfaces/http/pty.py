"""`/v1/workspaces/{name}/pty`: an interactive shell on a pseudo-terminal, over WebSocket.

The handshake carries the token as `Authorization: Bearer` and may ask for `?cols=&rows=` (the
first size, default 80×24), `?term=` (TERM, default xterm-256color) and `?timeout=` (seconds, at
most sandbox.timeout, which is also the default). The shell is an exec like any other — the
same `Call` (audited as `api.pty` once it has ended), the bot-request service (`execute` on the
whole workspace, the grant's secrets, an exec slot held for the whole session) and the run,
with its limits and timeout — started in a worker thread on a fresh pseudo-terminal
(core/terminal.py has the shell and the control messages). Until it runs the handshake is not
answered, so a refusal is an ordinary HTTP error response (400, 401, 403, 503...).

Then binary frames carry the terminal's bytes both ways; a text frame from the client is a
control message (`{"type": "resize", "cols", "rows"}`); the server's last text frame is the
exit status `{"type": "exit", "exit_code", "timed_out", "signal", "duration_s"}` (after any
lines Warden adds about the run, as binary frames), and then it closes (1000). A client that
goes away has its shell killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from warden.adapters.pty import Pty
from warden.core.errors import InvalidInput, WardenError, classify
from warden.core.run_stream import error_event, exit_event
from warden.core.terminal import DEFAULT_SIZE, DEFAULT_TERM, SHELL_ARGV, check_term, parse_control, size_of
from warden.interfaces.http.statuses import status_for
from warden.interfaces.http.streaming import Killable, exec_in_thread
from warden.services.bot_requests import Command
from warden.services.runs import RunOutput

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.runs import RunResult
    from warden.services.bot_requests import BotRequestService

__all__ = ["serve_pty"]


class _Session(Killable):
    """What the shell's thread and the event loop share: whether it runs, how to kill it, and
    Warden's own lines about it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self.started = asyncio.Event()
        self.notices: list[bytes] = []

    def output(self, pty: Pty) -> RunOutput:
        def started(kill: Callable[[], None]) -> None:
            pty.give_away()  # bwrap holds the slave now: the master reads EIO once the sandbox is gone
            self.on_started(kill)
            with contextlib.suppress(RuntimeError):  # the loop is gone (the server is stopping)
                self._loop.call_soon_threadsafe(self.started.set)

        def notice(line: bytes) -> None:
            with self._lock:
                self.notices.append(line.replace(b"\n", b"\r\n"))

        return RunOutput(on_notice=notice, capture=False, on_started=started)


def _error(exc: BaseException) -> WardenError:
    mapped = exc if isinstance(exc, WardenError) else classify(exc)
    return mapped or WardenError(f"internal error ({type(exc).__name__}); the server log has details")


async def _deny(websocket: WebSocket, exc: BaseException) -> None:
    """Answer the handshake with the API's error response instead of upgrading."""
    error = _error(exc)
    status = status_for(error)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    await websocket.send_denial_response(JSONResponse({"error": {"code": error.code, "message": error.message}},
                                                      status_code=status, headers=headers))


def _number(text: str | None, default: int) -> int | str:
    if text is None:
        return default
    # isascii: str.isdigit is also true of "²" and "１", which int() refuses or reads as 1; an
    # unauthenticated `?cols=²` was a 500 and a traceback in the server log per handshake.
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 5 else text


def _bearer(websocket: WebSocket) -> str | None:
    """The token of the handshake's `Authorization: Bearer` header (the first one, as for HTTP)."""
    scheme, _, token = (websocket.headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _seconds(text: str | None) -> float | None:
    """The session's `?timeout=` (seconds; the service holds it to sandbox.timeout)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 86400:
        raise InvalidInput("timeout is a number of seconds, at most the server's sandbox.timeout")
    return value


async def serve_pty(app: App, requests: BotRequestService, admit: Callable[[str], AbstractContextManager[object]],
                    websocket: WebSocket, name: str) -> None:
    """Run one shell session for the client of `websocket` (`admit`: the server's exec slots)."""
    query = websocket.query_params
    try:
        size = size_of(_number(query.get("cols"), DEFAULT_SIZE[0]), _number(query.get("rows"), DEFAULT_SIZE[1]))
        term = check_term(query.get("term") or DEFAULT_TERM)
        timeout = _seconds(query.get("timeout"))
    except InvalidInput as exc:
        await _deny(websocket, exc)
        return
    token = _bearer(websocket)
    session = _Session(asyncio.get_running_loop())
    with Pty(size.cols, size.rows) as pty:
        command = Command(argv=SHELL_ARGV, env={"TERM": term}, timeout=timeout)
        job = await exec_in_thread(app, requests, admit, name, command, token, action="pty",
                                   output=session.output(pty), started=session.started, gone=lambda: session.gone,
                                   ended=pty.give_away, stop=session.stop, terminal=pty.slave, settle=True,
                                   cols=size.cols, rows=size.rows)
        try:
            if not session.started.is_set():
                refusal = job.exception()
                await _deny(websocket, refusal or WardenError("the shell ended before it started"))
                return
            await websocket.accept()
            await _relay(websocket, pty, session, job)
        except BaseException:
            session.stop()
            raise
        finally:
            if not job.done():  # cancelled (the server is stopping): the shell dies with the session
                session.stop()
                with contextlib.suppress(BaseException):
                    await asyncio.shield(job)


async def _relay(websocket: WebSocket, pty: Pty, session: _Session, job: asyncio.Future[RunResult]) -> None:
    """Terminal bytes both ways and resizes until the shell ends; then its exit status."""
    loop = asyncio.get_running_loop()
    output = asyncio.ensure_future(_pump_out(loop, websocket, pty, session))
    typed = asyncio.ensure_future(_pump_in(loop, websocket, pty, session))
    try:
        with contextlib.suppress(BaseException):
            await asyncio.shield(job)
        # The sandbox is gone: what it wrote last is in the master, then EIO.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(output), 5.0)
        if session.gone:
            return
        exc = job.exception()
        last = exit_event(job.result()) if exc is None else error_event(_error(exc).code, _error(exc).message)
        with contextlib.suppress(Exception):  # the client may have left meanwhile
            for line in session.notices:
                await websocket.send_bytes(line)
            await websocket.send_text(json.dumps(last))
            await websocket.close(1000 if exc is None else 1011)
    finally:
        output.cancel()
        typed.cancel()


async def _when(loop: asyncio.AbstractEventLoop, fd: int, *, writable: bool = False) -> None:
    """Until `fd` can be read (or written) without blocking."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if writable else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if writable else loop.remove_reader)(fd)


async def _pump_out(loop: asyncio.AbstractEventLoop, websocket: WebSocket, pty: Pty, session: _Session) -> None:
    """The shell's output to the client, until the sandbox is gone (EIO)."""
    while True:
        data = pty.read()
        if data is None:
            return
        if not data:
            await _when(loop, pty.master)
            continue
        try:
            await websocket.send_bytes(data)
        except Exception:  # the client left: nobody to show it to
            session.stop()
            return


async def _pump_in(loop: asyncio.AbstractEventLoop, websocket: WebSocket, pty: Pty, session: _Session) -> None:
    """The client's keys to the shell and its resizes to the terminal, until it disconnects."""
    while True:
        try:
            message = await websocket.receive()
        except Exception:
            message = {"type": "websocket.disconnect"}
        if message["type"] == "websocket.disconnect":
            session.stop()
            return
        data = message.get("bytes")
        if data:
            view = memoryview(data)
            while view:
                written = pty.write(bytes(view[:65536]))
                view = view[written:]
                if view:
                    await _when(loop, pty.master, writable=True)
        elif message.get("text") is not None:
            try:
                resize = parse_control(message["text"])
            except InvalidInput as exc:
                await websocket.send_text(json.dumps(error_event(exc.code, exc.message)))
                continue
            with contextlib.suppress(OSError):
                pty.resize(resize.cols, resize.rows)
