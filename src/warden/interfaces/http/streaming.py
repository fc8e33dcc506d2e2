"""`POST /v1/workspaces/{name}/exec` with `"stream": true`: the output as NDJSON while it comes.

The exec is the same as without streaming — the same `Call` (one audit event), the same
bot-request service (authorization, secrets, the exec slot) and the same run — carried out in a
worker thread, with the run's output sinks feeding a `RunChannel` that the event loop drains
onto the response (core/run_stream.py says what the lines hold). Until the command starts,
nothing is sent, so a refusal (403, 404, 503 when the slots are taken, a run refused) is an
ordinary error response. Once it runs the answer is 200 `application/x-ndjson`; should the
client go away before the end, the command is killed, and the exec is audited when it has
ended either way (`client_gone` in the event's detail).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from warden.core.errors import WardenError, classify
from warden.core.run_stream import OutputEvents, error_event, exit_event, merge, ndjson
from warden.interfaces.http.calls import Call
from warden.interfaces.http.limits import disconnected
from warden.services.runs import RunOutput

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.run_stream import Event
    from warden.core.runs import RunResult
    from warden.interfaces.http.limits import Receive, Scope, Send
    from warden.services.bot_requests import BotRequestService, Command

__all__ = ["NDJSON", "Abandoned", "RunChannel", "StreamedRun", "stream_exec"]

NDJSON = "application/x-ndjson"


class Killable:
    """A command its HTTP client may leave: killed when the client goes away, now or, if it has not
    started yet, as soon as it does. Shared by a streamed exec, a plain one and a PTY session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kill: Callable[[], None] | None = None
        self.gone = False  # the client went away: the command is (or will be, once started) killed

    def on_started(self, kill: Callable[[], None]) -> None:
        with self._lock:
            self._kill = kill
            gone = self.gone
        if gone:
            kill()

    def stop(self) -> None:
        """The client went away: kill the command (now, or as soon as it starts)."""
        with self._lock:
            self.gone = True
            kill = self._kill
        if kill is not None:
            kill()


class RunChannel(Killable):
    """Between the thread that runs a command and the event loop that sends its output.

    The runner's sinks call `output()`'s functions from its threads; they never block (the
    output is held up to `api.max_output` bytes a stream, as a captured exec would hold it).
    The loop waits for `started`, then takes what has come with `take`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_output: int) -> None:
        super().__init__()
        self._loop = loop
        self._events = OutputEvents(max_output)
        self._pending: list[Event] = []
        self._wake = asyncio.Event()
        self.started = asyncio.Event()

    def output(self) -> RunOutput:
        """Where the run's output goes: here, not into the result."""
        return RunOutput(on_stdout=lambda chunk: self._add(self._events.feed("stdout", chunk)),
                         on_stderr=lambda chunk: self._add(self._events.feed("stderr", chunk)),
                         on_notice=lambda line: self._add(OutputEvents.notice(line)),
                         capture=False, on_started=self.on_started, may_block=False)

    def _signal(self, event: asyncio.Event) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone (the server is stopping)
            self._loop.call_soon_threadsafe(event.set)

    def _add(self, events: list[Event]) -> None:
        if not events:
            return
        with self._lock:
            self._pending.extend(events)
        self._signal(self._wake)

    def on_started(self, kill: Callable[[], None]) -> None:
        super().on_started(kill)
        self._signal(self.started)

    def ended(self) -> None:
        """The run is over (from its thread): what is left of the output, then wake the loop."""
        with self._lock:
            self._pending.extend(self._events.finish())
        self._signal(self._wake)

    def wake(self) -> None:
        """Wake `take` (from the loop)."""
        self._wake.set()

    async def take(self) -> list[Event]:
        """What has come since the last call (waits for something, or for a wake-up)."""
        await self._wake.wait()
        self._wake.clear()
        return self.take_now()

    def take_now(self) -> list[Event]:
        with self._lock:
            events, self._pending = self._pending, []
        return merge(events)


class Abandoned(Killable):
    """A plain exec's command, killed should its client go away before the answer (as a streamed
    one is): abandoned, it ran on to its timeout (sandbox.timeout, 10 minutes), holding its exec
    slot, while a client that gave up on it asked again."""

    def output(self) -> RunOutput:
        """The run's output captured into its result, as a plain exec's is; its kill kept."""
        return RunOutput(on_started=self.on_started)

    async def watch(self, receive: Receive) -> None:
        """Stop the command when the client disconnects (the request's body is read already)."""
        if await disconnected(receive):
            self.stop()


