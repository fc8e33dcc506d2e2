"""Request and response bodies of the HTTP API (they are also its OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from warden.core.names import name_pattern

__all__ = [
    "ErrorBody",
    "ErrorDetail",
    "ExecNetwork",
    "ExecRequest",
    "FileDeleted",
    "FileEntry",
    "FileMove",
    "FileMoved",
    "FileWritten",
    "FilesResult",
    "GrantIssued",
    "GrantRequest",
    "Health",
    "InstallRequest",
    "InstallResultBody",
    "LogsDropped",
    "ProcessBody",
    "ProcessLogs",
    "ProcessStarted",
    "Revoked",
    "RunResultBody",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxNetwork",
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
PermissionName = Literal["read", "write", "execute", "secrets", "admin", "approve"]


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


class SandboxNetwork(BaseModel):
    default: Literal["none"] = Field(default="none", description="a command has no network unless it asks")
    domains: list[str] = Field(default_factory=list,
                               description='what one command may ask to reach with "network": {"allow": '
                                           '["host:port", ...]} (the grant\'s domains); empty: no network')


class SandboxLimits(BaseModel):
    timeout_s: float = Field(description="the longest a command may run (sandbox.timeout)")
    memory_bytes: int = Field(description="memory per command (sandbox.memory)")
    cpu_seconds: int = Field(description="CPU time per command (sandbox.cpu_seconds)")
    pids: int = Field(description="processes per command (sandbox.pids)")
    max_output_bytes: int = Field(description="output kept per stream (api.max_output)")


class SandboxInfo(BaseModel):
    allowed_commands: list[str] = Field(description="the only commands that run when allowlist is true; "
                                                    "empty when it is false (then any command runs)")
    blocked_paths: list[str]
    max_file_size_mb: int
    allowlist: bool = Field(False, description="whether commands are judged by allowed_commands (sandbox.enabled)")
    network: SandboxNetwork = Field(default_factory=lambda: SandboxNetwork(domains=[]))
    limits: SandboxLimits | None = None


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
    node: str | None = Field(None, description="the Warden node that holds it (requests for it are forwarded "
                                               "there); status `unreachable` while that node is down")


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
    domains: list[str] = Field(default_factory=list, description="what its commands may ask to reach")


# -- exec -------------------------------------------------------------------------------------
class ExecNetwork(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(max_length=64, description='hosts to reach, e.g. ["pypi.org:443"], each '
                                                         "within the domains the grant allows")


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cmd: list[str] = Field(min_length=1, max_length=4096, description="argv; never a shell string")
    timeout: float | None = Field(None, gt=0, le=86400, description="wall-clock seconds")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    stdin: str | None = Field(None, description="text fed to the command's standard input")
    cwd: str | None = Field(None, max_length=4096,
                            description="working folder: relative to the workspace, or absolute inside it")
    network: ExecNetwork | None = Field(None, description="network for this command only, within the "
                                                          "grant's domains; absent: none")
    background: bool = Field(False, description="start it in the background, in the live sandbox of this grant "
                                                "(its servers reach the grant's next commands on 127.0.0.1): "
                                                '202 {"id": ...}; see /processes')
    stream: bool = Field(False, description="answer application/x-ndjson as the output comes: "
                                            '{"type": "stdout"|"stderr", "data": TEXT} lines, then '
                                            '{"type": "exit", "exit_code", "timed_out", "signal", "duration_s"}')


class UsageBody(BaseModel):
    cpu_s: float | None = Field(None, description="CPU seconds (user + system) of the command and what it "
                                                  "reaped; null where not measured")
    memory_peak_bytes: int | None = Field(None, description="the highest memory use: of the whole run "
                                                            "(memory_measured 'cgroup') or its largest process "
                                                            "('process')")
    memory_measured: str | None = None
    measured_by: str | None = Field(None, description="'cgroup' (the run's cgroup: the whole tree) or 'rusage' "
                                                      "(wait4: CPU of all it reaped, memory of its largest process)")


class RunResultBody(BaseModel):
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    signal: int | None = None
    usage: UsageBody | None = Field(None, description="what the run used, where Warden could measure it")
    truncated: bool = Field(False, description="output past api.max_output per stream was dropped (a last stderr "
                                               "line says so too)")
    limits_via: str = Field("rlimit", description="how its memory and process limits held: 'cgroup memory:v1,pids:v1' "
                                                  "(or v2) where Warden could use cgroups, else 'rlimit'")
    seccomp: bool = Field(False, description="whether the syscall filter was in place")


# -- background processes ---------------------------------------------------------------------
class ProcessStarted(BaseModel):
    id: str = Field(description="the process's id (16 hex digits), for /processes/{id}")


class ProcessBody(BaseModel):
    id: str
    cmd: list[str]
    status: Literal["starting", "running", "exited", "killed", "lost"] = Field(
        description="exited: by itself; killed: by a signal, its timeout or its sandbox's stop; lost: its end "
                    "was never seen")
    exit_code: int | None = Field(None, description="as a shell says it: 124 timed out, 128+N killed by signal N")
    signal: int | None = None
    timed_out: bool = False
    started_at: str
    ended_at: str | None = None
    usage: UsageBody | None = Field(None, description="what it has used so far while it runs (its cgroup, else "
                                                      "its CPU from the host); null once ended (the audit's `run` "
                                                      "event has its outcome's) or where not measured")
    stopped_by: str | None = Field(None, description="why Warden stopped its live sandbox under it (a change of "
                                                     "the workspace's policy, a revoke…); absent otherwise")


class LogsDropped(BaseModel):
    stdout: int
    stderr: int


class ProcessLogs(BaseModel):
    id: str
    stdout: str
    stderr: str
    dropped: LogsDropped = Field(description="bytes the output rings no longer hold (the oldest go first)")


# -- install ----------------------------------------------------------------------------------
class InstallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    packages: list[str] = Field(min_length=1, max_length=100,
                                description="Python requirements (pandas>=2.1), or npm packages with node")
    node: bool = Field(False, description="npm packages into node_modules instead of Python ones into .venv")


class InstallResultBody(BaseModel):
    name: str
    packages: list[str]
    node: bool
    ok: bool
    exit_code: int
    recorded_in: str | None = Field(None, description="the manifest the packages were added to")


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
    # A directory of more entries than one answer holds: the `offset` that asks for the next ones.
    next_offset: int | None = None


class FileWritten(BaseModel):
    path: str
    size: int


class FileDeleted(BaseModel):
    path: str
    deleted: bool


class FileMove(BaseModel):
    """Rename a file or folder within the workspace; an existing destination is never replaced."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(min_length=1, max_length=4096, description="workspace-relative path to move")
    destination: str = Field(min_length=1, max_length=4096, description="its new workspace-relative path")


