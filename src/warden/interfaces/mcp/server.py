"""Warden as an MCP server: the tools (calls.py) and workspace files as resources, over stdio
(`warden mcp`) or streamable HTTP at `/mcp` inside `warden serve`, on the official `mcp` SDK's
low-level `Server` (our own JSON Schemas and error results, not ones inferred from signatures).

The token: stdio serves the one in WARDEN_TOKEN, checked before the first message is read; HTTP
takes `Authorization: Bearer` on every request, refused with 401 before the SDK sees it, and each
tool call authenticates it again (a token revoked mid-session stops at its next call).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import mimetypes
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from warden.core.bodies import MAX_JSON_VALUES, json_values
from warden.core.errors import InvalidInput, WardenError
from warden.core.nodes import NODE_HEADERS
from warden.interfaces.mcp.calls import CLIENT_GONE, McpCall, ToolCalls
from warden.interfaces.mcp.forward import FORWARDED
from warden.interfaces.mcp.texts import refusal_text
from warden.interfaces.mcp.tools import TOOLS
from warden.services.auth import AuthDenied

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from warden.bootstrap import App
    from warden.interfaces.http.limits import Message, Receive, Scope, Send
    from warden.interfaces.http.peers import Peers
    from warden.services.auth import Principal

__all__ = ["INSTRUCTIONS", "RESOURCE_TEMPLATE", "McpHttp", "build_server", "resource_uri", "serve_stdio"]

INSTRUCTIONS = (
    "Warden gives you workspaces: isolated folders in which you read and write files and run commands in a "
    "sandbox without network. Start with list_workspaces (or create_workspace), then list_directory '/' to see "
    "the folders you may use. Paths are absolute inside the workspace ('/' is its root). Some folders are "
    "read-only, and changes in some need a person's approval: the answer then gives an approval id and the "
    "change is made only once a person approves it."
)
RESOURCE_TEMPLATE = "warden://{workspace}/{+path}"
DOOR_SECONDS = 5.0
DOOR_MEMORY = 4096
_INVALID_PARAMS = -32602
_SIGNED = frozenset(h.encode() for h in NODE_HEADERS)  # a request another node signed (or claims to)

# The token of the request being served: stdio's fixed one, or the HTTP request's Bearer token.
TokenOf = Callable[["ServerRequestContext[Any, Any]"], str | None]


def resource_uri(workspace: str, path: str) -> str:
    """The resource URI of a workspace file (`warden://demo/src/app.py`)."""
    return f"warden://{workspace}/{quote(path.lstrip('/'), safe='/')}"


def _parse_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("warden://"):
        raise MCPError(_INVALID_PARAMS, f"not a Warden resource: {uri}; use {RESOURCE_TEMPLATE}")
    workspace, _, path = uri[len("warden://"):].partition("/")
    if not workspace:
        raise MCPError(_INVALID_PARAMS, f"no workspace in {uri}; use {RESOURCE_TEMPLATE}")
    return workspace, "/" + unquote(path)


def build_server(app: App, token_of: TokenOf, calls: ToolCalls | None = None) -> Server[Any]:
    """The MCP server over `app`; `token_of(ctx)` gives the token of the request being served."""
    from warden.interfaces.http.statuses import package_version

    tools = calls or ToolCalls(app)

    def listing(default_workspace: str | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, title=t.title, description=t.description,
                       input_schema=t.input_schema(default_workspace),
                       annotations=types.ToolAnnotations(title=t.title, read_only_hint=t.read_only,
                                                         destructive_hint=t.destructive,
                                                         idempotent_hint=t.idempotent, open_world_hint=t.open_world))
            for t in TOOLS])

    listed = listing(None)

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        # A grant token is for one workspace: its tools say so and may leave `workspace` out.
        default = await asyncio.to_thread(tools.default_workspace, token_of(ctx))
        return listed if default is None else listing(default)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        async def progress(done: float, message: str) -> None:
            await ctx.session.report_progress(done, None, message)

        return await tools.call(params.name, params.arguments, token_of(ctx), progress)

    async def list_templates(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            name="workspace-file", title="A file of a workspace", uri_template=RESOURCE_TEMPLATE,
            description="The content of a file in a workspace, e.g. warden://demo/src/app.py "
                        "(text as text, anything else as base64).")])

    async def list_resources(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])  # files are reached through the template

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        workspace, path = _parse_uri(uri)
        token = token_of(ctx)
        node = await tools.forwarding.node_for(workspace, token)
        if node is not None and token:  # another node's workspace: read there (forward.py)
            return await _read_there(tools, node, uri, workspace, token)
        try:
            data = await asyncio.to_thread(_read, app, tools, token, workspace, path)
        except WardenError as exc:
            raise MCPError(_INVALID_PARAMS, refusal_text(exc, tool="read_file", workspace=workspace,
                                                         bot=None, keep=(path,))) from None
        mime = mimetypes.guess_type(path)[0]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            blob = base64.b64encode(data).decode("ascii")
            return types.ReadResourceResult(contents=[types.BlobResourceContents(
                uri=uri, mime_type=mime or "application/octet-stream", blob=blob)])
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type=mime or "text/plain", text=text)])

    return Server("warden", version=package_version(), title="Warden", instructions=INSTRUCTIONS,
                  description="Sandboxed workspaces for agents: files, commands, approvals.",
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resource_templates=list_templates,
                  on_list_resources=list_resources, on_read_resource=read_resource)


async def _read_there(tools: ToolCalls, node: str, uri: str, workspace: str, token: str) -> types.ReadResourceResult:
    from warden.interfaces.mcp.forward import RemoteError

    try:
        result = await tools.forwarding.request(node, "resources/read", {"uri": uri}, token)
        return types.ReadResourceResult.model_validate(result)
    except WardenError as exc:
        raise MCPError(_INVALID_PARAMS, refusal_text(exc, tool="read_file", workspace=workspace, bot=None)) from None
    except RemoteError as exc:
        raise MCPError(exc.code, exc.message) from None
    except ValueError as exc:  # a result that is not one
        raise MCPError(_INVALID_PARAMS, f"node {node!r} gave no resource: {exc}") from None


def _read(app: App, tools: ToolCalls, token: str | None, workspace: str, path: str) -> bytes:
    """A resource read: the same checks and audit as read_file."""
    with McpCall(app, "resource.read", f"{workspace}:{path}") as call:
        principal = call.authenticate(token)
        call.principal = tools.requests.acting_on(principal, workspace)
        return tools.file_service(call, workspace, "read").read_bytes(path, room=_whole)


def _whole(size: int) -> None:
    """A resource is a file's whole content, in one answer: bounded as read_file's binary ones."""
    from warden.interfaces.mcp.files import MAX_WHOLE

    if size > MAX_WHOLE:
        raise InvalidInput(f"the file is {size} bytes, over the {MAX_WHOLE >> 20} MiB a resource read returns; "
                           "read it with read_file (offset and limit) instead")


# -- stdio -------------------------------------------------------------------------------------
async def serve_stdio(app: App, token: str) -> None:
    """Serve MCP on this process's stdin and stdout for `token` until the client closes it."""
    from mcp.server.stdio import stdio_server

    server = build_server(app, lambda ctx: token)
    with _Lines.of_stdin(app.settings.get_size("api.max_body")) as lines:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            await server.run(_Answered(read_stream, write_stream, lines.limit), write_stream,
                             server.create_initialization_options())


