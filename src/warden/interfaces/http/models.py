"""Request and response bodies of the HTTP API (they are also its OpenAPI schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from warden.core.names import name_pattern

__all__ = [
    "ErrorBody",
    "ErrorDetail",
    "ExecRequest",
    "FileDeleted",
    "FileEntry",
    "FileWritten",
    "FilesResult",
    "GrantIssued",
    "GrantRequest",
    "Health",
    "Revoked",
    "RunResultBody",
    "SandboxInfo",
    "WhoAmI",
    "WorkspaceCreated",
    "WorkspaceDeleted",
    "WorkspaceGrantInfo",
    "WorkspaceParams",
    "WorkspaceRequest",
    "WorkspaceSummary",
]

NAME = f"^{name_pattern()}$"
DURATION = r"^[0-9]{1,9}[smhdw]$"
PermissionName = Literal["read", "write", "execute", "secrets", "admin"]


class ErrorDetail(BaseModel):
    code: str = Field(description="stable error code: invalid, not_found, conflict, denied, locked, "
                                  "timeout, unavailable, internal")
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok"]
    version: str


# -- the bot protocol: a bot asks for a workspace ---------------------------------------------
class WorkspaceParams(BaseModel):
    name: str = Field(pattern=NAME, description="workspace name")
    python: str | None = Field(None, pattern=r"^[0-9]{1,2}\.[0-9]{1,3}$", description="Python version X.Y")
    node: str | None = Field(None, pattern=r"^[0-9]{1,3}$", description="Node.js major version")
    requirements: list[str] = Field(default_factory=list, max_length=200,
                                    description="Python packages to add to the workspace")
    template: str | None = Field(None, max_length=200)
    project_blob: str | None = Field(None, description="base64 of a project archive (tar.gz or zip)")


class Credentials(BaseModel):
    isaac_token: str | None = Field(None, description="the bot's identity token (prefer the Authorization header)")


class WorkspaceRequest(BaseModel):
    """The bot protocol's first message: a bot asks for a workspace."""

    bot: str = Field(pattern=NAME, description="the name of the bot asking (must match its token)")
    request: Literal["workspace"]
    params: WorkspaceParams
    credentials: Credentials | None = None


class WorkspaceGrantInfo(BaseModel):
    name: str
    path: str
    venv: str | None
    access_token: str = Field(description="a grant token for this workspace, shown once")
    accessor: str
    expires: str


class SandboxInfo(BaseModel):
    allowed_commands: list[str]
    blocked_paths: list[str]
    max_file_size_mb: int


class WorkspaceCreated(BaseModel):
    status: Literal["created"]
    workspace: WorkspaceGrantInfo
    sandbox: SandboxInfo


class WorkspaceSummary(BaseModel):
    name: str
    path: str
    status: str
    type: str
    template: str | None = None
    created: str
    last_accessed: str
    expires: str | None = None
    python_venv: str | None = None
    permissions: list[str] = Field(default_factory=list, description="what the caller's grant allows here")


class WorkspaceDeleted(BaseModel):
    name: str
    destroyed: bool
    revoked: list[str]


class WhoAmI(BaseModel):
    bot: str
    kind: Literal["bot", "grant"]
    accessor: str | None = None
    workspace: str | None = None
    permissions: list[str] = Field(default_factory=list)
    zones: list[str] | None = None
    secrets: list[str] = Field(default_factory=list, description="names only, never values")
    expires: str | None = None


# -- exec -------------------------------------------------------------------------------------
class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cmd: list[str] = Field(min_length=1, max_length=4096, description="argv; never a shell string")
    timeout: float | None = Field(None, gt=0, le=86400, description="wall-clock seconds")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    stdin: str | None = Field(None, description="text fed to the command's standard input")


class RunResultBody(BaseModel):
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    signal: int | None = None


# -- files ------------------------------------------------------------------------------------
class FileEntry(BaseModel):
    name: str
    path: str
    type: str = Field(description="file, directory, symlink or other")
    size: int
    mtime: float | None = None


class FilesResult(BaseModel):
    """A directory listing (`entries`) or one file's status (`entries` is null)."""

    path: str
    type: str
    size: int
    mtime: float | None = None
    entries: list[FileEntry] | None = None


class FileWritten(BaseModel):
    path: str
    size: int


class FileDeleted(BaseModel):
    path: str
    deleted: bool


# -- grants -----------------------------------------------------------------------------------
class GrantRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bot: str = Field(pattern=NAME)
    permissions: list[PermissionName] = Field(min_length=1, max_length=5)
    zones: list[str] | None = Field(None, max_length=64, description="null: every zone the parent covers")
    secrets: list[str] = Field(default_factory=list, max_length=64)
    ttl: str | None = Field(None, pattern=DURATION, description="lifetime, e.g. 30m, 2h, 7d")
    max_ttl: str | None = Field(None, pattern=DURATION, description="immutable maximum lifetime")


class GrantIssued(BaseModel):
    token: str = Field(description="the child grant's token, shown once")
    accessor: str
    expires: str
    max_expires: str
    workspace: str
    bot: str
    permissions: list[str]
    zones: list[str] | None
    secrets: list[str]
    parent: str | None


class Revoked(BaseModel):
    revoked: list[str]
