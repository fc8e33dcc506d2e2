"""The HTTP API (`warden serve`): a FastAPI application built around one wired `App`.

Errors leave as `{"error": {"code", "message"}}` with the status from one table; the codes
are the CLI's (`invalid`, `not_found`, `conflict`, `denied`, `locked`, `timeout`,
`unavailable`, `internal`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from warden.core.errors import WardenError
from warden.interfaces.http.calls import Call, Unauthenticated
from warden.interfaces.http.fastpath import CONTENT_PATH, FastExecs, FastReads, Mounted
from warden.interfaces.http.limits import RELEASE, LimitsMiddleware, Refusal, Scope, bearer_token
from warden.interfaces.http.statuses import (
    ERROR_RESPONSES,
    HTTP_STATUS,
    SLOT_RULES,
    error_json,
    error_response,
    package_version,
    status_for,
)
from warden.services.auth import AuthDenied

if TYPE_CHECKING:
    from warden.bootstrap import App

__all__ = ["DOOR_ABOVE", "ERROR_RESPONSES", "HTTP_STATUS", "bearer_token", "body_door", "create_app", "status_for",
           "upload_screen"]

# How long one change stream (GET …/events) may stay open: heartbeats keep it alive meanwhile.
_STREAM_S = 7 * 86400.0

def _json_unsaid(request: Request, exc: RequestValidationError) -> bool:
    """Whether a JSON body was refused because the request did not say it is JSON: a form's
    content type, as `curl -d` sends, or none (FastAPI then reads no JSON either)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        return False
    return any(tuple(item.get("loc", ()))[:1] == ("body",) for item in exc.errors())


def upload_screen(app: App) -> Callable[[Scope], Refusal | None]:
    """Check an upload's token and `write` grant before its body is read (see limits.py).

    The same authentication, decision and audit event as the route's own (`files.write`),
    so a refusal here reads exactly as the route's would; an allowed request goes on to the
    route, which checks again and records the event.
    """

    from warden.interfaces.http.files import CONTENT_ROOM

    max_file = app.settings.get_int("sandbox.max_file_size_mb") * 1024 * 1024

    def screen(scope: Scope) -> Refusal | None:
        found = CONTENT_PATH.match(str(scope.get("path", "")))
        name = found.group(1) if found else ""
        query = parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1"), keep_blank_values=True)
        path = next((value for key, value in reversed(query) if key == "path"), "")
        with app.registry.transaction(write=False) as tx:
            record = tx.workspaces.get(name) if name else None
        # Another node's workspace is forwarded there, and its grant is decided there; but the
        # body is read here first, so the token is checked here too: else anyone could make this
        # node hold a file-sized body per connection by naming a workspace of another node.
        elsewhere = record is not None and record.node not in (None, app.node)
        try:
            with Call(app, "files.write", f"{name}:{path}") as call:
                token = bearer_token(scope)
                if not token:
                    raise Unauthenticated("authentication required: send `Authorization: Bearer <token>`",
                                          rule="token.missing")
                principal = call.authenticate(token)
                if not elsewhere:
                    call.authorize(name, "write")
                # The body is held whole until it has all come (a forwarded one too): room for it
                # among the file content held for all bots, and one of the bot's few large ones.
                scope[RELEASE] = CONTENT_ROOM.take(principal.minter, _declared(scope, max_file), upload=True)
                call.audited_by_service = True  # the route (or the owning node) records the call's one event
        except WardenError as exc:
            return _refusal(exc)
        return None

    return screen


def _declared(scope: Scope, limit: int) -> int:
    """The length a request's body declares; `limit` (the most it may be) when it declares none."""
    return next((int(v) for k, v in scope.get("headers", ()) if k == b"content-length" and v.isdigit()), limit)


def _refusal(exc: WardenError) -> Refusal:
    """`exc` as the answer to a request refused before its body was read (401 asks for a token)."""
    status = status_for(exc)
    headers = ((b"www-authenticate", b"Bearer"),) if status == 401 else ()
    if exc.rule in SLOT_RULES:  # nothing was read: the same request may come again (as statuses.py says it)
        headers = ((b"retry-after", b"1"),)
    return Refusal(status, exc.code, exc.message, headers)


# Bytes of a body held before its token is checked (limits.py): more than any request without
# a token needs, and little enough that many connections without one cost little.
DOOR_ABOVE = 64 * 1024


def body_door(app: App) -> Callable[[Scope], Refusal | None]:
    """Check that a large body's token authenticates before the body is held (see limits.py).

    Authentication only: the route decides what the caller may do, and records the call. A
    refusal is audited and logged as `api.request` on the path, as a route's would be.
    """

    from warden.interfaces.http.files import CONTENT_ROOM

    max_json = app.settings.get_size("api.max_body")

    def door(scope: Scope) -> Refusal | None:
        token = bearer_token(scope)
        if token:
            try:
                principal = app.auth.authenticate(token)
            except AuthDenied:
                pass
            else:
                # Held whole until it has all come, up to api.max_body on each connection: a bot's
                # unfinished bodies took 16 MiB a connection. Room for it as for a file's (the
                # screen's upload), by its declared length (none: the most it may be).
                try:
                    scope[RELEASE] = CONTENT_ROOM.take(principal.minter, _declared(scope, max_json), upload=True)
                except WardenError as exc:
                    return _refusal(exc)
                return None  # no event: the route authenticates again and records its call
        try:
            with Call(app, "request", str(scope.get("path", ""))) as call:
                call.authenticate(token)  # raises again, and the call records the refusal
                call.audited_by_service = True  # valid by now after all: the route records it
        except WardenError as exc:
            return _refusal(exc)
        return None

    return door