# What the line reader gives for a line past the bound: no JSON (so the SDK passes it on as a
# parse error), and a text no client sends (a NUL first), told apart by `_Answered`.
_TOO_LONG = "\0warden: line too long"
_TOO_MANY = "\0warden: too many values"  # past core/bodies.py's bound, likewise never parsed


class _Lines:
    """stdin's lines for the SDK's stdio reader, each at most `limit` bytes held.

    The SDK reads a line whole, however long: a client sending a gigabyte with no newline made
    `warden mcp` hold it all (and copies of it) before saying anything. A line past `limit`
    (`api.max_body`, as a request's body over HTTP) is read on to its newline and dropped, and
    stands as `_TOO_LONG` (answered -32700, naming the bound); a line holding more values than
    core/bodies.py allows, as `_TOO_MANY` (likewise, never parsed). stdin itself is moved above the
    standard descriptors and 0 points at /dev/null while serving, as the SDK does for the stdin it
    opens itself (a tool's child reading stdin must not eat the client's messages).
    """

    def __init__(self, fd: int, limit: int) -> None:
        self._file = os.fdopen(fd, "rb", buffering=1 << 16, closefd=False)
        self.limit = limit

    @classmethod
    @contextlib.contextmanager
    def of_stdin(cls, limit: int) -> Iterator[_Lines]:
        wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        try:
            yield cls(wire, limit)
        finally:
            with contextlib.suppress(OSError):
                os.dup2(wire, 0)
            os.close(wire)

    def _line(self) -> str | None:
        """The next line (None at the end of input); run in a worker thread."""
        line = self._file.readline(self.limit + 1)
        if not line:
            return None
        if len(line) > self.limit and not line.endswith(b"\n"):
            del line
            while True:  # the rest, read and dropped a little at a time
                rest = self._file.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            return _TOO_LONG
        if json_values(line) is not None:
            return _TOO_MANY
        return line.decode("utf-8", "replace")

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        import anyio

        # abandon_on_cancel: a read blocked on a client that sends nothing must not hold the
        # server's exit (the descriptor is never closed under it: see of_stdin).
        line = await anyio.to_thread.run_sync(self._line, abandon_on_cancel=True)
        if line is None:
            raise StopAsyncIteration
        return line