class StreamedRun(Response):
    """The 200 answer of a running command: its output lines, then its exit line."""

    media_type = NDJSON

    def __init__(self, channel: RunChannel, job: asyncio.Future[RunResult]) -> None:
        super().__init__(media_type=NDJSON)
        # No content-length: the body is sent as it comes (chunked).
        self.raw_headers = [(b"content-type", NDJSON.encode()), (b"cache-control", b"no-store"),
                            (b"x-content-type-options", b"nosniff")]
        self.channel = channel
        self.job = job
        job.add_done_callback(lambda _: channel.wake())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(self._watch(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            # Until the run has ended, whether the client stays or not (a client gone has had its
            # command killed; what is sent then goes nowhere, and the run is audited as it ends).
            events: list[Event] = []
            while not self.job.done():
                events = await self.channel.take()
                if events and not self.job.done():
                    await send({"type": "http.response.body", "body": ndjson(events), "more_body": True})
            # The run's thread gave its last output before the job completed: it is all here.
            last = merge([*events, *self.channel.take_now(), self._last()])
            await send({"type": "http.response.body", "body": ndjson(last), "more_body": False})
        except BaseException:
            self.channel.stop()  # cancelled (the request's time is up) or the connection broke
            raise
        finally:
            watcher.cancel()

    def _last(self) -> Event:
        exc = self.job.exception()
        if exc is None:
            return exit_event(self.job.result())
        mapped = exc if isinstance(exc, WardenError) else classify(exc)
        if mapped is None:
            return error_event("internal", f"internal error ({type(exc).__name__}); the server log has details")
        return error_event(mapped.code, mapped.message)

    async def _watch(self, receive: Receive) -> None:
        """Kill the command when the client disconnects (the request's body is read already)."""
        if await disconnected(receive):
            self.channel.stop()


async def exec_in_thread(app: App, requests: BotRequestService, admit: Callable[[str], AbstractContextManager[object]],
                         name: str, command: Command, token: str | None, *, action: str, output: RunOutput,
                         started: asyncio.Event, gone: Callable[[], bool], ended: Callable[[], None],
                         stop: Callable[[], None], terminal: int | None = None, settle: bool = False,
                         **notes: object) -> asyncio.Future[RunResult]:
    """Run the exec in a worker thread (its `Call` audited as `action` with `notes`, and
    `client_gone` when `gone()` says so; `ended()` once it is over), and return its future as
    soon as its command has `started` or it has ended (refused before anything ran). A
    cancellation meanwhile `stop()`s it (`settle`: and waits for its thread to end, as a
    terminal session must before its pseudo-terminal is closed)."""

    def work() -> RunResult:
        try:
            with Call(app, action, name) as call:
                call.note(**notes)
                try:
                    return requests.exec(call.authenticate(token), name, command, trail=call, admit=admit,
                                         output=output, terminal=terminal)
                finally:
                    if gone():
                        call.note(client_gone=True)
        finally:
            ended()

    job: asyncio.Future[RunResult] = asyncio.ensure_future(run_in_threadpool(work))
    waiter = asyncio.ensure_future(started.wait())
    try:
        first: set[asyncio.Future[Any]] = {job, waiter}
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        stop()
        if settle and not job.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(job)
        raise
    finally:
        waiter.cancel()
    return job


async def stream_exec(app: App, requests: BotRequestService, admit: Callable[[str], AbstractContextManager[object]],
                      name: str, command: Command, token: str | None) -> Response:
    """Carry out a streamed exec (`admit`: the server's exec slots): an error response if it is
    refused, else the NDJSON answer."""
    loop = asyncio.get_running_loop()
    channel = RunChannel(loop, requests.settings.max_output)
    job = await exec_in_thread(app, requests, admit, name, command, token, action="exec", output=channel.output(),
                               started=channel.started, gone=lambda: channel.gone, ended=channel.ended,
                               stop=channel.stop, stream=True)
    if not channel.started.is_set():
        job.result()  # refused before anything ran: raises the error the handlers answer
    return StreamedRun(channel, job)
