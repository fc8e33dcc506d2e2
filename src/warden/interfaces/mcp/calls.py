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
import base64
import contextvars
import difflib
import fnmatch
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import mcp_types as types

from warden.core.errors import InvalidInput, Pending, WardenError, classify
from warden.core.paths import canonical
from warden.interfaces.http.calls import Call
from warden.interfaces.http.files import FileServices
from warden.interfaces.http.running import ExecSlots
from warden.interfaces.mcp.texts import pending_text, refusal_text
from warden.interfaces.mcp.tools import check_arguments
from warden.services.bot_requests import Command, NewWorkspace
from warden.services.runs import RunOutput

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.runs import RunResult
    from warden.services.auth import Principal
    from warden.services.files import FileService

__all__ = ["CLIENT_GONE", "LINES", "Progress", "ToolCalls"]

log = logging.getLogger("warden.mcp")

LINES = 2000  # lines read_file returns when no limit is given
MAX_TEXT = 256 * 1024  # characters of file text in one answer
TREE_ENTRIES = 400
SEARCH_SCANNED = 5000
SEARCH_RESULTS = 100
_NOT_EXPANDED = frozenset({".git", ".venv", "node_modules", "__pycache__", ".warden", ".mypy_cache",
                           ".pytest_cache", ".ruff_cache"})

# Sends one progress notification: (progress so far, message).
Progress = Callable[[float, str], Awaitable[None]]

# Set when the client of the request being served went away (the HTTP front end sets a fresh one
# per request; the SDK runs the call in a task started from that request's, so it sees it).
# A foreground exec then kills its command: nobody waits for its output any more.
CLIENT_GONE: contextvars.ContextVar[asyncio.Event] = contextvars.ContextVar("warden_mcp_client_gone")


class McpCall(Call):
    """One tool call's audit event, named `mcp.<tool>`."""

    channel = "mcp"


@dataclass(frozen=True)
class _Answer:
    text: str
    data: dict[str, Any] | None = None


def _result(answer: _Answer, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=answer.text)],
                                structured_content=answer.data, is_error=error)


def _entry_name(name: str, kind: str) -> str:
    return name + ("/" if kind == "dir" else "@" if kind == "symlink" else "")


def _run_text(result: RunResult, *, streamed: bool) -> _Answer:
    ended = (f"timed out after {result.duration_s:.1f} s" if result.timed_out else
             f"killed by signal {result.signal}" if result.signal else f"exit code {result.exit_code}")
    parts = [f"{ended} ({result.duration_s:.2f} s)"]
    if result.stdout:
        parts.append("stdout:\n" + result.stdout)
    if result.stderr:
        parts.append("stderr:\n" + result.stderr)
    if result.truncated:
        parts.append("(output beyond the server's limit was cut)")
    data = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
            "duration_s": round(result.duration_s, 3), "timed_out": result.timed_out, "signal": result.signal,
            "streamed": streamed}
    return _Answer("\n".join(parts), data)


