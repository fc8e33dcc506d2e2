"""The MCP tools carried out: each call authenticates the token again, then goes through the
same services, grants, policy, approvals and audit as the HTTP API.

A bot's identity token acts on a workspace through its own live grant there, looked up at every
call (BotRequestService.acting_on), so a grant revoked mid-session stops working at the next
call. Each call leaves one audit event: `mcp.<tool>` (interfaces/http/calls.py `Call`), or the
file service's own `fs.*` event, which names the same caller. Nothing here decides: refusals
come from the services and are only reworded for a model (texts.py).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import contextvars
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import mcp_types as types

from warden.core.errors import InvalidInput, Pending, WardenError, classify
from warden.core.paths import canonical
from warden.interfaces.http.calls import Call
from warden.interfaces.http.file_services import FileServices, files_for
from warden.interfaces.http.running import ExecSlots
from warden.interfaces.http.shares import Shares
from warden.interfaces.http.streaming import Killable
from warden.interfaces.mcp.files import FILE_TOOLS
from warden.interfaces.mcp.texts import Answer, pending_text, refusal_text
from warden.interfaces.mcp.tools import check_arguments, takes_workspace
from warden.services.bot_requests import Command, NewWorkspace
from warden.services.runs import RunOutput

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.runs import RunResult
    from warden.interfaces.http.peers import Peers
    from warden.services.auth import Principal
    from warden.services.files import FileService

__all__ = ["CLIENT_GONE", "McpCall", "Progress", "ToolCalls"]

log = logging.getLogger("warden.mcp")

# Sends one progress notification: (progress so far, message).
Progress = Callable[[float, str], Awaitable[None]]

# Set when the client of the request being served went away (the HTTP front end sets a fresh one
# per request; the SDK runs the call in a task started from that request's, so it sees it).
# A foreground exec then kills its command: nobody waits for its output any more.
CLIENT_GONE: contextvars.ContextVar[asyncio.Event] = contextvars.ContextVar("warden_mcp_client_gone")

# Output of a foreground exec sent as progress notifications: bytes waiting to be sent at most,
# and bytes streamed in all (interfaces/mcp: a slow or silent client never grows the server).
STREAM_PENDING = 1 << 20
STREAM_TOTAL = 16 << 20
STREAM_PIECE = 64 << 10
RESULT_OUTPUT = 32 << 10  # characters of each stream a result carries


# Tool calls holding a server thread at once: one bot's (at least; twice its exec slots when
# that is more) and all bots' (of Starlette's 40 threads, shared with the HTTP API).
MCP_CALLS_PER_BOT = 8
MCP_CALLS = 24


class McpCall(Call):
    """One tool call's audit event, named `mcp.<tool>`."""

    channel = "mcp"


def _result(answer: Answer, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=answer.text)],
                                structured_content=answer.data, is_error=error)


def _named(args: dict[str, Any]) -> tuple[str, ...]:
    """The paths a call names (and exec's folder), which a refusal tells back exactly as given."""
    return tuple(v for k in ("path", "source", "destination", "cwd") if isinstance(v := args.get(k), str))


def _tail(text: str) -> tuple[str, bool]:
    """The last RESULT_OUTPUT characters: a result is one message a client takes whole (the SDK
    refuses one over 1 MiB), and what matters of a long output is mostly its end."""
    return (text, False) if len(text) <= RESULT_OUTPUT else (text[-RESULT_OUTPUT:], True)


def _run_text(result: RunResult, *, streamed: bool) -> Answer:
    ended = (f"timed out after {result.duration_s:.1f} s" if result.timed_out else
             f"killed by signal {result.signal}" if result.signal else f"exit code {result.exit_code}")
    parts = [f"{ended} ({result.duration_s:.2f} s{_used(result)})"]
    stdout, cut_out = _tail(result.stdout)
    stderr, cut_err = _tail(result.stderr)
    if stdout:
        parts.append("stdout:\n" + stdout)
    if stderr:
        parts.append("stderr:\n" + stderr)
    if result.truncated or cut_out or cut_err:
        parts.append(f"(only the last {RESULT_OUTPUT} characters of each stream are here; write long output to a "
                     "file and read it with read_file)")
    data = {"exit_code": result.exit_code, "stdout": stdout, "stderr": stderr,
            "duration_s": round(result.duration_s, 3), "timed_out": result.timed_out, "signal": result.signal,
            "streamed": streamed}
    if result.usage is not None:
        data["usage"] = result.usage.to_json()
    return Answer("\n".join(parts), data)


