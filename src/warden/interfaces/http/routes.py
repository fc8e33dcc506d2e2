"""Routes of the bot protocol: health, workspaces (a bot's request for one), exec, grants.

Each route does three things: authenticate the presented token through a `Call` (which writes
the request's one audit event), ask the bot-request service (services/bot_requests.py), which
decides and does the work, and render its answer as the response model. `router` lists them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Path, Request, Response, Security, WebSocket
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from warden.core.errors import InvalidInput
from warden.core.grants import PERMISSIONS
from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.models import (
    NAME,
    ExecRequest,
    GrantIssued,
    GrantRequest,
    Health,
    InstallRequest,
    InstallResultBody,
    ProcessStarted,
    Revoked,
    RunResultBody,
    SandboxInfo,
    SandboxLimits,
    SandboxNetwork,
    UsageBody,
    WhoAmI,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceGrantInfo,
    WorkspaceRequest,
    WorkspaceSummary,
)
from warden.interfaces.http.running import ExecSlots
from warden.interfaces.http.statuses import ERROR_RESPONSES, package_version
from warden.interfaces.http.streaming import Abandoned
from warden.services.bot_requests import ChildGrant, Command, NewWorkspace

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.ports import Tx
    from warden.interfaces.http.limits import Receive
    from warden.services.bot_requests import WorkspaceView

__all__ = ["BEARER", "BotRoutes", "Token", "WorkspaceName", "command_of", "router", "token_of"]

BEARER = HTTPBearer(auto_error=False, description="a bot identity token or a grant token (wdn_…)")
Token = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
WorkspaceName = Annotated[str, Path(pattern=NAME, description="workspace name")]
Accessor = Annotated[str, Path(pattern=r"^acc_[0-9a-f]{24}$", description="grant accessor")]


def token_of(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials is not None else None


def command_of(body: ExecRequest) -> Command:
    """The bot-request service's command for the body of an exec request."""
    return Command(argv=tuple(body.cmd), timeout=body.timeout, env=body.env, stdin=body.stdin,
                   cwd=body.cwd, network=tuple(body.network.allow) if body.network else None)


def _summary(view: WorkspaceView) -> WorkspaceSummary:
    return WorkspaceSummary(name=view.name, path=view.path, status=view.status, type=view.type,
                            template=view.template, created=view.created, last_accessed=view.last_accessed,
                            expires=view.expires, python_venv=view.python_venv,
                            permissions=list(view.permissions), node=view.node)


async def health() -> Health:
    """Is the server up (no authentication)."""
    return Health(status="ok", version=package_version())


