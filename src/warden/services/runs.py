"""Run a command in a workspace's sandbox: the one way Warden executes bot commands.

Order of a run: look up the workspace → limits (settings, then per-run overrides) → the
network decision → the working folder (`cwd`, opened beneath the workspace) → the command
allowlist when `sandbox.enabled` is on → the path policy (zones, allowed/denied paths,
protected files) → the disk quota → the run's lease, taken with
its intent in the registry → mount sources and git guards → the sandbox → one audit event,
written with the lease's release. Refusals happen before anything starts: each is a `Refused`
error (`warden run` exits 126) and, once the workspace is known to be ready, an audited deny.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from warden.core import stops
from warden.core.bwrap_argv import Bind
from warden.core.changes import run_summary
from warden.core.echo import echoed
from warden.core.errors import (
    Conflict,
    Denied,
    InvalidInput,
    Locked,
    NotFound,
    Refused,
    Terminated,
    Unavailable,
    WardenError,
)
from warden.core.leases import ENDING_OPS
from warden.core.limits import Limits, apply_overrides
from warden.core.paths import is_inside
from warden.core.runs import (
    NO_NETWORK_ENV,
    NetEvent,
    RunResult,
    SandboxRequest,
    Sink,
    StoppedAsItStarted,
    explain_denied_path,
    explain_failure,
    workspace_cwd,
)
from warden.services.audit import unaudited
from warden.services.runs_in_progress import RunIntent, RunsInProgress

if TYPE_CHECKING:
    from warden.core.live import ProcessView
    from warden.core.network import NetworkPolicy
    from warden.core.policy import EffectivePaths
    from warden.core.ports import GitGuard, GitGuards, MountSources, Registry, SafeRoots, SandboxRunner, Tx
    from warden.core.settings import Settings
    from warden.core.workspaces import WorkspaceRecord
    from warden.services.audit import AuditLog
    from warden.services.leases import Lease, LeaseService
    from warden.services.live import Busy, LiveSandboxService
    from warden.services.quota import QuotaService
    from warden.services.sandbox_paths import SandboxPaths
    from warden.services.workspaces import WorkspaceService

__all__ = ["RunOutput", "RunRequest", "RunService", "RunSettings"]

_SYSTEM_BINS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_MOVED_SHOWN = 10  # quarantined paths named in a run's note; the audit has them all
_SHOWN_REFUSALS = 100  # network refusals named on a run's stderr


@dataclass(frozen=True)
class RunSettings:
    """The settings a run is judged by."""

    limits: Limits  # sandbox.memory, cpu_seconds, pids, open_files, max_file_size_mb, timeout
    network: bool  # network.enabled: what a run without --net gets
    allowed_domains: tuple[str, ...]  # network.allowed_domains
    denied_domains: tuple[str, ...]  # network.denied_domains
    check_commands: bool  # sandbox.enabled: judge commands by the allowlist
    allowed_commands: tuple[str, ...]  # sandbox.allowed_commands
    max_file_mb: int  # sandbox.max_file_size_mb, named when a file reached it
    # The person's TLS trust (SSL_CERT_FILE, PIP_CERT, ... and uv's system certificates): the
    # variables and the certificate files and folders they name, given to runs with network only.
    trust_env: Mapping[str, str] = field(default_factory=dict)
    trust_paths: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, s: Settings) -> RunSettings:
        limits = Limits(memory=s.get_size("sandbox.memory"), cpu_seconds=s.get_int("sandbox.cpu_seconds"),
                        pids=s.get_int("sandbox.pids"), open_files=s.get_int("sandbox.open_files"),
                        file_size=s.get_int("sandbox.max_file_size_mb") * 1024 * 1024,
                        timeout_s=s.get_seconds("sandbox.timeout"))
        return cls(limits, s.get_bool("network.enabled"), tuple(s.get_list("network.allowed_domains")),
                   tuple(s.get_list("network.denied_domains")), s.get_bool("sandbox.enabled"),
                   tuple(s.get_list("sandbox.allowed_commands")), s.get_int("sandbox.max_file_size_mb"))


# The environment a background process gets unless its request sets these itself.
_BACKGROUND_ENV = {"PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class RunRequest:
    """One command to run in a workspace's sandbox, as a front end asks for it."""

    workspace: str
    argv: Sequence[str]
    timeout: float | None = None  # these four override the settings' limits for this run
    memory: str | int | None = None
    cpu: int | None = None
    pids: int | None = None
    net: str | None = None  # "none" or "allow" (None: network.enabled decides)
    allow_domains: Sequence[str] = ()  # reachable with net "allow", besides network.allowed_domains
    # A bot's command: the domains its grant allows. With net "allow" it then reaches exactly
    # `allow_domains`, each within them, never network.allowed_domains; and a loopback or private
    # address only through an entry the grant names with its port (NetworkPolicy.within_grant).
    grant_domains: Sequence[str] | None = None
    cwd: str | None = None  # the working folder: relative to the workspace, or absolute inside it
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes | str | int | None = None  # bytes or text to feed, or a descriptor to pass on
    # The slave of a pseudo-terminal whose master the front end relays (`warden shell`, the PTY
    # WebSocket): the command's stdin, stdout, stderr and controlling terminal; stdin is ignored.
    terminal: int | None = None
    session: str | None = None  # apply this session's path lists too
    ro_paths: Sequence[str] = ()  # more read-only paths (an install's package folders)
    actor: str = "user"
    max_output: int | None = None  # captured bytes kept per stream (None: the runner's cap)
    mcp: bool = False  # a bot's MCP call: Warden's last line names what it may do there