class ToolCalls:
    """The tools of one server (stdio or HTTP), bound to one wired App."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.requests = app.bot_requests
        self.files = FileServices(app)
        self.slots = ExecSlots.from_settings(app)  # the same bound as the HTTP API's execs

    # -- the entry -------------------------------------------------------------------------
    async def call(self, name: str, arguments: dict[str, Any] | None, token: str | None,
                   progress: Progress | None = None) -> types.CallToolResult:
        """Carry out tool `name` for the holder of `token`; a refusal is an error result."""
        try:
            tool, args = check_arguments(name, arguments)
        except InvalidInput as exc:
            return _result(_Answer(f"invalid: {exc.message}"), error=True)
        if tool.name == "exec" and not args.get("background"):
            return await self._exec_streamed(token, args, progress)
        return await anyio.to_thread.run_sync(self._blocking, tool.name, token, args)

    def _blocking(self, name: str, token: str | None, args: dict[str, Any],
                  output: RunOutput | None = None) -> types.CallToolResult:
        workspace = args.get("workspace")
        target = f"{workspace}:{args['path']}" if workspace and "path" in args else (workspace or "workspaces")
        principal: Principal | None = None
        try:
            with McpCall(self.app, name, target) as call:
                principal = call.authenticate(token)
                if workspace is not None:
                    # Acting through the bot's grant there (itself, for a grant token).
                    call.principal = self.requests.acting_on(principal, workspace)
                handler: Callable[..., _Answer] = getattr(self, f"_{name}")
                answer = handler(call, args, output) if output is not None else handler(call, args)
            return _result(answer)
        except Pending as exc:
            text, shown = pending_text(exc)
            return _result(_Answer(text, {"status": "pending", "approval": shown}))
        except WardenError as exc:
            bot = principal.bot if principal else None
            return _result(_Answer(refusal_text(exc, tool=name, workspace=workspace, bot=bot)), error=True)
        except Exception as exc:
            mapped = classify(exc)  # a locked registry, a full disk: by cause
            if mapped is not None:
                return _result(_Answer(refusal_text(mapped, tool=name, workspace=workspace, bot=None)), error=True)
            log.error("internal error in tool %s: %s: %s", name, type(exc).__name__, exc)
            return _result(_Answer(f"internal error ({type(exc).__name__}); the server log has details"), error=True)

    def _file_service(self, call: Call, workspace: str, permission: str) -> FileService:
        """The caller's file service on `workspace`, once its grant allows `permission` (as HTTP's)."""
        assert call.principal is not None
        record = call.authorize(workspace, permission)
        scope = self.app.auth.zone_scope(call.principal, lambda: self.app.sandbox_paths.zones(record))
        call.audited_by_service = True
        return self.files.get(record, call.principal, scope)

    # -- workspaces ------------------------------------------------------------------------
    def _list_workspaces(self, call: Call, args: dict[str, Any]) -> _Answer:
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
            return _Answer("no workspaces yet: create one with create_workspace", {"workspaces": []})
        lines = [f"{row['name']}  ({row['status']}; may {', '.join(row['permissions'])})" for row in rows]
        return _Answer("\n".join(lines), {"workspaces": rows})

    def _create_workspace(self, call: Call, args: dict[str, Any]) -> _Answer:
        assert call.principal is not None
        made = self.requests.create_workspace(call.principal, NewWorkspace(name=args["name"],
                                                                           template=args.get("template")),
                                              trail=call)
        # The grant's token stays here: this session already acts through the bot's grants.
        permissions = list(made.grant.grant.permissions)
        return _Answer(f"created workspace {made.name}; you may {', '.join(sorted(permissions))} there. "
                       "list_directory '/' shows its folders.",
                       {"name": made.name, "permissions": sorted(permissions),
                        "expires": made.grant.grant.expires.isoformat()})

    # -- commands --------------------------------------------------------------------------
    def _command(self, args: dict[str, Any]) -> Command:
        # A model names folders as every other tool does, from the workspace root ("/src"); the
        # service takes them relative to the workspace ("src"), as an absolute path is the host's.
        cwd = args.get("cwd")
        return Command(argv=tuple(args["cmd"]), timeout=args.get("timeout"),
                       cwd=canonical(cwd).lstrip("/") or None if cwd is not None else None)

    def _exec(self, call: Call, args: dict[str, Any], output: RunOutput | None = None) -> _Answer:
        assert call.principal is not None
        if args.get("background"):
            view = self.requests.start(call.principal, args["workspace"], self._command(args), trail=call,
                                       busy=self.slots.counts)
            return _Answer(f"started process {view.id}; read its output with process_logs, stop it with "
                           "process_kill", {"id": view.id, "status": view.status})
        result = self.requests.exec(call.principal, args["workspace"], self._command(args), trail=call,
                                    admit=self.slots.take, output=output)
        return _run_text(result, streamed=output is not None)

    async def _exec_streamed(self, token: str | None, args: dict[str, Any],
                             progress: Progress | None) -> types.CallToolResult:
        """A foreground exec whose output goes out as progress notifications while it runs."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes] = asyncio.Queue()
        kills: list[Callable[[], None]] = []

        def sink(data: bytes) -> None:
            loop.call_soon_threadsafe(chunks.put_nowait, data)

        output = RunOutput(on_stdout=sink, on_stderr=sink, capture=True, on_started=kills.append)
        job = asyncio.ensure_future(anyio.to_thread.run_sync(self._blocking, "exec", token, args, output))
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
                if getter.done():
                    batch = [getter.result()]
                    getter = None
                    while not chunks.empty():
                        batch.append(chunks.get_nowait())
                    data = b"".join(batch)
                    sent += len(data)
                    if progress is not None:
                        await progress(sent, data.decode("utf-8", "replace"))
                elif job.done():
                    break
        except BaseException:
            for kill in kills:  # the client cancelled or went away: the command goes too
                kill()
            raise
        finally:
            if getter is not None:
                getter.cancel()
            if gone is not None:
                gone.cancel()
        return job.result()

    def _process_logs(self, call: Call, args: dict[str, Any]) -> _Answer:
        assert call.principal is not None
        view = self.requests.process(call.principal, args["workspace"], args["id"], trail=call)
        logs = self.requests.process_logs(call.principal, args["workspace"], args["id"], trail=call).to_json()
        state = ("running" if view.status == "running" else
                 f"{view.status}, exit code {view.exit_code}" + (f", signal {view.signal}" if view.signal else ""))
        parts = [f"process {view.id} ({' '.join(view.cmd)}): {state}"]
        if logs["stdout"]:
            parts.append("stdout:\n" + str(logs["stdout"]))
        if logs["stderr"]:
            parts.append("stderr:\n" + str(logs["stderr"]))
        return _Answer("\n".join(parts), {"id": view.id, "status": view.status, "exit_code": view.exit_code,
                                          "signal": view.signal, **logs})

    def _process_kill(self, call: Call, args: dict[str, Any]) -> _Answer:
        assert call.principal is not None
        view = self.requests.kill_process(call.principal, args["workspace"], args["id"], int(signal.SIGTERM),
                                          trail=call)
        return _Answer(f"sent SIGTERM to process {view.id} ({view.status})", {"id": view.id, "status": view.status})

    # -- files -----------------------------------------------------------------------------
    def _read_file(self, call: Call, args: dict[str, Any]) -> _Answer:
        path = canonical(args["path"])
        data = self._file_service(call, args["workspace"], "read").read_bytes(path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            if "offset" in args or "limit" in args:
                raise InvalidInput(f"{path} is a binary file; read it whole (it comes back as base64)") from None
            encoded = base64.b64encode(data).decode("ascii")
            return _Answer(f"{path} is binary ({len(data)} bytes); base64:\n{encoded}",
                           {"path": path, "encoding": "base64", "size": len(data), "content": encoded})
        lines = text.splitlines(keepends=True)
        first = int(args.get("offset", 1))
        limit = int(args.get("limit", LINES))
        if first > max(len(lines), 1):
            raise InvalidInput(f"offset {first} is past the end of {path} ({len(lines)} lines)")
        chosen: list[str] = []
        size = 0
        for line in lines[first - 1:first - 1 + limit]:
            if size + len(line) > MAX_TEXT and chosen:
                break
            chosen.append(line)
            size += len(line)
        last = first - 1 + len(chosen)
        body = "".join(chosen)
        # The text goes once, as the content a model reads; the structured part says what it is.
        data_out: dict[str, Any] = {"path": path, "encoding": "utf-8", "size": len(data), "lines": len(lines),
                                    "offset": first, "returned_lines": len(chosen)}
        if first == 1 and last >= len(lines):
            return _Answer(body, data_out)
        more = f"; call read_file with offset={last + 1} for the rest" if last < len(lines) else ""
        return _Answer(f"[{path}: lines {first}-{last} of {len(lines)}{more}]\n{body}", data_out)

    def _write_file(self, call: Call, args: dict[str, Any]) -> _Answer:
        path = canonical(args["path"])
        if args.get("encoding") == "base64":
            try:
                data = base64.b64decode(args["content"], validate=True)
            except ValueError:
                raise InvalidInput("content is not valid base64") from None
        else:
            data = args["content"].encode("utf-8")
        size = self._file_service(call, args["workspace"], "write").write_bytes(path, data)
        return _Answer(f"wrote {size} bytes to {path}", {"path": path, "size": size})

    def _edit_file(self, call: Call, args: dict[str, Any]) -> _Answer:
        path = canonical(args["path"])
        files = self._file_service(call, args["workspace"], "write")
        before = files.read_text(path)
        old, new = args["old"], args["new"]
        found = before.count(old)
        if found == 0:
            raise InvalidInput(f"the text to replace does not occur in {path}; read_file it and copy the exact "
                               "text, whitespace and line breaks included")
        if found > 1:
            raise InvalidInput(f"the text to replace occurs {found} times in {path}; include more of the lines "
                               "around it so that it occurs once")
        after = before.replace(old, new, 1)
        files.write_text(path, after)
        diff = "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                            fromfile=f"a{path}", tofile=f"b{path}"))
        return _Answer(diff or "(no change)", {"path": path, "diff": diff})

    def _list_directory(self, call: Call, args: dict[str, Any]) -> _Answer:
        path = canonical(args["path"])
        files = self._file_service(call, args["workspace"], "read")
        entries = files.list(path)
        rows = [{"name": e.name, "type": "directory" if e.type == "dir" else e.type, "size": e.size}
                for e in entries]
        text = "\n".join(_entry_name(e.name, e.type) for e in entries) or f"{path} is empty"
        return _Answer(text, {"path": path, "entries": rows})

    def _directory_tree(self, call: Call, args: dict[str, Any]) -> _Answer:
        start = canonical(args.get("path", "/"))
        depth = int(args.get("depth", 3))
        files = self._file_service(call, args["workspace"], "read")
        lines: list[str] = []
        cut = False

        def walk(folder: str, level: int) -> None:
            nonlocal cut
            for entry in files.list(folder):
                if len(lines) >= TREE_ENTRIES:
                    cut = True
                    return
                child = f"{folder.rstrip('/')}/{entry.name}"
                note = "  (not expanded)" if entry.type == "dir" and entry.name in _NOT_EXPANDED else ""
                lines.append("  " * level + _entry_name(entry.name, entry.type) + note)
                if entry.type == "dir" and not note and level + 1 < depth:
                    walk(child, level + 1)

        walk(start, 0)
        if cut:
            lines.append(f"… more entries not shown (at most {TREE_ENTRIES}); ask for a deeper path")
        return _Answer(f"{start}\n" + "\n".join(lines), {"path": start, "tree": lines, "truncated": cut})

    def _search_files(self, call: Call, args: dict[str, Any]) -> _Answer:
        start = canonical(args.get("path", "/"))
        pattern = args["pattern"]
        flat = pattern.replace("**/", "")
        needle = args.get("contains")
        files = self._file_service(call, args["workspace"], "read")
        found: list[dict[str, Any]] = []
        scanned = 0
        queue = [start]
        bounded = False
        while queue and not bounded:
            folder = queue.pop(0)
            for entry in files.list(folder):
                scanned += 1
                if scanned > SEARCH_SCANNED or len(found) >= SEARCH_RESULTS:
                    bounded = True
                    break
                full = f"{folder.rstrip('/')}/{entry.name}"
                rel = full[len(start.rstrip("/")) + 1:]
                if entry.type == "dir":
                    if entry.name not in _NOT_EXPANDED:
                        queue.append(full)
                    continue
                if not any(fnmatch.fnmatchcase(candidate, glob) for candidate in (entry.name, rel)
                           for glob in (pattern, flat)):
                    continue
                if needle is None:
                    found.append({"path": full})
                    continue
                if entry.type != "file" or entry.size > 1 << 20:
                    continue
                try:
                    text = files.read_text(full)
                except WardenError:
                    continue  # binary or unreadable: not a match for text
                hits = [(n, line) for n, line in enumerate(text.splitlines(), 1) if needle in line][:5]
                if hits:
                    found.append({"path": full, "lines": [{"line": n, "text": line[:300]} for n, line in hits]})
        out: list[str] = []
        for item in found:
            out.append(item["path"])
            out.extend(f"  {hit['line']}: {hit['text']}" for hit in item.get("lines", ()))
        if bounded:
            out.append(f"… search stopped (at most {SEARCH_RESULTS} results, {SEARCH_SCANNED} entries looked at); "
                       "narrow it with path or pattern")
        return _Answer("\n".join(out) or "no matches", {"matches": found, "truncated": bounded})

    def _file_info(self, call: Call, args: dict[str, Any]) -> _Answer:
        path = canonical(args["path"])
        info = self._file_service(call, args["workspace"], "read").stat(path).to_json()
        info["path"] = path
        info["type"] = "directory" if info["type"] == "dir" else info["type"]
        return _Answer("\n".join(f"{k}: {info[k]}" for k in ("path", "type", "size", "mode", "mtime", "nlink")),
                       info)

    def _delete_file(self, call: Call, args: dict[str, Any]) -> _Answer:
        path = canonical(args["path"])
        kind = self._file_service(call, args["workspace"], "write").delete(path, recursive=bool(args.get("recursive")))
        return _Answer(f"deleted {path}", {"path": path, "type": "directory" if kind == "dir" else kind})

    def _move_file(self, call: Call, args: dict[str, Any]) -> _Answer:
        source, destination = canonical(args["source"]), canonical(args["destination"])
        kind = self._file_service(call, args["workspace"], "write").move(source, destination)
        return _Answer(f"moved {source} to {destination}", {"source": source, "destination": destination,
                                                             "type": "directory" if kind == "dir" else kind})