def create_app(app: App) -> FastAPI:
    """Build the API for one wired App (the registry, keys and services it holds)."""
    from warden.interfaces.http import approvals, checkpoints, events, files, git, openapi, processes, routes

    # fastapi-offline: /docs loads Swagger UI's script and style from this server (bundled in
    # the package), not from a CDN, so the page works on a machine without the internet.
    api = FastAPIOffline(title="Warden", version=package_version(), openapi_url="/openapi.json",
                         docs_url="/docs", redoc_url=None, static_url="/docs-assets",
                         description="The bot protocol of Warden: bots ask for workspaces, run commands and "
                                     "move files in them with scoped, expiring tokens. Any request may also "
                                     "be refused with 414 (URL too long) or 431 (headers too large).")
    openapi.install(api)
    api.state.warden = app

    @api.exception_handler(WardenError)
    async def warden_error(request: Request, exc: WardenError) -> JSONResponse:
        return error_response(exc, request.method, request.url.path)

    @api.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        if _json_unsaid(request, exc):
            # `curl -d '{...}'` says form data: FastAPI then read no object at all, and said only that.
            return error_json(422, "invalid", "malformed request: the body is JSON, so say so with the header "
                                              "`Content-Type: application/json` (curl: -H 'content-type: "
                                              "application/json') (see /openapi.json)")
        problems = []
        for item in exc.errors()[:3]:
            where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
            problems.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
            if where == "cmd" and isinstance(item.get("input"), str):
                # `"cmd": "ls -l"`, as a shell line: the way to say it is not in pydantic's words.
                problems[-1] += ', the program and its arguments each a string: ["ls", "-l"] ' \
                                '(a shell line: ["sh", "-c", "ls -l | wc -l"])'

        return error_json(422, "invalid", "malformed request: " + "; ".join(problems) + " (see /openapi.json)")

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 401: "denied", 403: "denied", 409: "conflict", 423: "locked"}.get(
            exc.status_code, "invalid" if exc.status_code < 500 else "internal")
        message = "no such endpoint: see /openapi.json" if exc.status_code == 404 else str(exc.detail)
        return error_json(exc.status_code, code, message)

    @api.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc, request.method, request.url.path)

    services = files.FileServices(app)
    bot_routes = routes.BotRoutes(app)  # one for the routes and the exec fast path: one set of exec slots
    api.include_router(routes.router(app, bot_routes))
    api.include_router(files.router(app, services))
    api.include_router(processes.router(app))
    api.include_router(approvals.router(app))
    api.include_router(git.router(app))
    api.include_router(events.router(app))
    api.include_router(checkpoints.router(app))
    # The MCP server over streamable HTTP (interfaces/mcp): its own Bearer check, the same services.
    from warden.interfaces.http.peers import Peers
    from warden.interfaces.mcp.server import McpHttp

    peers = Peers(app)  # one view of the other nodes for the forwarding of HTTP, PTYs and MCP
    mcp = McpHttp(app, max_body=app.settings.get_size("api.max_body"), peers=peers)

    max_json = app.settings.get_size("api.max_body")
    max_file = app.settings.get_int("sandbox.max_file_size_mb") * 1024 * 1024
    request_timeout = app.settings.get_seconds("api.request_timeout")
    run_timeout = app.settings.get_seconds("sandbox.timeout")

    def upload(scope: Scope) -> bool:
        return scope.get("method") == "PUT" and CONTENT_PATH.match(str(scope.get("path", ""))) is not None

    def limit_for(scope: Scope) -> int:
        # Only an upload may be large; it is screened (its token checked) before being read.
        # Every other body is JSON (or nothing), its values counted too (core/bodies.py).
        return max_file if upload(scope) else max_json

    def timeout_for(scope: Scope) -> float:
        path = str(scope.get("path", ""))
        method = scope.get("method")
        if path.endswith("/exec") or path.endswith("/logs") or path == "/mcp":
            # (An MCP request may be a tool call running a command: the same bound as an exec.)
            # The run has its own, shorter, wall-clock limit; so has a followed background process.
            return run_timeout + 30.0
        if method == "GET" and path.endswith("/events"):
            return _STREAM_S  # a change stream lasts as long as its client listens
        if method == "POST" and path.rstrip("/") == "/v1/workspaces":
            return max(request_timeout, 600.0)  # building an environment may take minutes
        if method == "GET" and CONTENT_PATH.match(path) is not None:
            # A file's bytes are sent as its client reads them (files.py): a large one to a slow
            # client gets a second for each 256 KiB of the largest file, as an upload does.
            return request_timeout + max_file / (256 * 1024)
        return request_timeout

    # The fast paths inside NodeForwarding (another node's files are read and its commands run
    # there), all inside the limits, so bounds and timeouts apply to them and to forwarded requests too.
    from warden.interfaces.http.nodes import NodeForwarding

    api.add_middleware(FastExecs, routes=bot_routes)
    api.add_middleware(FastReads, app=app, services=services)
    api.add_middleware(NodeForwarding, app=app, max_body=max(max_file, max_json), timeout=run_timeout + 60.0,
                       peers=peers, open_timeout=max(request_timeout, 60.0))
    # `/mcp` is answered ahead of FastAPI's routing (which would first try every route of the
    # API on each call); it answers its own errors, as the SDK's transport does.
    api.add_middleware(Mounted, path="/mcp", endpoint=mcp)
    api.add_middleware(LimitsMiddleware, limit_for=limit_for, timeout_for=timeout_for,
                       screen=upload_screen(app), screen_above=max_json,
                       door=body_door(app), door_above=DOOR_ABOVE, parsed=lambda scope: not upload(scope),
                       body_timeout=request_timeout)
    return api