class _Answered:
    """The stdio read stream, with each line that is not a JSON-RPC message answered at once.

    The SDK's stdin reader passes such a line on as its validation error, and its server drops
    it: a client that sent a bad request waited for its answer for ever. JSON-RPC 2.0 (section
    5.1) answers -32700 for text that is not JSON and -32600 for JSON that is not one message (a
    number, a batch, which MCP since 2025-06-18 no longer has, an object without a method), with
    the request's id where it can be read, else null. A blank line is no message: it is skipped.
    """

    def __init__(self, inner: Any, replies: Any, limit: int) -> None:
        self._inner = inner
        self._replies = replies
        self._limit = limit

    @property
    def last_context(self) -> Any:
        # The sender's context of the last message, which the SDK's dispatcher reads from here.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        from mcp.shared.message import SessionMessage
        from pydantic import ValidationError

        while True:
            item = await self._inner.receive()
            if not isinstance(item, ValidationError):
                return item
            errors = item.errors(include_url=False)
            if [e["type"] for e in errors] == ["json_invalid"]:
                if not str(errors[0]["input"]).strip():
                    continue
                said = errors[0]["input"]
                error = types.ErrorData(code=types.PARSE_ERROR, message=(
                    f"Parse error: the line is longer than {self._limit} bytes (api.max_body); it was dropped"
                    if said == _TOO_LONG else
                    f"Parse error: the line holds more than {MAX_JSON_VALUES} JSON values; it was dropped"
                    if said == _TOO_MANY else "Parse error: the line is not JSON"))
            else:
                error = types.ErrorData(code=types.INVALID_REQUEST,
                                        message="Invalid Request: a line must hold one JSON-RPC 2.0 message object")
            await self._replies.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=_id_in(errors), error=error)))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Answered:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Answered:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _id_in(errors: Any) -> str | int | None:
    """The id of an object that is not a valid message, where one can be read: an error about
    a missing or wrong field carries the whole object as its input."""
    for error in errors:
        found = error["input"].get("id") if isinstance(error["input"], dict) else None
        if isinstance(found, str | int) and not isinstance(found, bool):
            return found
    return None