class FileMoved(BaseModel):
    source: str
    destination: str
    type: str


# -- grants -----------------------------------------------------------------------------------
class GrantRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bot: str = Field(pattern=NAME)
    permissions: list[PermissionName] = Field(min_length=1, max_length=6)
    zones: list[str] | None = Field(None, max_length=64,
                                    description="the zones the child gets, each NAME, NAME:ro or NAME:rw; "
                                                "[\"*\"]: all its parent has; null or []: none (a child "
                                                "gets what it declares)")
    secrets: list[str] = Field(default_factory=list, max_length=64)
    ttl: str | None = Field(None, pattern=DURATION, description="lifetime, e.g. 30m, 2h, 7d")
    max_ttl: str | None = Field(None, pattern=DURATION, description="immutable maximum lifetime")
    domains: list[str] = Field(default_factory=list, max_length=64,
                               description="what its commands may ask to reach, within the parent's")


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
    domains: list[str] = Field(default_factory=list)


class Revoked(BaseModel):
    revoked: list[str]


# -- approvals --------------------------------------------------------------------------------
class ApprovalView(BaseModel):
    id: str
    workspace: str
    operation: str
    path: str
    destination: str | None = None
    zone: str | None = None
    bot: str
    requester: str
    status: Literal["pending", "approving", "approved", "denied", "expired", "failed"]
    size: int | None = None
    sha256: str | None = None
    rule: str
    created: str
    expires: str
    answered_by: str | None = None
    answered_at: str | None = None
    note: str | None = None
    outcome: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None


class ApprovalBody(BaseModel):
    approval: ApprovalView


class PendingBody(ApprovalBody):
    """A request that now waits for a person: the approval and one line saying what to do."""

    message: str


class ApprovalList(BaseModel):
    approvals: list[ApprovalView]


class ApprovalAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(default=None, max_length=2000)