@dataclass(frozen=True)
class RunOutput:
    """Where a run's output goes as it comes. Warden's own lines (network refusals, why a
    command failed) go to `on_notice`, or to `on_stderr` without one."""

    on_stdout: Sink | None = None
    on_stderr: Sink | None = None
    on_notice: Sink | None = None
    capture: bool = True  # keep the output in the result too
    # Called once the command runs, with a function that kills its whole tree from any thread
    # (a front end whose client went away stops the command with it).
    on_started: Callable[[Callable[[], None]], None] | None = None
    # Whether `on_stdout` / `on_stderr` may block (a terminal held by Ctrl-S, a pipe its reader
    # left full). A runner that waits on its command calls them from the loop that could keep the
    # disk quota's watch: a blocked sink would hold that watch too while a child writes on, so
    # the watch then keeps its own thread. Front ends whose sinks only queue say False.
    may_block: bool = True

    @property
    def notice(self) -> Sink | None:
        return self.on_notice or self.on_stderr


@dataclass(frozen=True)
class _Plan:
    """A run judged allowed: where, within which limits, with which network and paths."""

    record: WorkspaceRecord
    folder: str  # the workspace folder, links resolved
    limits: Limits
    network: NetworkPolicy | None
    binds: list[Bind]  # allowed paths, not yet opened
    ro_zones: list[str]
    keep_zones: list[str]
    closed_zones: list[str]  # zones the file API refuses to write too (ro, or writes blocked)
    denied: list[str]
    protected: list[str]
    skipped: list[str]  # allowed paths never mounted, with why
    detail: dict[str, Any]  # the audit detail every event of the run carries
    cwd: str | None = None  # the working folder, absolute (None: the workspace)
    policy: EffectivePaths | None = None  # the path policy's answer the plan was made from


@dataclass(frozen=True)
class _Watched:
    """What the disk quota's watch over a run saw."""

    note: str | None  # the line a run the quota stopped ends with
    breach: str | None  # the setting it broke (workspace.max_disk, ...)
    notes: tuple[str, ...]  # how the watch went (held by rescans, a failed watcher)
    changes: dict[str, Any] | None = None  # what the run changed (core.changes.run_summary)


@dataclass
class _Mounts:
    """What the sandbox mounts beyond the plan: the opened allowed paths and the git guards."""

    binds: list[Bind]
    bind_fds: list[tuple[str, int]]
    protected: list[str]
    guards: list[tuple[str, GitGuard]]  # (folder, its guard); "" is the workspace itself


class _Notes:
    """Warden's own lines on a run's stderr: shown as they come (from any thread) and kept."""

    def __init__(self, notice: Sink | None) -> None:
        self._notice = notice
        self._lock = threading.Lock()
        self.kept: list[str] = []
        # The proxy's first refusal, said again last when the command failed: it was shown as it
        # came, above the program's own error (a 40-line traceback), and was no "last line".
        self.first_refusal: str | None = None

    def show(self, text: str) -> None:
        if self._notice is not None:
            self._notice(text.encode())

    def say(self, line: str) -> None:
        with self._lock:
            self.kept.append(line + "\n")
        self.show(line + "\n")