class BotRoutes:
    """The routes of one server, bound to one wired App (its services, its audit log)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.requests = app.bot_requests
        self.exec_slots = ExecSlots.from_settings(app)  # one bound for all of this server's execs

    def whoami(self, token: Token) -> WhoAmI:
        """Who the presented token stands for, and what it allows."""
        with Call(self.app, "whoami", "token") as call:
            me = self.requests.whoami(call.authenticate(token_of(token)), trail=call)
            return WhoAmI(bot=me.bot, kind=me.kind, accessor=me.accessor, workspace=me.workspace,
                          permissions=list(me.permissions), zones=list(me.zones) if me.zones is not None else None,
                          secrets=list(me.secrets), expires=me.expires.isoformat() if me.expires else None,
                          domains=list(me.domains))

    def create_workspace(self, body: WorkspaceRequest, token: Token) -> WorkspaceCreated:
        """The bot protocol's first step: a bot, by its identity token, asks for a workspace."""
        params = body.params
        with Call(self.app, "workspace.create", params.name) as call:
            presented = token_of(token) or (body.credentials.isaac_token if body.credentials else None)
            wish = NewWorkspace(name=params.name, python=params.python, node=params.node,
                                requirements=tuple(params.requirements), template=params.template,
                                project_blob=params.project_blob)
            made = self.requests.create_workspace(call.authenticate(presented), wish, bot=body.bot, trail=call)
            issued, rules = made.grant, made.sandbox
            return WorkspaceCreated(
                status="created",
                workspace=WorkspaceGrantInfo(name=made.name, path=made.path, venv=made.venv,
                                             access_token=issued.token, accessor=issued.grant.accessor,
                                             expires=issued.grant.expires.isoformat()),
                sandbox=SandboxInfo(allowed_commands=list(rules.allowed_commands),
                                    blocked_paths=list(rules.blocked_paths),
                                    max_file_size_mb=rules.max_file_size_mb, allowlist=rules.allowlist,
                                    network=SandboxNetwork(domains=list(rules.domains)),
                                    limits=SandboxLimits(timeout_s=rules.timeout_s, memory_bytes=rules.memory,
                                                         cpu_seconds=rules.cpu_seconds, pids=rules.pids,
                                                         max_output_bytes=rules.max_output)))

    def list_workspaces(self, token: Token) -> list[WorkspaceSummary]:
        """The workspaces the caller holds a live grant on."""
        with Call(self.app, "workspace.list", "workspaces") as call:
            views = self.requests.list_workspaces(call.authenticate(token_of(token)), trail=call)
            return [_summary(view) for view in views]

    def get_workspace(self, name: WorkspaceName, token: Token) -> WorkspaceSummary:
        """One workspace (needs `read`)."""
        with Call(self.app, "workspace.get", name) as call:
            return _summary(self.requests.get_workspace(call.authenticate(token_of(token)), name, trail=call))

    def delete_workspace(self, name: WorkspaceName, token: Token) -> WorkspaceDeleted:
        """Destroy a workspace and revoke every grant on it (needs `admin`)."""
        with Call(self.app, "workspace.destroy", name) as call:
            gone = self.requests.delete_workspace(call.authenticate(token_of(token)), name, trail=call)
            return WorkspaceDeleted(name=gone.name, destroyed=True, revoked=list(gone.revoked))

    def exec_command(self, name: str, body: ExecRequest, token: str | None,
                     abandoned: Abandoned | None = None) -> RunResultBody:
        """Run a command in the workspace's sandbox (needs `execute`); secrets the grant names are
        added to its environment. `abandoned`: stops it should its client go away."""
        with Call(self.app, "exec", name) as call:
            command = command_of(body)

            def ended(tx: Tx) -> None:
                # The call's event, written with the run's outcome (one commit fewer an exec).
                if abandoned is not None and abandoned.gone:
                    call.note(client_gone=True)
                call.record_in(tx)

            try:
                result = self.requests.exec(call.authenticate(token), name, command, trail=call,
                                            admit=self.exec_slots.take, ended=ended,
                                            output=abandoned.output() if abandoned is not None else None)
            finally:
                if abandoned is not None and abandoned.gone:
                    call.note(client_gone=True)
            return RunResultBody(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                                 duration_s=round(result.duration_s, 6), timed_out=result.timed_out,
                                 signal=result.signal, truncated=result.truncated,
                                 limits_via=result.limits_via, seccomp=result.seccomp,
                                 usage=UsageBody.model_validate(result.usage.to_json()) if result.usage else None)

    async def exec_or_stream(self, name: WorkspaceName, body: ExecRequest, token: Token,
                             request: Request) -> RunResultBody | Response:
        """`exec_command`, or with `"stream": true` its output as NDJSON while it runs (streaming.py).
        (A plain exec's usual form is answered ahead of this route: fastpath.FastExecs.)"""
        if body.background:
            return await run_in_threadpool(self.start_background, name, body, token)
        if body.stream:
            from warden.interfaces.http.streaming import stream_exec

            return await stream_exec(self.app, self.requests, self.exec_slots.take, name, command_of(body),
                                     token_of(token))
        return await self.exec_awaited(request.receive, name, body, token_of(token))

    async def exec_awaited(self, receive: Receive, name: str, body: ExecRequest, token: str | None) -> RunResultBody:
        """`exec_command`, its command killed should the client go away before the answer
        (`receive`: the request's, its body read already)."""
        abandoned = Abandoned()
        job = asyncio.ensure_future(run_in_threadpool(self.exec_command, name, body, token, abandoned))
        watcher = asyncio.ensure_future(abandoned.watch(receive))
        try:
            await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
            return await job  # the client gone: killed, ended, audited; its answer goes nowhere
        except BaseException:
            abandoned.stop()  # cancelled: the request's time is up, or the server stops
            raise
        finally:
            watcher.cancel()

    def start_background(self, name: WorkspaceName, body: ExecRequest, token: Token) -> Response:
        """exec with `"background": true`: started in the grant's live sandbox, 202 and its id
        (processes.py has the routes that follow it). It takes an exec slot while it runs."""
        from fastapi.responses import JSONResponse

        with Call(self.app, "exec", name) as call:
            if body.stream:
                raise InvalidInput('"stream" and "background" do not go together: a background process\'s '
                                   "output is followed with GET …/processes/ID/logs?follow=true")
            view = self.requests.start(call.authenticate(token_of(token)), name, command_of(body), trail=call,
                                       busy=self.exec_slots.counted)
            return JSONResponse({"id": view.id}, status_code=202)

    async def pty(self, websocket: WebSocket, name: WorkspaceName) -> None:
        """An interactive shell on a pseudo-terminal over WebSocket (needs `execute`); pty.py."""
        from warden.interfaces.http.pty import serve_pty

        await serve_pty(self.app, self.requests, self.exec_slots.take, websocket, name)

    def install(self, name: WorkspaceName, body: InstallRequest, token: Token) -> InstallResultBody:
        """Add packages to the workspace, installed in its sandbox from the package indexes the
        server allows (needs `write` and `execute`); recorded in pyproject.toml or package.json."""
        with Call(self.app, "install", name) as call:
            done = self.requests.install(call.authenticate(token_of(token)), name, body.packages, node=body.node,
                                         trail=call, admit=self.exec_slots.take)
            return InstallResultBody(name=done.name, packages=list(done.packages), node=done.node, ok=done.ok,
                                     exit_code=done.exit_code, recorded_in=done.recorded_in)

    def create_grant(self, name: WorkspaceName, body: GrantRequest, token: Token) -> GrantIssued:
        """Mint a child grant for another bot (needs `admin`); never wider than the caller's.

        The answer never says whether a bot of that name is registered (a child grant is made for
        any well-formed name; see GrantService.grant); its commands count against the caller's bot.
        """
        with Call(self.app, "grant.create", name) as call:
            child = ChildGrant(bot=body.bot, permissions=tuple(body.permissions),
                               zones=tuple(body.zones) if body.zones is not None else None,
                               secrets=tuple(body.secrets), ttl=body.ttl, max_ttl=body.max_ttl,
                               domains=tuple(body.domains))
            issued = self.requests.create_grant(call.authenticate(token_of(token)), name, child, trail=call)
            grant = issued.grant
            return GrantIssued(token=issued.token, accessor=grant.accessor, expires=grant.expires.isoformat(),
                               max_expires=grant.max_expires.isoformat(), workspace=grant.workspace,
                               bot=grant.bot, permissions=[p for p in PERMISSIONS if p in grant.permissions],
                               zones=list(grant.zones) if grant.zones is not None else None,
                               secrets=list(grant.secrets), parent=grant.parent, domains=list(grant.domains))

    def revoke_grant(self, name: WorkspaceName, accessor: Accessor, token: Token) -> Revoked:
        """Revoke a grant the caller minted (at any depth) or its own (needs `admin`)."""
        with Call(self.app, "grant.revoke", name) as call:
            done = self.requests.revoke_grant(call.authenticate(token_of(token)), name, accessor, trail=call)
            return Revoked(revoked=list(done.revoked))