# -- streamable HTTP ---------------------------------------------------------------------------
class McpHttp:
    """The ASGI app at `/mcp`: Bearer token checked, then the SDK's streamable-HTTP manager.

    Stateless (a fresh transport per request, no session kept between them), so every worker of
    `warden serve --workers N` answers any request, and no session outlives the token's checks.
    `warden serve` runs uvicorn without lifespan events, so the manager's task group is started
    by the first request and held by one task for the life of the event loop.
    """

    def __init__(self, app: App, *, max_body: int, peers: Peers | None = None) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from warden.interfaces.http.peers import Peers

        self.app = app
        self.peers = peers or Peers(app)
        self.tools = ToolCalls(app, self.peers)
        self.server = build_server(app, _bearer_of_request, self.tools)
        # Two answers to a POST, as the transport allows: an event stream for a request whose
        # client asked for progress (an exec's output comes as it runs), plain JSON otherwise,
        # which costs the server about half as much as a stream for a short call.
        self.streaming = StreamableHTTPSessionManager(app=self.server, stateless=True, max_request_body_size=max_body)
        self.plain = StreamableHTTPSessionManager(app=self.server, stateless=True, max_request_body_size=max_body,
                                                  json_response=True)
        self._ready: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        # Tokens the door let through lately (by SHA-256, never the token), for DOOR_SECONDS: the
        # door only keeps strangers from the SDK, while every tool call authenticates again, so a
        # token revoked meanwhile still does nothing; it saves a registry lookup and a thread hop
        # per request of a busy session.
        self._recent: dict[bytes, tuple[float, Principal]] = {}

    async def _hold(self, ready: asyncio.Event) -> None:
        async with self.streaming.run(), self.plain.run():
            ready.set()
            await asyncio.Event().wait()  # until the loop is closed

    async def _started(self) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._holder = asyncio.get_running_loop().create_task(self._hold(self._ready))
        await self._ready.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from warden.interfaces.http.limits import bearer_token

        token = bearer_token(scope)
        principal = self._recently_let_in(token)
        if principal is None:
            principal = await asyncio.to_thread(self._door, token)
        if principal is None:
            refused = "permission denied" if token else "authentication required: send `Authorization: Bearer <token>`"
            await _refuse(send, 401, "denied", refused)
            return
        await self._started()
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        # Who this request is, for the SDK (never the token itself in a field it may log).
        scope = dict(scope, user=AuthenticatedUser(AccessToken(token="", client_id=principal.actor, scopes=[])))
        if scope.get("method") != "POST":
            await self.streaming.handle_request(scope, receive, send)
            return
        body = await _read_body(receive)
        # A request another node signed (or claims to): checked, and its calls go no further.
        signed = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())
                  if k.lower() in _SIGNED}
        if signed:
            from warden.core.errors import Denied

            try:
                await asyncio.to_thread(self.peers.verify, method="POST", path=str(scope.get("path", "")),
                                        query=bytes(scope.get("query_string", b"")).decode("latin-1"),
                                        headers=signed, body=body)
            except Denied as exc:
                await _refuse(send, 403, exc.code, exc.message)
                return
        FORWARDED.set(bool(signed))
        plain_call = _plain_tool_call(scope, body)
        if plain_call is not None:
            await self._answer_plain_call(plain_call, token, send)
            return
        replayed = False
        gone = asyncio.Event()

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def watch() -> None:
            # The one reader of the connection once the body is in: a client that goes away
            # (it gave up on a long call) takes its call with it, a running command included.
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            CLIENT_GONE.get().set()
            handling.cancel()

        manager = self.streaming if _asks_progress(body) else self.plain
        CLIENT_GONE.set(asyncio.Event())  # seen by the call's handler, which runs in a task started from here
        handling = asyncio.ensure_future(manager.handle_request(scope, replay, send))
        watcher = asyncio.ensure_future(watch())
        try:
            await handling
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
        finally:
            watcher.cancel()

    async def _answer_plain_call(self, call: PlainCall, token: str | None, send: Send) -> None:
        """A plain tool call answered without the SDK's per-request session (see `_plain_tool_call`):
        the same handler, its result shaped for the protocol version by the SDK's own per-version
        surface (a test holds the two answers equal)."""
        from mcp_types.methods import serialize_server_result

        result = await self.tools.call(call.name, call.arguments, token)
        shaped = serialize_server_result("tools/call", call.version,
                                         result.model_dump(by_alias=True, mode="json", exclude_none=True))
        answer = types.JSONRPCResponse(jsonrpc="2.0", id=call.id, result=shaped)
        body = answer.model_dump_json(by_alias=True, exclude_unset=True).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})

    def _recently_let_in(self, token: str | None) -> Principal | None:
        if not token:
            return None
        seen = self._recent.get(hashlib.sha256(token.encode()).digest())
        return seen[1] if seen is not None and seen[0] > time.monotonic() else None

    def _door(self, token: str | None) -> Principal | None:
        """The caller, or None (the refusal audited; a known caller's own calls audit themselves)."""
        try:
            principal = self.app.auth.authenticate(token)
        except AuthDenied as exc:
            self.app.audit.record(actor=exc.actor or "anonymous", action="mcp.connect", target="/mcp",
                                  decision="deny", rule=exc.rule or "denied", result="denied")
            return None
        assert token is not None
        if len(self._recent) >= DOOR_MEMORY:
            self._recent.clear()
        self._recent[hashlib.sha256(token.encode()).digest()] = (time.monotonic() + DOOR_SECONDS, principal)
        return principal


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    from warden.interfaces.http.limits import error_bytes

    body = error_bytes(code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> bytes:
    """The request's body (the limits middleware has bounded it already)."""
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


# The protocol versions whose tools/call answer the plain lane gives exactly as the SDK does.
PLAIN_VERSIONS = frozenset({"2025-06-18", "2025-11-25"})
_PLAIN_CALL_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


@dataclass(frozen=True)
class PlainCall:
    id: str | int
    name: str
    arguments: dict[str, Any]
    version: str


def _plain_tool_call(scope: Scope, body: bytes) -> PlainCall | None:
    """The clean, common form of a tool call, else None (the SDK answers it).

    The SDK's stateless transport builds a session, a dispatcher and three tasks for every POST,
    which costs more than a file read itself. A call in the form every client sends — one JSON-RPC
    request for a tool other than `exec` (whose run follows the connection and may stream), no
    `_meta` (so no progress token), a protocol version header the lane answers exactly as the SDK,
    a JSON body and an Accept of JSON, no session or Origin header — goes straight to the same
    handler; anything else, odd or malformed, takes the SDK's path, so its checks and error answers
    stay the only ones (as `FastReads` does for the HTTP API).
    """
    import pydantic_core

    headers: dict[bytes, list[bytes]] = {}
    for key, value in scope.get("headers", ()):
        headers.setdefault(key, []).append(value)
    versions = headers.get(b"mcp-protocol-version", [])
    version = versions[0].decode("latin-1") if len(versions) == 1 else ""
    if version not in PLAIN_VERSIONS or b"mcp-session-id" in headers or b"origin" in headers:
        return None
    content_type = headers.get(b"content-type", [])
    accept = headers.get(b"accept", [])
    if (len(content_type) != 1 or content_type[0].split(b";")[0].strip().lower() != b"application/json"
            or len(accept) != 1 or b"application/json" not in accept[0].lower()):
        return None
    try:
        # Parsed as the SDK parses a message (pydantic's JSON parser): `json.loads` would also take
        # a UTF-16 or BOM-led body and a lone surrogate (`"\ud800"`), which the SDK refuses as a
        # parse error, so the lane would answer (or fail inside a tool, unaudited) what it never would.
        message = pydantic_core.from_json(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.keys() != _PLAIN_CALL_KEYS or message["jsonrpc"] != "2.0":
        return None
    request_id, params = message["id"], message["params"]
    if (message["method"] != "tools/call" or isinstance(request_id, bool)
            or not isinstance(request_id, str | int) or not isinstance(params, dict)
            or not params.keys() <= {"name", "arguments"}):
        return None
    name, arguments = params.get("name"), params.get("arguments", {})
    if not isinstance(name, str) or name == "exec" or not isinstance(arguments, dict):
        return None
    return PlainCall(request_id, name, arguments, version)


def _asks_progress(body: bytes) -> bool:
    """Whether a JSON-RPC message (or batch) carries a progress token (`params._meta.progressToken`);
    unreadable bodies go to the streaming answer, which says what is wrong with them."""
    import json

    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # deep nesting too: the SDK answers it a parse error
        return True
    messages = document if isinstance(document, list) else [document]
    for message in messages:
        if not isinstance(message, dict):
            return True
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and "progressToken" in meta:
            return True
    return False


def _bearer_of_request(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The token of the HTTP request behind a tool call (none over stdio), read as the API reads it."""
    from warden.interfaces.http.limits import bearer_token

    scope = getattr(ctx.request, "scope", None)
    return bearer_token(scope) if isinstance(scope, dict) else None