class RunService:
    """Runs commands in workspace sandboxes and audits every run."""

    def __init__(self, *, registry: Registry, audit: AuditLog, workspaces: WorkspaceService,
                 leases: LeaseService, quota: QuotaService, paths: SandboxPaths, settings: RunSettings,
                 sandbox: SandboxRunner, records: RunsInProgress, git: GitGuards, mounts: MountSources,
                 roots: SafeRoots, programs: Callable[[str], Collection[str]],
                 live: Callable[[bool], LiveSandboxService | None] | None = None) -> None:
        self._registry = registry
        self._audit = audit
        self._workspaces = workspaces
        self._leases = leases
        self._quota = quota
        self._paths = paths
        self.settings = settings
        self._sandbox = sandbox
        self._records = records
        self._git = git
        self._mounts = mounts
        self._roots = roots
        # The names on a workspace's sandbox PATH (adapters/sandbox/host.programs_on_path), read
        # only after a command was not found, for a "did you mean".
        self._programs = programs
        # Live sandboxes (services/live.py): background processes, and the foreground commands of a
        # principal whose live sandbox runs. `live(False)` is None when none can be running here
        # (nothing of them is even imported then); `live(True)` always gives the service.
        self._live = live

    # -- inputs --------------------------------------------------------------------------
    def network_policy(self, net: str | None, allow_domains: Sequence[str], *,
                       grant_domains: Sequence[str] | None = None) -> NetworkPolicy | None:
        """None for no network; the parsed allowlist otherwise: with network.allowed_domains for
        the person, or for a bot (`grant_domains`) `allow_domains` alone, within its grant."""
        from warden.core.network import NetworkPolicy

        mode = net or ("allow" if self.settings.network else "none")
        if mode not in ("none", "allow"):
            raise InvalidInput(f"bad --net {mode!r}: use none or allow")
        if mode == "none":
            if allow_domains:
                raise InvalidInput("--allow-domain needs --net allow")
            return None
        if grant_domains is not None:
            if not allow_domains:
                raise InvalidInput("name the hosts the command may reach")
            return NetworkPolicy.within_grant(allow_domains, grant_domains, self.settings.denied_domains)
        allowed = [*self.settings.allowed_domains, *allow_domains]
        if not allowed:
            raise InvalidInput("--net allow needs at least one --allow-domain DOMAIN "
                               "(or network.allowed_domains in the settings)")
        return NetworkPolicy.parse(allowed, self.settings.denied_domains)

    # -- the run -------------------------------------------------------------------------
    def run(self, name: str, argv: Sequence[str], *, timeout: float | None = None,
            memory: str | int | None = None, cpu: int | None = None, pids: int | None = None,
            net: str | None = None, allow_domains: Sequence[str] = (),
            env: Mapping[str, str] | None = None, stdin: bytes | str | int | None = None,
            actor: str = "user", session: str | None = None, ro_paths: Sequence[str] = (),
            max_output: int | None = None, within: Lease | None = None, cwd: str | None = None,
            grant_domains: Sequence[str] | None = None, terminal: int | None = None,
            output: RunOutput | None = None, on_end: Callable[[Tx, RunResult], None] | None = None,
            mcp: bool = False, read: WorkspaceRecord | None = None) -> RunResult:
        """`execute` with the request spelled as keywords (its output captured, unless `output`
        says where it goes). `read`: the workspace's row as the caller just read it (see `execute`)."""
        request = RunRequest(name, argv, timeout=timeout, memory=memory, cpu=cpu, pids=pids, net=net,
                             allow_domains=allow_domains, env=env or {}, stdin=stdin, session=session,
                             ro_paths=ro_paths, actor=actor, max_output=max_output, cwd=cwd,
                             grant_domains=grant_domains, terminal=terminal, mcp=mcp)
        return self.execute(request, output, within=within, on_end=on_end, read=read)

    def execute(self, request: RunRequest, output: RunOutput | None = None, *,
                within: Lease | None = None, on_end: Callable[[Tx, RunResult], None] | None = None,
                read: WorkspaceRecord | None = None) -> RunResult:
        """Run `request` in its workspace's sandbox; the command's status, output and timing.
        `within`: an exclusive lease on the workspace the caller holds (repair reinstalling
        packages), under which the run goes instead of taking a shared one. `on_end(tx, outcome)`:
        the caller's own writes, in the transaction that records the outcome of a command that ran.
        `read`: the workspace's row the caller read for this very request (a bot's grant check):
        judged as it is instead of read again a moment later in a transaction of its own; the
        run's intent checks the row again under the lease either way (RunsInProgress.begin)."""
        output = output or RunOutput()
        _check_argv(request.argv)
        plan = self._judge(self._ready_workspace(request.workspace, read), request)
        intent = RunIntent(os.urandom(8).hex(), plan.record, request.actor, list(request.argv), plan.detail)
        plan.detail["run_id"] = intent.run_id
        intent.ended = on_end
        notes = _Notes(output.notice)
        with contextlib.ExitStack() as held:
            self._hold_lease(held, intent, within)
            mounts = self._mount(held, plan, intent, notes)
            try:
                result, watched = self._sandboxed(plan, request, output, mounts, notes, intent=intent)
            except BaseException as exc:
                # Its person stopped it (Ctrl-C, a termination signal): the sandbox ended the
                # command as this unwinds, and the outcome says so, given back with the lease.
                _stopped(intent, exc)
                raise
            return self._conclude(plan, request, intent, result, watched, notes)

    def start(self, request: RunRequest, *, bot: str = "", busy: Busy | None = None) -> ProcessView:
        """Start `request`'s command in the background, in the live sandbox of its workspace,
        principal (`request.actor`) and network (started when none runs), and return at once.

        Judged, leased, mounted and refused (126) exactly as a run; its intent is audited as a
        run's (`run.start`, `background: true`), its outcome once it ends (services/live.py).
        `bot`: the bot whose API exec slots it takes ("" for the person's); `busy(bot)` gives the
        front end's own foreground commands (all, the bot's), counted with it, none admitted
        until the process is recorded."""
        live = self._live(True) if self._live is not None else None
        if live is None:
            raise Refused.of(Unavailable("this Warden runs no live sandboxes, so no background processes"))
        if request.terminal is not None:
            raise Refused.of(InvalidInput("a background process has no terminal; start it without one"))
        _check_argv(request.argv)
        # Its output is read later from its logs, through a pipe: Python buffers what it prints to
        # a pipe in 8 KiB blocks, and a dev server's "Serving HTTP on ..." never showed in
        # `warden logs` until it had printed 8 KiB more (or exited). Unless the command's own
        # environment says otherwise.
        request = dataclasses.replace(request, env={**_BACKGROUND_ENV, **request.env})
        plan = self._judge(self._ready_workspace(request.workspace), request)
        intent = RunIntent(os.urandom(8).hex(), plan.record, request.actor, list(request.argv), plan.detail)
        plan.detail["run_id"] = intent.run_id
        plan.detail["background"] = True
        notes = _Notes(None)
        starter = live.starter(plan.record, request.actor, intent.run_id, bot=bot, busy=busy,
                               on_recorded=lambda: setattr(intent, "handed_over", True))
        with contextlib.ExitStack() as held:
            self._hold_lease(held, intent, None)
            mounts = self._mount(held, plan, intent, notes)
            self._sandboxed(plan, request, RunOutput(capture=False), mounts, notes, runner=starter)
        return starter.started()

    def _ready_workspace(self, name: str, read: WorkspaceRecord | None = None) -> WorkspaceRecord:
        try:
            record = read if read is not None and read.name == name else self._workspaces.get(name)
        except (Locked, Unavailable, NotFound) as exc:
            # No such workspace, or the registry is locked or lost: the command never starts
            # (126 whatever the reason; the code says which).
            raise Refused.of(exc) from None
        if record.status != "ready":
            fix = {"archived": f"`warden unarchive {name}` brings it back",
                   "suspended": f"`warden resume {name}` reopens it"}.get(
                       record.status, f"`warden health {name} --repair` makes it ready")
            raise Refused.of(Conflict(f"workspace {name!r} is {record.status} and cannot run commands; {fix}"))
        return record

    def _judge(self, record: WorkspaceRecord, request: RunRequest) -> _Plan:
        """The limits, network and paths of the run, or a refusal (audited): the command
        allowlist, a workspace under a denied path, a nearly full disk."""
        name, argv, env = record.name, request.argv, request.env
        limits = apply_overrides(self.settings.limits, timeout=request.timeout, memory=request.memory,
                                 cpu=request.cpu, pids=request.pids)
        try:
            network = self.network_policy(request.net, request.allow_domains, grant_domains=request.grant_domains)
        except Denied as exc:  # a bot asking beyond its grant (its front end refuses this first)
            raise self._refuse(exc, request.actor, name, {"argv": list(argv)}) from None
        if os.path.islink(record.path.rstrip("/") or "/"):
            # Its path is resolved to be mounted: a link put in place of the workspace folder ran
            # the command in the folder the link named, while the file API (which opens the folder
            # with no link followed) refused it.
            raise self._refuse(Denied(f"the folder of workspace {name} is a symbolic link; Warden runs commands "
                                      f"only in a real folder (`warden health {name}` says what is wrong)",
                                      rule="deny: symbolic link"), request.actor, name, {"argv": list(argv)})
        folder = os.path.realpath(record.path)
        detail: dict[str, Any] = {"argv": list(argv), "limits": limits.to_json(),
                                  "network": network.to_json() if network else "none", "env_keys": sorted(env.keys())}
        cwd = None
        if request.cwd is not None:
            detail["cwd"] = request.cwd
            cwd = self._working_folder(request.cwd, folder, request.actor, name, detail)
        if self.settings.check_commands:
            from warden.core.commands import check_command

            decision = check_command(argv, self.settings.allowed_commands,
                                     trusted_dirs=[*_SYSTEM_BINS, f"{folder}/.venv/bin",
                                                   f"{folder}/node_modules/.bin"],
                                     cwd=cwd or folder, env=env)
            if not decision.allowed:
                raise self._refuse(Denied(f"{decision.reason} (rule {decision.rule})", rule=decision.rule),
                                   request.actor, name, detail)
        try:  # the path lists and zones as they are on disk: a broken file refuses the run, saying which
            plan = self._path_plan(record, request.session, folder, limits, network, detail)
        except InvalidInput as exc:
            raise self._refuse(exc, request.actor, name, detail, rule=exc.rule or "paths.invalid") from None
        covering = [d for d in plan.denied if is_inside(folder, d)]
        if covering:
            # Every file of the workspace is denied (fs and `sandbox check` say so): running in it
            # would mean running in an empty, unusable folder, so refuse the way fs does.
            raise self._refuse(Denied(f"workspace {name!r} lies under the denied path {covering[0]}; `warden "
                                      f"sandbox list --workspace {name}` shows where it is denied",
                                      rule="paths.denied"), request.actor, name, detail)
        hidden = [d for d in plan.denied if cwd is not None and is_inside(cwd, d)]
        if hidden:
            raise self._refuse(InvalidInput(f"cwd {request.cwd!r} lies under the denied path {hidden[0]}, which "
                                            "the sandbox hides; give another folder"), request.actor, name, detail,
                               rule="run.cwd")
        try:  # the disk quota (services/quota.py): nothing starts when the home's disk is nearly full
            self._quota.check_free()
        except Unavailable as exc:
            raise self._refuse(exc, request.actor, name, detail, result="unavailable", rule=exc.rule or "") from None
        return dataclasses.replace(plan, cwd=cwd)

    def _working_folder(self, cwd: str, folder: str, actor: str, name: str, detail: Mapping[str, Any]) -> str:
        """The run's working folder, absolute: `cwd` judged lexically (core.runs.workspace_cwd),
        then opened beneath the workspace by descriptor with no link followed, and a folder.

        bwrap changes into it by path once inside the sandbox, where the path resolves only within
        what the sandbox shows, so a folder a command swaps for a link afterwards leads nowhere new.
        Any refusal is one line with code `invalid`, audited (`warden run` exits 126).
        """
        try:
            rel = workspace_cwd(cwd, folder)
            if rel != "/":
                try:
                    with self._roots.open(folder) as root:
                        kind = root.stat(rel).type
                except WardenError as exc:
                    why = ("goes through a symbolic link; give the folder the link points to"
                           if isinstance(exc, Denied) or "link" in exc.message else
                           "is not a folder of the workspace (nothing there); make it first"
                           if isinstance(exc, NotFound) else f"cannot be opened ({exc.message})")
                    raise InvalidInput(f"cwd {cwd!r} {why}") from None
                if kind != "dir":
                    what = "a symbolic link" if kind == "symlink" else f"a {kind}"
                    raise InvalidInput(f"cwd {cwd!r} is {what}, not a folder; give a folder of the workspace")
        except InvalidInput as exc:
            raise self._refuse(exc, actor, name, detail, rule="run.cwd") from None
        return folder if rel == "/" else folder + rel

    def _path_plan(self, record: WorkspaceRecord, session: str | None, folder: str, limits: Limits,
                   network: NetworkPolicy | None, detail: dict[str, Any]) -> _Plan:
        """Zones, allowed and denied paths from the path policy (services/sandbox_paths)."""
        eff = self._paths.effective(record, session)
        binds: list[Bind] = []
        skipped: list[str] = []
        for path, mode in eff.allowed:
            if any(is_inside(path, root) for root in eff.system_blocked):
                continue
            # An allowed path that would show Warden's own state (a hand-edited `/`, say) is never
            # mounted; `sandbox add` refuses such paths in the first place. This is the check by
            # name; the one by inode is made when the path is opened for the mount.
            why = self._paths.exposure(path)
            if why is None:
                binds.append(Bind(path, mode))
            else:
                skipped.append(f"{path} ({why})")
        return _Plan(record, folder, limits, network, binds,
                     ro_zones=[z.host_path for z in eff.zones if z.read_only_in_runs],
                     closed_zones=[z.host_path for z in eff.zones if z.closed_to_writes],
                     keep_zones=[z.host_path for z in eff.zones if z.kept_in_runs], denied=list(eff.denied),
                     protected=list(eff.readonly), skipped=skipped, detail=detail, policy=eff)

    def _mount(self, held: contextlib.ExitStack, plan: _Plan, intent: RunIntent, notes: _Notes) -> _Mounts:
        """Allowed paths opened by descriptor (no link followed, judged by inode against Warden's
        state, mounted by that descriptor), and the git guards of the folders the run may write:
        the person's git control structures are bound read-only, and what a bot leaves is moved
        aside after the run (and, if this process dies first, before the next one)."""
        name, folder = plan.record.name, plan.folder
        binds, fds, skipped = held.enter_context(self._mounts.open_binds(plan.binds, folder))
        mounts = _Mounts(list(binds), list(fds), list(plan.protected), [])
        opened = dict(fds)
        # The person's repositories in allowed read-write folders are theirs too.
        for bind in binds:
            if bind.mode != "rw" or bind.path not in opened:
                continue
            guard = self._git.allowed_folder(bind.path, opened[bind.path], folder)
            for rel in guard.before(bot_active=intent.others).protected:
                fd = held.enter_context(self._mounts.open_beneath(opened[bind.path], rel))
                if fd is not None:
                    mounts.binds.append(Bind(f"{bind.path}/{rel}", "ro"))
                    mounts.bind_fds.append((f"{bind.path}/{rel}", fd))
            mounts.guards.append((bind.path, guard))
        skipped = [*plan.skipped, *skipped]
        for line in skipped:
            notes.show(f"warden: not mounting the allowed path {line}\n")
        if skipped:
            plan.detail["skipped_paths"] = skipped
        guard = self._git.workspace(folder)
        git = guard.before(bot_active=intent.others)
        self._report_quarantine(git.quarantined, intent.actor, name, notes)
        mounts.protected += [f"{folder}/{p}" for p in git.protected]
        mounts.guards.insert(0, ("", guard))
        return mounts

    def _sandboxed(self, plan: _Plan, request: RunRequest, output: RunOutput, mounts: _Mounts,
                   notes: _Notes, *, runner: SandboxRunner | None = None,
                   intent: RunIntent | None = None) -> tuple[RunResult, _Watched]:
        """The command run in the sandbox under the disk quota's watch, then the git sweep; a
        sandbox that cannot start (or a mount source that became a link) is a refusal. `runner`:
        where it runs (a background process's starter); else the principal's live sandbox when
        one runs, or a fresh sandbox."""
        name = plan.record.name
        if runner is None:
            # A bot's commands go to its live sandbox, started by the first: each later one then
            # costs a spawn in it rather than a whole new sandbox (as in E2B or Daytona). A person's
            # `warden run` uses theirs only while one runs (a detached server), else a fresh one.
            keep = request.actor.startswith("bot:")
            live = self._live(keep) if self._live is not None else None
            runner = self._sandbox
            if live is not None:
                from warden.services.live import Seen

                seen = Seen(intent.sandboxes, intent.fence, intent.chain) if intent is not None \
                    and intent.sandboxes is not None and intent.fence is not None else None
                runner = live.runner(plan.record, request.actor, self._sandbox, start=keep, seen=seen)

        refusals = itertools.count(1)

        def on_net_event(event: NetEvent) -> None:
            # A command may ask again and again: its first refusals are shown, not a line for each.
            if event.allowed:
                return
            seen = next(refusals)
            if seen <= _SHOWN_REFUSALS:
                where = f"[{event.host}]" if ":" in event.host else event.host  # an IPv6 address, as a URL has it
                if notes.first_refusal is None:
                    notes.first_refusal = f"{event.method} {where}:{event.port}: {event.reason}"
                notes.say(f"warden: network refused {event.method} {where}:{event.port}: {event.reason}")
            elif seen == _SHOWN_REFUSALS + 1:
                notes.say(f"warden: more than {_SHOWN_REFUSALS} network refusals in this run; the rest are not shown")

        stdin = request.stdin.encode() if isinstance(request.stdin, str) else request.stdin
        env, ro_paths = dict(request.env), [*request.ro_paths, *_layer_paths(plan.record)]
        if plan.network is not None:
            # The person's TLS trust reaches commands with network, read-only: what their own pip,
            # uv and npm trust (a TLS-intercepting network's authority). The run's variables win.
            env = {**self.settings.trust_env, **env}
            ro_paths += [p for p in self.settings.trust_paths if self._paths.exposure(p) is None
                         and not any(is_inside(p, d) for d in plan.denied)]
        else:
            env = {**NO_NETWORK_ENV, **env}  # pip and npm fail at once rather than retry for a minute
        try:
            try:
                # The disk quota watches the workspace while the command runs; no single file may
                # pass the bytes left (RLIMIT_FSIZE).
                with self._quota.watch(plan.folder) as watcher:
                    result = runner.run(SandboxRequest(
                        plan.folder, tuple(request.argv), self._quota.capped(plan.limits, watcher.start),
                        cwd=plan.cwd, env=env, ro_paths=tuple(ro_paths),
                        binds=tuple(mounts.binds), bind_fds=tuple(mounts.bind_fds), ro_zones=tuple(plan.ro_zones),
                        keep_zones=tuple(plan.keep_zones),
                        denied=tuple(plan.denied), protected=tuple(mounts.protected), network=plan.network,
                        stdin=stdin, on_stdout=output.on_stdout, on_stderr=output.on_stderr,
                        capture=output.capture, max_capture=request.max_output, on_net_event=on_net_event,
                        on_started=_both(watcher.arm, output.on_started), terminal=request.terminal,
                        watch=None if output.may_block and (output.on_stdout or output.on_stderr) else watcher,
                        policy_session=request.session, policy=plan.policy))
            finally:
                moved = [f"{where}/{path}" if where else path
                         for where, guard in mounts.guards for path in guard.after().quarantined]
            self._report_quarantine(moved, request.actor, name, notes)
        except StoppedAsItStarted as exc:
            # The stop that claimed the process audited its outcome (killed, with why): one per run.
            raise Refused.of(exc) from None
        except Unavailable as exc:
            ended = self._ended_as_it_started(name) if exc.rule == "sandbox.setup_failed" else None
            if ended is not None:
                raise self._refuse(ended, request.actor, name, plan.detail) from None
            raise self._refuse(exc, request.actor, name, plan.detail, result="unavailable",
                               rule=exc.rule or "sandbox.unavailable") from None
        except Denied as exc:  # a protected path became a link between the check and the mount
            raise self._refuse(exc, request.actor, name, plan.detail) from None
        note = self._quota.stop_note(watcher, name, result.exit_code)
        # The quota's watcher saw every change the command made: the audit event sums them up.
        changes = run_summary(watcher.changes) if watcher.changes is not None else None
        return result, _Watched(note, watcher.breach, tuple(watcher.notes), changes)

    def _conclude(self, plan: _Plan, request: RunRequest, intent: RunIntent, result: RunResult,
                  watched: _Watched, notes: _Notes) -> RunResult:
        """Warden's last words on the run (the quota that stopped it, why it failed, who killed
        it) and the result; the outcome is audited as the lease is given back."""
        name, detail = plan.record.name, plan.detail
        if watched.notes:
            detail["quota_notes"] = list(watched.notes)
        if watched.changes is not None:
            detail["changes"] = watched.changes
        if watched.note is not None:
            detail["stopped_by"] = str(watched.breach)
            notes.say(watched.note)
        if result.exit_code != 0 and watched.note is None:
            why = explain_failure(result.exit_code, result.signal, result.stderr_tail,
                                  oom_killed=result.oom_killed, network=plan.network is not None,
                                  max_file_mb=self.settings.max_file_mb, memory=plan.limits.memory,
                                  bot=request.actor.startswith("bot:"), pids=plan.limits.pids,
                                  cpu_seconds=plan.limits.cpu_seconds,
                                  programs=self._programs(plan.record.path) if result.exit_code == 127 else (),
                                  given_path=request.env.get("PATH"), workspace=name, mcp=request.mcp,
                                  read_only_folders=[os.path.relpath(zone, plan.record.path)
                                                     for zone in plan.ro_zones],
                                  closed_folders=[os.path.relpath(zone, plan.record.path)
                                                  for zone in plan.closed_zones],
                                  kept_folders=[os.path.relpath(zone, plan.record.path)
                                                for zone in plan.keep_zones],
                                  program=request.argv[0] if request.argv else None)
            if why is None and plan.denied and not request.actor.startswith("bot:"):
                why = explain_denied_path(result.stderr_tail, plan.denied, workspace=name, session=request.session,
                                          levels=plan.policy.denied_levels if plan.policy is not None else ())
            if why is None and notes.first_refusal is not None:
                why = f"warden: the sandbox's proxy refused this command's network request ({notes.first_refusal})"
            if why is not None:
                notes.say(why)
        stopper = self._stopped_by(name, result.signal) if watched.note is None else None
        if stopper is not None:
            detail["stopped_by"] = stopper
            notes.say(f"warden: the command was stopped by {stopper}")
        elif result.ended_by is not None and watched.note is None:
            detail["stopped_by"] = result.ended_by
            notes.say(f"warden: the command was stopped: {result.ended_by}")
        intent.outcome = result
        stderr = result.stderr + "".join(notes.kept)
        if result.truncated:
            limit = f"{request.max_output} bytes" if request.max_output is not None else "the capture limit"
            stderr += f"\nwarden: output beyond {limit} per stream was dropped\n"
        return dataclasses.replace(result, stderr=stderr, stopped_by=watched.breach)

    def _refuse(self, exc: WardenError, actor: str, name: str, detail: Mapping[str, Any], *,
                result: str = "refused", rule: str | None = None) -> Refused:
        """Audit a run Warden did not start; `exc` as a refusal (`warden run` exits 126).
        A refusal that cannot be audited (the disk full, as what refused it often is) is still
        one: the command never started, so it exits 126 saying why the audit failed."""
        try:
            self._audit.record(actor=actor, action="run", target=name, decision="deny",
                               rule=rule if rule is not None else exc.rule or "sandbox", result=result,
                               detail=dict(detail))
        except WardenError as failed:
            return Refused.of(failed)
        return Refused.of(exc)

    # -- the lease and the registry ------------------------------------------------------------
    def _hold_lease(self, held: contextlib.ExitStack, intent: RunIntent, within: Lease | None) -> None:
        held.push(_still_refused)  # first in, so last out: it sees what giving the lease back raised
        try:
            held.enter_context(self._lease(intent, within))
        except (Locked, Unavailable, Conflict, Denied) as exc:
            # A lifecycle change holds (or changed) the workspace, or the intent could not be
            # recorded (a full disk, a locked registry): nothing runs without its audit row.
            ruled = isinstance(exc, Locked) and (exc.rule or "").startswith(("lock.", "lease."))
            if ruled or isinstance(exc, Denied):
                # A decision by a rule (another terminal's lock, an archive holding the
                # workspace, a bot's grant revoked meanwhile) is audited as every refused run
                # is: a person's `warden run` refused by a lock left no trace. A locked registry
                # or a full disk would refuse its row too.
                raise self._refuse(exc, intent.actor, intent.record.name, intent.detail) from None
            raise Refused.of(exc) from None

    @contextlib.contextmanager
    def _lease(self, intent: RunIntent, within: Lease | None) -> Iterator[None]:
        """The run's shared lease with its intent and outcome written as it is taken and given
        back; under a caller's exclusive lease, the same writes in transactions of their own."""
        name = intent.record.name
        if within is None:
            def take(tx: Tx, lease: Lease) -> None:
                intent.fence = lease.fence
                self._records.begin(tx, intent)
                # (A bot's grant chain is read in `begin`: what its live sandbox is checked against.)

            def release(tx: Tx, ended: BaseException | None) -> None:
                _stopped(intent, ended)
                self._records.end(tx, intent)

            with (_outcome_written(intent) as ran,
                  self._leases.hold(name, "shared", "run", on_take=take, on_release=release)):
                yield
                ran.out = True
            return
        if within.workspace != name or within.mode != "exclusive":
            raise InvalidInput(f"a run in {name!r} can only go under that workspace's exclusive lease")
        with self._registry.transaction() as tx:
            self._leases.check(tx, within)
            intent.fence = within.fence
            self._records.begin(tx, intent)
        with _outcome_written(intent) as ran:
            try:
                yield
                ran.out = True
            except BaseException as exc:
                _stopped(intent, exc)
                raise
            finally:
                with self._registry.transaction() as tx:
                    self._records.end(tx, intent)

    # -- reports ---------------------------------------------------------------------------
    def _stopped_by(self, name: str, sig: int | None) -> str | None:
        """Which lifecycle command ended a run killed by a signal (archive, destroy and suspend
        stop the runs in their way), or None."""
        if sig not in (9, 15):
            return None
        for held in self._leases.state(name).held:
            if held.mode != "shared":
                return f"`warden {held.holder.op}` (pid {held.holder.pid})"
        return None

    def _ended_as_it_started(self, name: str) -> Conflict | None:
        """Why a sandbox could not be set up when an archive, destroy or suspend killed its bwrap
        as it started (they kill every process in the folder): that change, not this machine
        ("bwrap exited with -15; run `warden doctor`"). None when no such change holds the lease."""
        for held in self._leases.state(name).held:
            if held.mode != "shared" and held.holder.op in ENDING_OPS:
                done = {"archive": "archived", "destroy": "destroyed", "suspend": "suspended"}[held.holder.op]
                return Conflict(f"workspace {name!r} was {done} while its sandbox started", rule="workspace.ended")
        return None

    def _report_quarantine(self, moved: Sequence[str], actor: str, name: str, notes: _Notes) -> None:
        """Say (and audit) which git control structures a bot left and Warden moved aside."""
        if not moved:
            return
        self._audit.record_made(actor=actor, action="git.quarantine", target=name, decision="deny",
                                rule="git.control_files", result="moved", detail={"moved": list(moved)})
        # The paths are the bot's to name (a folder called ESC ] 0 ; ...): escaped, and a few.
        shown = ", ".join(echoed(path, 200) for path in moved[:_MOVED_SHOWN])
        more = f" and {len(moved) - _MOVED_SHOWN} more (the audit lists them)" if len(moved) > _MOVED_SHOWN else ""
        notes.show(f"warden: moved aside git control files a command made ({shown}{more}): a "
                   "person's git would have run the programs they name; git files are the person's\n")