def router(app: App, routes: BotRoutes | None = None) -> APIRouter:
    """The bot protocol's routes for one App: path, method, answer and status, one line each.
    `routes`: the server's one BotRoutes (its exec slots), shared with the exec fast path."""
    routes = routes or BotRoutes(app)
    api = APIRouter(responses=ERROR_RESPONSES)
    add = api.add_api_route
    add("/v1/health", health, methods=["GET"], response_model=Health, tags=["meta"])
    add("/v1/whoami", threaded(routes.whoami), methods=["GET"], response_model=WhoAmI, tags=["meta"])
    add("/v1/workspaces", threaded(routes.create_workspace), methods=["POST"], response_model=WorkspaceCreated,
        status_code=201, tags=["workspaces"])
    add("/v1/workspaces", threaded(routes.list_workspaces), methods=["GET"],
        response_model=list[WorkspaceSummary], tags=["workspaces"])
    add("/v1/workspaces/{name}", threaded(routes.get_workspace), methods=["GET"],
        response_model=WorkspaceSummary, tags=["workspaces"])
    add("/v1/workspaces/{name}", threaded(routes.delete_workspace), methods=["DELETE"],
        response_model=WorkspaceDeleted, tags=["workspaces"])
    add("/v1/workspaces/{name}/exec", routes.exec_or_stream, methods=["POST"], response_model=RunResultBody,
        responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                         "description": 'with "stream": true, one JSON object a line as the output comes'},
                   202: {"model": ProcessStarted, "description": 'with "background": true, the process started'}},
        tags=["exec"])
    api.add_api_websocket_route("/v1/workspaces/{name}/pty", routes.pty)
    add("/v1/workspaces/{name}/install", threaded(routes.install), methods=["POST"],
        response_model=InstallResultBody, tags=["exec"])
    add("/v1/workspaces/{name}/grants", threaded(routes.create_grant), methods=["POST"],
        response_model=GrantIssued, status_code=201, tags=["grants"])
    add("/v1/workspaces/{name}/grants/{accessor}", threaded(routes.revoke_grant), methods=["DELETE"],
        response_model=Revoked, tags=["grants"])
    return api
