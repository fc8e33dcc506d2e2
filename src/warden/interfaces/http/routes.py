"""Routes of the bot protocol: health, workspaces (seed 000's request), exec, grants."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Path, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from warden.core.durations import parse_duration
from warden.core.errors import Conflict, Denied, InvalidInput, Unavailable
from warden.core.grants import PERMISSIONS, effective
from warden.interfaces.http.app import ERROR_RESPONSES, _package_version
from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.models import (
    NAME,
    ExecRequest,
    GrantIssued,
    GrantRequest,
    Health,
    Revoked,
    RunResultBody,
    SandboxInfo,
    WhoAmI,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceGrantInfo,
    WorkspaceRequest,
    WorkspaceSummary,
)
from warden.services.templates import TemplateCatalog

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.workspaces import WorkspaceRecord
    from warden.services.auth import Principal

__all__ = ["BEARER", "Token", "WorkspaceName", "router", "token_of"]

BEARER = HTTPBearer(auto_error=False, description="a bot identity token or a grant token (wdn_…)")
Token = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
WorkspaceName = Annotated[str, Path(pattern=NAME, description="workspace name")]
Accessor = Annotated[str, Path(pattern=r"^acc_[0-9a-f]{24}$", description="grant accessor")]

# What a bot gets on a workspace it asked for: everything but secrets, which a person grants.
CREATOR_PERMISSIONS = ("read", "write", "execute", "admin")


def token_of(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials is not None else None


def _summary(record: WorkspaceRecord, principal: Principal | None) -> WorkspaceSummary:
    venv = record.to_json().get("python_venv")
    permissions: list[str] = []
    if principal is not None and principal.chain:
        scope = effective(principal.chain)
        permissions = [p for p in PERMISSIONS if p in scope.permissions]
    return WorkspaceSummary(
        name=record.name, path=record.path, status=record.status, type=record.type,
        template=record.template, created=record.created_at, last_accessed=record.last_accessed,
        expires=record.expires_at, python_venv=venv if isinstance(venv, str) else None,
        permissions=permissions)


def _sandbox_info(app: App) -> SandboxInfo:
    from warden.core.policy import UNIX_PROTECTED

    settings = app.settings
    return SandboxInfo(allowed_commands=settings.get_list("sandbox.allowed_commands"),
                       blocked_paths=list(UNIX_PROTECTED) if settings.get_bool("sandbox.block_system_paths") else [],
                       max_file_size_mb=settings.get_int("sandbox.max_file_size_mb"))


def _create_workspace(app: App, request: WorkspaceRequest, actor: str) -> WorkspaceRecord:
    """Create the workspace the bot asked for, through the workspace service (type `bot`)."""
    params = request.params
    if params.template is not None and TemplateCatalog.is_file_ref(params.template):
        # A bot names a template; it never names a file. A path would let a bot point Warden at
        # a YAML file it wrote in its own workspace, and layers are built on the host.
        raise InvalidInput("params.template must be the name of an installed template "
                           "(`warden template list`), not a file path")
    limit = app.settings.get_int("api.max_workspaces_per_bot")
    owned = [w for w in app.workspaces.list() if w.created_by == actor]
    if len(owned) >= limit:
        # Each workspace costs disk and maybe a layer build: a bot's identity token alone must
        # not be able to fill the machine.
        raise Conflict(f"this bot already has {len(owned)} workspaces, the most it may "
                       "(api.max_workspaces_per_bot); delete one first")
    blob: bytes | None = None
    if params.project_blob:
        try:
            blob = base64.b64decode(params.project_blob, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("params.project_blob is not base64; send base64 of a tar.gz or zip") from None
    return app.workspaces.create(params.name, kind="bot", actor=actor, template=params.template,
                                 python=params.python, node=params.node, blob=blob)


def router(app: App) -> APIRouter:
    """The routes, bound to one App."""
    from warden.interfaces.http.running import ExecSlots, run_in_workspace

    api = APIRouter(responses=ERROR_RESPONSES)
    exec_slots = ExecSlots.from_settings(app)  # one bound for all of this server's execs

    @api.get("/v1/health", response_model=Health, tags=["meta"])
    async def health() -> Health:
        """Is the server up (no authentication)."""
        return Health(status="ok", version=_package_version())

    @api.get("/v1/whoami", response_model=WhoAmI, tags=["meta"])
    @threaded
    def whoami(token: Token) -> WhoAmI:
        """Who the presented token stands for, and what it allows."""
        with Call(app, "whoami", "token") as call:
            principal = call.authenticate(token_of(token))
            call.rule = "token.valid"
            if not principal.chain:
                return WhoAmI(bot=principal.bot, kind="bot")
            scope = effective(principal.chain)
            return WhoAmI(bot=principal.bot, kind="grant", accessor=principal.accessor,
                          workspace=principal.chain[0].workspace,
                          permissions=[p for p in PERMISSIONS if p in scope.permissions],
                          zones=list(scope.zones) if scope.zones is not None else None,
                          secrets=list(scope.secrets), expires=scope.expires.isoformat())

    @api.post("/v1/workspaces", response_model=WorkspaceCreated, status_code=201, tags=["workspaces"])
    @threaded
    def create_workspace(body: WorkspaceRequest, token: Token) -> WorkspaceCreated:
        """Seed 000's bot protocol: a bot, by its identity token, asks for a workspace."""
        with Call(app, "workspace.create", body.params.name) as call:
            presented = token_of(token) or (body.credentials.isaac_token if body.credentials else None)
            principal = call.authenticate(presented)
            if principal.kind != "bot":
                raise Denied("permission denied", rule="token.not_identity")
            if principal.bot != body.bot:
                raise Denied("permission denied", rule="token.bot_mismatch")
            call.rule = "bot.identity"
            if body.params.requirements:
                from warden.services.installs import check_packages

                check_packages(body.params.requirements, node=False)  # refused before anything is made
            record = _create_workspace(app, body, principal.actor)
            try:
                if body.params.requirements:
                    from warden.services.installs import InstallService

                    # Seed 000's `requirements`: installed in the sandbox, recorded in pyproject.toml.
                    InstallService(app).install(record.name, body.params.requirements, actor=principal.actor)
                    record = app.workspaces.get(record.name)
                issued = app.grants.grant(record.name, principal.bot, CREATOR_PERMISSIONS,
                                          actor=principal.actor)
            except BaseException:
                # All or nothing: a workspace whose requirements or grant failed is not left behind.
                app.workspaces.destroy(record.name, actor=principal.actor, archive=False)
                raise
            call.note(accessor=issued.grant.accessor, template=body.params.template)
            venv = record.meta.get("python_venv")
            return WorkspaceCreated(
                status="created",
                workspace=WorkspaceGrantInfo(name=record.name, path=record.path,
                                             venv=venv if isinstance(venv, str) else None,
                                             access_token=issued.token, accessor=issued.grant.accessor,
                                             expires=issued.grant.expires.isoformat()),
                sandbox=_sandbox_info(app))

    @api.get("/v1/workspaces", response_model=list[WorkspaceSummary], tags=["workspaces"])
    @threaded
    def list_workspaces(token: Token) -> list[WorkspaceSummary]:
        """The workspaces the caller holds a live grant on."""
        with Call(app, "workspace.list", "workspaces") as call:
            principal = call.authenticate(token_of(token))
            call.rule = "token.valid"
            names = ([principal.chain[0].workspace] if principal.chain else
                     sorted({g.workspace for g in app.grants.grants_of_bot(principal.bot)}))
            listed = []
            for name in names:
                try:
                    if principal.chain:
                        record = app.auth.authorize(principal, name, "read")
                        listed.append(_summary(record, principal))
                    else:
                        listed.append(_summary(app.workspaces.get(name), None))
                except (Denied, Unavailable):
                    continue
                except Exception:  # noqa: S112 (a workspace that vanished mid-listing is skipped)
                    continue
            return listed

    @api.get("/v1/workspaces/{name}", response_model=WorkspaceSummary, tags=["workspaces"])
    @threaded
    def get_workspace(name: WorkspaceName, token: Token) -> WorkspaceSummary:
        """One workspace (needs `read`)."""
        with Call(app, "workspace.get", name) as call:
            principal = call.authenticate(token_of(token))
            return _summary(call.authorize(name, "read"), principal)

    @api.delete("/v1/workspaces/{name}", response_model=WorkspaceDeleted, tags=["workspaces"])
    @threaded
    def delete_workspace(name: WorkspaceName, token: Token) -> WorkspaceDeleted:
        """Destroy a workspace and revoke every grant on it (needs `admin`)."""
        with Call(app, "workspace.destroy", name) as call:
            call.authenticate(token_of(token))
            call.authorize(name, "admin")
            revoked = app.grants.revoke_workspace(name, actor=call.actor)
            app.workspaces.destroy(name, actor=call.actor)
            return WorkspaceDeleted(name=name, destroyed=True, revoked=revoked)

    @api.post("/v1/workspaces/{name}/exec", response_model=RunResultBody, tags=["exec"])
    @threaded
    def exec_command(name: WorkspaceName, body: ExecRequest, token: Token) -> RunResultBody:
        """Run a command in the workspace's sandbox (needs `execute`); secrets the grant names are
        added to its environment."""
        with Call(app, "exec", name) as call:
            principal = call.authenticate(token_of(token))
            record = call.authorize(name, "execute", whole_workspace=True)
            result = run_in_workspace(app, call, principal, record, body, exec_slots)
            return RunResultBody(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                                 duration_s=round(result.duration_s, 6), timed_out=result.timed_out,
                                 signal=result.signal)

    @api.post("/v1/workspaces/{name}/grants", response_model=GrantIssued, status_code=201, tags=["grants"])
    @threaded
    def create_grant(name: WorkspaceName, body: GrantRequest, token: Token) -> GrantIssued:
        """Mint a child grant for another bot (needs `admin`); never wider than the caller's.

        The answer never says whether a bot of that name is registered (a child grant is made for
        any well-formed name; see GrantService.grant); its commands count against the caller's bot.
        """
        with Call(app, "grant.create", name) as call:
            principal = call.authenticate(token_of(token))
            call.authorize(name, "admin")
            issued = app.grants.grant(
                name, body.bot, list(body.permissions), zones=body.zones, secrets=list(body.secrets),
                ttl=parse_duration(body.ttl) if body.ttl else None,
                max_ttl=parse_duration(body.max_ttl) if body.max_ttl else None,
                actor=principal.actor, parent=list(principal.chain))
            call.note(accessor=issued.grant.accessor, bot=body.bot)
            grant = issued.grant
            return GrantIssued(token=issued.token, accessor=grant.accessor, expires=grant.expires.isoformat(),
                               max_expires=grant.max_expires.isoformat(), workspace=grant.workspace,
                               bot=grant.bot, permissions=[p for p in PERMISSIONS if p in grant.permissions],
                               zones=list(grant.zones) if grant.zones is not None else None,
                               secrets=list(grant.secrets), parent=grant.parent)

    @api.delete("/v1/workspaces/{name}/grants/{accessor}", response_model=Revoked, tags=["grants"])
    @threaded
    def revoke_grant(name: WorkspaceName, accessor: Accessor, token: Token) -> Revoked:
        """Revoke a grant the caller minted (at any depth) or its own (needs `admin`)."""
        with Call(app, "grant.revoke", name) as call:
            principal = call.authenticate(token_of(token))
            call.authorize(name, "admin")
            call.note(accessor=accessor)
            assert principal.accessor is not None
            if not app.grants.is_descendant(accessor, principal.accessor):
                raise Denied("permission denied", rule="grant.not_descendant")
            return Revoked(revoked=app.grants.revoke(name, accessor=accessor, actor=principal.actor))

    return api