def _used(result: RunResult) -> str:
    """`, 0.31 s CPU, 203.6 MiB peak`: what the run used, where measured."""
    used, said = result.usage, ""
    if used is not None and used.cpu_s is not None:
        said += f", {used.cpu_s:.2f} s CPU"
    if used is not None and used.memory_peak_bytes is not None:
        said += f", {used.memory_peak_bytes / 1048576:.1f} MiB peak"
    return said


class ToolCalls:
    """The tools of one server (stdio or HTTP), bound to one wired App."""

    def __init__(self, app: App, peers: Peers | None = None) -> None:
        from warden.interfaces.http.peers import Peers
        from warden.interfaces.mcp.forward import McpForwarding

        self.app = app
        self.requests = app.bot_requests
        self.files = FileServices(app)
        self.slots = ExecSlots.from_settings(app)  # the same bound as the HTTP API's execs
        # The calls in progress that hold a server thread (all but a foreground exec, which an
        # exec slot bounds): unbounded, one bot's few dozen calls on a file slow to answer held
        # every thread of `warden serve` (Starlette's 40, shared with the HTTP API) and every
        # other bot's request waited. Per bot, by the root of its grants (as exec slots count).
        per_bot = max(MCP_CALLS_PER_BOT, 2 * app.settings.get_int("api.max_execs_per_bot"))
        self.held = Shares(per_bot, MCP_CALLS,
                           bot_full=lambda n: f"this bot already has {n} tool calls in progress; call again when "
                                              "one has answered",
                           all_full=lambda n: f"{n} tool calls are in progress on this server; call again in a moment")
        # Calls on another node's workspace are carried out there (forward.py).
        self.forwarding = McpForwarding(peers or Peers(app), timeout=app.settings.get_seconds("sandbox.timeout") + 60)

    # -- the entry -------------------------------------------------------------------------
    async def call(self, name: str, arguments: dict[str, Any] | None, token: str | None,
                   progress: Progress | None = None) -> types.CallToolResult:
        """Carry out tool `name` for the holder of `token`; a refusal is an error result."""
        default = None
        if takes_workspace(name) and "workspace" not in (arguments or {}):
            default = await anyio.to_thread.run_sync(self.default_workspace, token)
        try:
            tool, args = check_arguments(name, arguments, default)
        except InvalidInput as exc:
            return _result(Answer(f"invalid: {exc.message}"), error=True)
        node = await self.forwarding.node_for(args.get("workspace"), token)
        if node is not None and token:
            return await self._forwarded(node, tool.name, args, token, progress)
        if tool.name == "exec" and not args.get("background"):
            return await self._exec_streamed(token, args, progress)
        return await anyio.to_thread.run_sync(self._blocking, tool.name, token, args)

    async def _forwarded(self, node: str, name: str, args: dict[str, Any], token: str,
                         progress: Progress | None) -> types.CallToolResult:
        """Tool `name` carried out on `node`, which holds the workspace (forward.py): its answer."""
        from warden.interfaces.mcp.forward import RemoteError

        try:
            result = await self.forwarding.request(node, "tools/call", {"name": name, "arguments": args}, token,
                                                   progress if name == "exec" else None)
            return types.CallToolResult.model_validate(result)
        except WardenError as exc:
            return _result(Answer(refusal_text(exc, tool=name, workspace=args.get("workspace"), bot=None,
                                                keep=_named(args))),
                           error=True)
        except (RemoteError, ValueError) as exc:  # a JSON-RPC error, or a result that is not one
            return _result(Answer(f"node {node!r} could not carry out {name}: {exc}"), error=True)

    def _blocking(self, name: str, token: str | None, args: dict[str, Any],
                  output: RunOutput | None = None, gone: Callable[[], bool] | None = None) -> types.CallToolResult:
        workspace = args.get("workspace")
        target = f"{workspace}:{args['path']}" if workspace and "path" in args else (workspace or "workspaces")
        principal: Principal | None = None
        try:
            with McpCall(self.app, name, target) as call:
                principal = call.authenticate(token)
                with self.held.held(principal.minter):  # before any of the call's own work
                    if workspace is not None:
                        # Acting through the bot's grant there (itself, for a grant token).
                        call.principal = self.requests.acting_on(principal, workspace)
                    if name in FILE_TOOLS:  # every file tool names its workspace (tools.py)
                        answer = FILE_TOOLS[name](
                            lambda permission: self.file_service(call, str(workspace), permission), args)
                    else:
                        handler: Callable[..., Answer] = getattr(self, f"_{name}")
                        try:
                            answer = handler(call, args, output) if output is not None else handler(call, args)
                        finally:
                            if gone is not None and gone():
                                # Its client cancelled or left, and its command was killed for it: the
                                # call's event said "ok" with the kill's status and no reason why.
                                call.note(client_gone=True)
            return _result(answer)
        except Pending as exc:
            text, shown = pending_text(exc)
            return _result(Answer(text, {"status": "pending", "approval": shown}))
        except WardenError as exc:
            bot = principal.bot if principal else None
            return _result(Answer(refusal_text(exc, tool=name, workspace=workspace, bot=bot, keep=_named(args))),
                           error=True)
        except Exception as exc:
            mapped = classify(exc)  # a locked registry, a full disk: by cause
            if mapped is not None:
                return _result(Answer(refusal_text(mapped, tool=name, workspace=workspace, bot=None,
                                                         keep=_named(args))), error=True)
            log.error("internal error in tool %s: %s: %s", name, type(exc).__name__, exc)
            return _result(Answer(f"internal error ({type(exc).__name__}); the server log has details"), error=True)

    def default_workspace(self, token: str | None) -> str | None:
        """The one workspace a grant token is for, which its calls may leave unnamed; None for a
        bot's identity token (it may act on several) or a token no longer good (the call is then
        refused as any other)."""
        if not token:
            return None
        try:
            principal = self.app.auth.authenticate(token)
        except WardenError:
            return None
        return principal.grant.workspace if principal.kind == "grant" and principal.grant else None

    def file_service(self, call: Call, workspace: str, permission: str) -> FileService:
        """The caller's file service on `workspace`, once its grant allows `permission` (as HTTP's)."""
        return files_for(self.app, self.files, call, workspace, permission)

    # -- workspaces ------------------------------------------------------------------------
    def _list_workspaces(self, call: Call, args: dict[str, Any]) -> Answer:
        assert call.principal is not None
        rows: list[dict[str, Any]] = []
        for view in self.requests.list_workspaces(call.principal, trail=call):
            permissions = view.permissions
            if not permissions:  # an identity token: what its grant there allows
                try:
                    acting = self.requests.acting_on(call.principal, view.name)
                    permissions = self.requests.whoami(acting).permissions
                except WardenError:
                    continue
            rows.append({"name": view.name, "status": view.status, "template": view.template,
                         "permissions": list(permissions)})
        if not rows:
            return Answer("no workspaces yet: create one with create_workspace", {"workspaces": []})
        lines = [f"{row['name']}  ({row['status']}; may {', '.join(row['permissions'])})" for row in rows]
        return Answer("\n".join(lines), {"workspaces": rows})

    def _create_workspace(self, call: Call, args: dict[str, Any]) -> Answer:
        assert call.principal is not None
        made = self.requests.create_workspace(call.principal, NewWorkspace(name=args["name"],
                                                                           template=args.get("template")),
                                              trail=call)
        # The grant's token stays here: this session already acts through the bot's grants.
        permissions = list(made.grant.grant.permissions)
        return Answer(f"created workspace {made.name}; you may {', '.join(sorted(permissions))} there. "
                       "list_directory '/' shows its folders.",
                       {"name": made.name, "permissions": sorted(permissions),
                        "expires": made.grant.grant.expires.isoformat()})

    # -- commands --------------------------------------------------------------------------
    def _command(self, args: dict[str, Any]) -> Command:
        # A model names folders as every other tool does, from the workspace root ("/src"); the
        # service takes them relative to the workspace ("src"), as an absolute path is the host's.
        cwd = args.get("cwd")
        folder = (canonical(cwd).lstrip("/") or None) if cwd is not None else None
        return Command(argv=tuple(args["cmd"]), timeout=args.get("timeout"), cwd=folder, mcp=True)

    def _exec(self, call: Call, args: dict[str, Any], output: RunOutput | None = None) -> Answer:
        assert call.principal is not None
        if args.get("background"):
            view = self.requests.start(call.principal, args["workspace"], self._command(args), trail=call,
                                       busy=self.slots.counted)
            return Answer(f"started process {view.id}; read its output with process_logs, stop it with "
                           "process_kill", {"id": view.id, "status": view.status})
        result = self.requests.exec(call.principal, args["workspace"], self._command(args), trail=call,
                                    admit=self.slots.take, output=output)
        return _run_text(result, streamed=output is not None)

    async def _exec_streamed(self, token: str | None, args: dict[str, Any],
                             progress: Progress | None) -> types.CallToolResult:
        """A foreground exec whose output goes out as progress notifications while it runs."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes] = asyncio.Queue()
        # The client may go before the command has started (it sent its call and closed stdin):
        # the command is then killed as soon as it starts, not left to run for nobody.
        leaving = Killable()
        # Bounded both ways: a command printing gigabytes to a client that reads slowly (or not at
        # all) must not grow the server. At most STREAM_PENDING bytes wait to be sent and
        # STREAM_TOTAL are streamed in all; the rest is counted and said at the end (the result
        # still holds the run's own capture, bounded as every run's is).
        counts = {"pending": 0, "streamed": 0, "dropped": 0}
        guard = threading.Lock()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")

        def sink(data: bytes) -> None:
            with guard:
                room = min(STREAM_TOTAL - counts["streamed"], STREAM_PENDING - counts["pending"])
                kept = data[:max(room, 0)]
                counts["dropped"] += len(data) - len(kept)
                counts["pending"] += len(kept)
                counts["streamed"] += len(kept)
            if kept:
                # A client that closed stdin ends the server while the killed command's last
                # output still comes: it has nowhere to go, and raising here would cut the run
                # short of its outcome (an "internal error", its intent never closed).
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    loop.call_soon_threadsafe(chunks.put_nowait, kept)

        output = RunOutput(on_stdout=sink, on_stderr=sink, capture=True, on_started=leaving.on_started,
                           may_block=False)
        job = asyncio.ensure_future(anyio.to_thread.run_sync(self._blocking, "exec", token, args, output,
                                                             lambda: leaving.gone))
        sent = 0
        getter: asyncio.Future[bytes] | None = None
        gone_event = CLIENT_GONE.get(None)
        gone = asyncio.ensure_future(gone_event.wait()) if gone_event is not None else None
        try:
            while True:
                getter = getter or asyncio.ensure_future(chunks.get())
                waiting: set[asyncio.Future[Any]] = {job, getter}
                if gone is not None:
                    waiting.add(gone)
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if gone is not None and gone.done() and not job.done():
                    raise asyncio.CancelledError("the client went away")
                batch: list[bytes] = []
                if getter.done():
                    batch.append(getter.result())
                    getter = None
                elif job.done():
                    # Output put in the queue just before the end may not have reached the getter yet.
                    getter.cancel()
                    getter = None
                while not chunks.empty():
                    batch.append(chunks.get_nowait())
                if batch:
                    data = b"".join(batch)
                    with guard:
                        counts["pending"] -= len(data)
                    # In pieces a client takes as one event each (the SDK's limit is 1 MiB, JSON
                    # escaping may grow a byte sixfold), decoded across the cuts.
                    for at in range(0, len(data), STREAM_PIECE):
                        piece = data[at:at + STREAM_PIECE]
                        sent += len(piece)
                        if progress is not None:
                            await progress(sent, decoder.decode(piece))
                if job.done() and getter is None and chunks.empty():
                    if counts["dropped"] and progress is not None:
                        await progress(sent, f"\n[warden: {counts['dropped']} bytes of output were not streamed; "
                                             "the result holds what the run kept]\n")
                    break
        except BaseException:
            leaving.stop()  # the client cancelled or went away: the command goes too
            raise
        finally:
            if getter is not None:
                getter.cancel()
            if gone is not None:
                gone.cancel()
        return job.result()

    def _process_logs(self, call: Call, args: dict[str, Any]) -> Answer:
        assert call.principal is not None
        view = self.requests.process(call.principal, args["workspace"], args["id"], trail=call)
        # By the whole id `process` found: a start of one is looked up once.
        _, kept = self.requests.process_logs(call.principal, args["workspace"], view.id, trail=call)
        logs = kept.to_json()
        state = ("running" if view.status == "running" else
                 f"{view.status}, exit code {view.exit_code}" + (f", signal {view.signal}" if view.signal else ""))
        if view.usage is not None and view.usage.cpu_s is not None:
            state += f", {view.usage.cpu_s:.2f} s CPU so far"
        parts = [f"process {view.id} ({' '.join(view.cmd)}): {state}"]
        if logs["stdout"]:
            parts.append("stdout:\n" + str(logs["stdout"]))
        if logs["stderr"]:
            parts.append("stderr:\n" + str(logs["stderr"]))
        data = {"id": view.id, "status": view.status, "exit_code": view.exit_code, "signal": view.signal, **logs}
        if view.usage is not None:  # while it runs: what it has used so far
            data["usage"] = view.usage.to_json()
        return Answer("\n".join(parts), data)

    def _process_kill(self, call: Call, args: dict[str, Any]) -> Answer:
        assert call.principal is not None
        view = self.requests.kill_process(call.principal, args["workspace"], args["id"], int(signal.SIGTERM),
                                          trail=call)
        return Answer(f"sent SIGTERM to process {view.id} ({view.status})", {"id": view.id, "status": view.status})