def _both(first: Callable[[Callable[[], None]], None],
          second: Callable[[Callable[[], None]], None] | None) -> Callable[[Callable[[], None]], None]:
    """One `on_started` hook that calls `first`, then `second` when there is one."""
    if second is None:
        return first

    def started(kill: Callable[[], None]) -> None:
        first(kill)
        second(kill)

    return started


def _still_refused(kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> bool:
    """A refused run whose lease could not be given back (its outcome's write failed on a full
    disk) stays refused: the release's error replaced the refusal in flight, and `warden run`
    exited 1 for a command that never started instead of 126."""
    if not isinstance(exc, WardenError) or isinstance(exc, Refused):
        return False
    # The refusal is a few links up: the release's error is mapped from the driver's, raised
    # while the refusal was in flight.
    seen = exc.__context__
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, Refused):
            raise Refused.of(exc) from seen
        seen = seen.__context__
    return False


@dataclass
class _Ran:
    out: bool = False  # the run's block ended well: what fails after it is the outcome's write


@contextlib.contextmanager
def _outcome_written(intent: RunIntent) -> Iterator[_Ran]:
    """Around the write of a run's outcome (with the lease given back): when it fails on a full
    disk after the command ran and ended well, `warden run` exited 1 saying "no space left" (a
    bot was answered 503) for a command that ran and exited with its own status, which its
    person or bot would then run again. Its status stands; a warning line (the server's log,
    over HTTP) says what the audit log lacks: its outcome, and the call's event a bot's exec
    writes with it (`on_end`). Its intent is there; the lease lapses."""
    ran = _Ran()
    try:
        yield ran
    except Unavailable as exc:
        if intent.outcome is None or not ran.out:
            raise  # it never ran, or the write failed on the way out of another error
        unaudited(f"the command ran and exited {intent.outcome.exit_code}", exc.message)


def _stopped(intent: RunIntent, ended: BaseException | None) -> None:
    """A run its person stopped (as its lease was taken, its mounts made, its command ran) is
    audited interrupted, with the signal: before its command ran, the release used to close its
    intent silently. One handed over to a background process has its outcome from there."""
    stop = stops.carried(ended)
    if intent.outcome is None and intent.interrupted is None and not intent.handed_over and stop is not None:
        intent.interrupted = stop.name if isinstance(stop, Terminated) else "SIGINT"


def _check_argv(argv: Sequence[str]) -> None:
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise InvalidInput("give the command as a non-empty list of strings (argv), e.g. ['python', '-V']")


def _layer_paths(record: WorkspaceRecord) -> list[str]:
    """Env layers the workspace uses (bound read-only), from its registry row."""
    layers = record.meta.get("ro_paths") if isinstance(record.meta, Mapping) else None
    return [p for p in layers if isinstance(p, str)] if isinstance(layers, list) else []

