"""Live sandboxes and background processes: which one a command goes to, who may see what, and
the records of each from start to outcome (core/live.py says what a live sandbox is).

A live sandbox belongs to one workspace, one principal (the actor: "user", or "bot:NAME@acc_…"
for a grant) and one network policy, on one node; its row in the registry lets any Warden
process of that node find it. It is started by the first background command of its key, and is
used by that principal's foreground commands while it runs (so they reach its servers on
127.0.0.1). It is used only while it still stands for what it was started under:

- its bwrap and supervisor still run (the supervisor ends it after `workspace.sandbox_idle` with
  nothing running; Warden also stops an idle one it finds),
- the workspace is the same one, ready, and no exclusive lease was taken on it since (the
  lease's fencing number is unchanged: archive, destroy, suspend, repair… each take one — the
  sandbox's lease is then lost),
- its principal's grant chain is live (neither revoked nor expired),
- it mounts what a fresh sandbox of the command would (the path policy and layers unchanged).

Otherwise it is stopped, and its running processes end as `killed` with that reason. Revoking
a grant stops its sandboxes at once (GrantService calls `stop_principals`).

A background process's intent is audited as a run's (`run.start`, by RunService), and its
outcome (`run`, with `background: true`) once Warden collects it: whenever a process of that
node looks at the sandbox (ps, logs, wait, kill, a run in it, the sweeper). Its output is then
kept in Warden's home, as much as the supervisor's rings held.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from warden.core import stops
from warden.core.errors import Conflict, Denied, Locked, NotFound, Terminated, TimedOut, Unavailable, WardenError
from warden.core.leases import ENDING_OPS, LeaseState
from warden.core.live import (
    MAX_BACKGROUND,
    RING_BYTES,
    Chunk,
    Exited,
    HungUpFirst,
    LiveProcess,
    LiveSandbox,
    Logs,
    ProcessView,
    Supervised,
    check_process_id,
    complete_process_id,
    network_key,
    plan_fingerprint,
    too_many_background,
)
from warden.core.runs import (
    RunResult,
    SandboxRequest,
    StoppedAsItStarted,
    Usage,
    explain_not_started,
    timed_out_line,
)

if TYPE_CHECKING:
    from warden.core.forwards import Connection
    from warden.core.grants import Grant
    from warden.core.policy import EffectivePaths
    from warden.core.ports import Clock, GitGuards, LiveSandboxes, Registry, SandboxRunner, Tx
    from warden.core.settings import Settings
    from warden.core.workspaces import WorkspaceRecord
    from warden.services.audit import AuditLog

__all__ = ["LiveSandboxService", "LiveSettings", "ProcessStarter", "Seen"]

# How many ended processes a workspace keeps (with their output) before the oldest are dropped.
_KEEP_ENDED = 50
# How much of a PATH given to a background process its record keeps (Warden's line shows 200).
_GIVEN_PATH_KEPT = 4096
# Seconds a background process may stay recorded "starting" without its supervisor listing it:
# its starter records it, then asks the supervisor (which has 10 s to answer) to spawn it.
_STARTING_S = 60.0
# How long a start its person stopped waits for its killed process to be reaped (a moment).
_STOPPED_WAIT_S = 2.0
# Counts of foreground commands a front end runs itself (all of them, the bot's), beside the
# registry's background ones, held (none admitted) until the block ends: a start counts them and
# records its process within it (interfaces/http/running.ExecSlots.counted).
Busy = Callable[[str], contextlib.AbstractContextManager[tuple[int, int]]]


@dataclass(frozen=True)
class LiveSettings:
    idle_s: float  # workspace.sandbox_idle
    max_execs: int  # api.max_execs
    max_execs_per_bot: int  # api.max_execs_per_bot
    ring: int = RING_BYTES

    @classmethod
    def from_settings(cls, s: Settings) -> LiveSettings:
        return cls(s.get_seconds("workspace.sandbox_idle"), s.get_int("api.max_execs"),
                   s.get_int("api.max_execs_per_bot"))


# Why a live sandbox is stopped when a mount over a name of the workspace was undone on the host
# (adapters/sandbox/held_mounts.py): a bot reads it, so no path is named.
UNDONE = ("what it hides or holds read-only changed on the host since it started (a denied path made, "
          "replaced or removed; a protected file rewritten)")


def _policy(request: SandboxRequest) -> str:
    """A digest of what the path policy makes a sandbox mount (all but the read-only extras)."""
    return plan_fingerprint({
        "workspace": request.workspace, "binds": sorted((b.path, b.mode) for b in request.binds),
        "ro_zones": sorted(request.ro_zones), "keep_zones": sorted(request.keep_zones),
        "denied": sorted(request.denied),
        "protected": sorted(request.protected),
        "network": request.network.to_json() if request.network is not None else None})


def _fingerprint(request: SandboxRequest) -> str:
    return plan_fingerprint({"policy": _policy(request), "ro_paths": sorted(request.ro_paths)})


def _only_more_to_read(sandbox: LiveSandbox, request: SandboxRequest) -> bool:
    """Whether `request` differs from what `sandbox` was started with only by read-only extras
    (an install's package folders): the policy is the same, so the sandbox may go on."""
    kept = sandbox.meta.get("ro_paths")
    return (sandbox.meta.get("policy") == _policy(request) and isinstance(kept, list)
            and set(kept) <= set(request.ro_paths))


def _network(request: SandboxRequest) -> str:
    return network_key(request.network.to_json() if request.network is not None else None)


def _accessor(principal: str) -> str | None:
    """The grant a principal acts through (`bot:NAME@acc_…`), None for the person."""
    _, at, accessor = principal.partition("@")
    return accessor if at and principal.startswith("bot:") else None


class ProcessStarter:
    """A SandboxRunner for RunService that starts its request's command in the background (the
    run path judges, leases, mounts and audits the intent as for any run; this starts it)."""

    def __init__(self, service: LiveSandboxService, record: WorkspaceRecord, principal: str, process_id: str,
                 bot: str, busy: Busy | None, on_recorded: Callable[[], None] | None = None) -> None:
        self._service = service
        self._record = record
        self._principal = principal
        self._process_id = process_id
        self._bot = bot
        self._busy = busy
        self._on_recorded = on_recorded
        self.process: LiveProcess | None = None

    def run(self, request: SandboxRequest) -> RunResult:
        self.process = self._service.start_background(self._record, self._principal, self._process_id, request,
                                                      bot=self._bot, busy=self._busy, on_recorded=self._on_recorded)
        return RunResult(0, "", "", 0.0)

    def started(self) -> ProcessView:
        assert self.process is not None, "run() first"
        return ProcessView.of(self.process)


class Seen(NamedTuple):
    """What a run's lease take read in its transaction, for the run's live sandbox to be found
    and checked in rather than in reads of its own: the workspace's live sandboxes, its lease's
    fencing number, and the grant chain of a bot's principal (None: the person's, or not read)."""

    sandboxes: tuple[LiveSandbox, ...]
    fence: int
    chain: tuple[Grant, ...] | None = None


class _LiveRunner:
    """A SandboxRunner that runs a foreground command in its principal's live sandbox when one
    runs for the request's network, else in a fresh sandbox (`fresh`)."""

    def __init__(self, service: LiveSandboxService, record: WorkspaceRecord, principal: str,
                 fresh: SandboxRunner, *, start: bool = False, seen: Seen | None = None) -> None:
        self._service = service
        self._record = record
        self._principal = principal
        self._fresh = fresh
        self._start = start
        self._seen = seen

    def run(self, request: SandboxRequest) -> RunResult:
        # A terminal session too (`warden shell` reaches the servers a detached command runs).
        result = self._service.run_in_live(self._record, self._principal, request, start=self._start,
                                           seen=self._seen)
        return result if result is not None else self._fresh.run(request)


class LiveSandboxService:
    """Live sandboxes of this node and the background processes in them."""

    def __init__(self, *, registry: Registry, audit: AuditLog, sandboxes: LiveSandboxes, clock: Clock, node: str,
                 settings: LiveSettings, git: GitGuards,
                 over_quota: Callable[[WorkspaceRecord], str | None] | None = None,
                 path_policy: Callable[[WorkspaceRecord, str | None, EffectivePaths | None], str] | None = None,
                 instance: Callable[[], str | None] | None = None,
                 programs: Callable[[str], Collection[str]] | None = None) -> None:
        # The names a command of a workspace folder's sandbox could run (adapters/sandbox/host):
        # Warden's line for a process whose program was not found names the nearest, as a run's.
        self._programs = programs
        self._instance = instance  # the id of this process's registered instance, if any
        # Why a workspace is over its disk quota now (services/quota.py), or None: the sweep
        # stops a live sandbox whose background processes filled it past the limit.
        self._over_quota = over_quota
        # A digest of the workspace's path policy as it is now (its zones, allowed and denied
        # paths; raises WardenError when they cannot be read): a sandbox started under another
        # one is stopped, its background processes with it, by the next look (a sweep, a command).
        self._path_policy = path_policy
        self._registry = registry
        self._audit = audit
        self._sandboxes = sandboxes
        self._clock = clock
        self.node = node
        self.settings = settings
        self._git = git

    def _now(self) -> str:
        return self._clock().isoformat()

    # -- for the run path ----------------------------------------------------------------------
    def runner(self, record: WorkspaceRecord, principal: str, fresh: SandboxRunner, *,
               start: bool = False, seen: Seen | None = None) -> SandboxRunner:
        """Where RunService runs a foreground command of `principal` (`start`: in its live sandbox,
        started for it when none runs; else in it only while one runs). `seen`: the workspace's
        live sandboxes and lease fence as the run's lease take read them, looked in first."""
        return _LiveRunner(self, record, principal, fresh, start=start, seen=seen)

    def starter(self, record: WorkspaceRecord, principal: str, process_id: str, *, bot: str = "",
                busy: Busy | None = None, on_recorded: Callable[[], None] | None = None) -> ProcessStarter:
        """Where RunService starts a background command (`bot`: whose API exec slots it takes;
        `on_recorded`: told once its process is recorded running, its outcome then its own)."""
        return ProcessStarter(self, record, principal, process_id, bot, busy, on_recorded)

    def run_in_live(self, record: WorkspaceRecord, principal: str, request: SandboxRequest, *,
                    start: bool = False, seen: Seen | None = None) -> RunResult | None:
        """Run a foreground command in the live sandbox of its key, if one is up (`start`: started
        if not); None if not."""
        sandbox = self._sandbox_for(record, principal, request, start=start, seen=seen)
        if sandbox is None:
            return None
        try:
            result = self._sandboxes.run(sandbox, os.urandom(8).hex(), request)
        except Unavailable as exc:
            if exc.rule == "live.unreachable" and not self._sandboxes.alive(sandbox):
                self._stop(sandbox, "stopped", killed=False)  # it ended just now: a fresh sandbox runs it
                return None
            if self._ended_by_hang_up(sandbox, exc):
                return None  # a fresh sandbox runs it
            if exc.rule == "live.bad_row":
                # The row is not this home's to use (another home that calls itself this node, on a
                # shared registry, or a row that was tampered with): nothing ran; a fresh sandbox
                # runs the command, and the row is left to whoever owns it.
                return None
            if exc.rule in ("live.bad_answer", "live.unreachable"):
                if self._claimed(sandbox):
                    # A stop (a revoke, `warden stop`, a sweep) claimed it and is ending it, which
                    # is why its supervisor hung up: "hung up" alone read as a broken sandbox.
                    raise Unavailable(f"the live sandbox the command was sent to was stopped as it started "
                                      f"(`warden audit --workspace {record.name}` says why); run it again",
                                      rule="live.stopped") from None
                self._stop(sandbox, "its supervisor does not answer" if exc.rule == "live.unreachable"
                           else "its supervisor answered badly")
            raise
        if result.signal is not None:
            # Killed: by a stop of its sandbox (a revoke, a lost lease…) whose reason it is to say.
            result = dataclasses.replace(result, ended_by=self._why_stopped(sandbox))
            if result.ended_by is not None:
                return result
        # Used until now: a long command's end starts its idle period, not its start. Not a write
        # its answer rides on: on a full disk (or a locked registry) the command ran all the same,
        # and its caller must be told how it ended (it would run it again), not that the mark failed.
        with contextlib.suppress(Unavailable, Locked):
            self._touch(sandbox)
        if request.network is None:
            return result
        # What the proxy decided meanwhile is this command's to report (a background process of
        # the same sandbox may have asked too: it is reported here as well, and audited once).
        found, dropped = self._sandboxes.net_events(sandbox)
        events = tuple(found)
        if request.on_net_event is not None:
            for event in events:
                request.on_net_event(event)
        return dataclasses.replace(result, net_events=(*result.net_events, *events),
                                   net_events_dropped=result.net_events_dropped + dropped)

    def _why_stopped(self, sandbox: LiveSandbox) -> str | None:
        """The reason a stop claimed `sandbox` with (its `sandbox.stop` event's, written in the
        claim, before the stop ends it); None while no stop has."""
        if not self._claimed(sandbox):
            return None
        for event in reversed(self._audit.list(target=sandbox.workspace, limit=200)):
            if event.action == "sandbox.stop" and event.detail.get("sandbox") == sandbox.id:
                reason = event.detail.get("reason")
                return reason if isinstance(reason, str) else None
        return None

    def _claimed(self, sandbox: LiveSandbox) -> bool:
        """Whether a stop has claimed `sandbox` (its row is gone)."""
        with self._registry.transaction(write=False) as tx:
            return tx.sandboxes.get(sandbox.id) is None

    def start_background(self, record: WorkspaceRecord, principal: str, process_id: str, request: SandboxRequest,
                         *, bot: str = "", busy: Busy | None = None,
                         on_recorded: Callable[[], None] | None = None) -> LiveProcess:
        """Start a background process in the live sandbox of its key (started when none runs).
        `on_recorded`: told once it is recorded running (its outcome is then written as it ends)."""
        check_process_id(process_id)
        try:
            return self._start_background(record, principal, process_id, request, bot, busy, on_recorded)
        except HungUpFirst as exc:
            # Its sandbox is ending (an idle stop met the start) or broken, and it was stopped:
            # the start goes to a new one, once.
            if not exc.retry:
                raise
        return self._start_background(record, principal, process_id, request, bot, busy, on_recorded)

    def _start_background(self, record: WorkspaceRecord, principal: str, process_id: str, request: SandboxRequest,
                          bot: str, busy: Busy | None, on_recorded: Callable[[], None] | None) -> LiveProcess:
        sandbox, process = self._enter(record, principal, process_id, request, bot, busy)
        # A person's stop (Ctrl-C on `warden run --detach`) waits from the spawn until the process
        # is recorded running: raised between the two, the process ran on with its row deleted
        # (no one to stop it) or left "starting" while the start said "interrupted".
        whole = stops.Whole()
        with whole:
            try:
                meta = self._spawn(sandbox, process_id, request)
            except BaseException as exc:
                with self._registry.transaction() as tx:
                    # Its row goes unless a stop claimed it (recorded it killed, with its reason):
                    # then that stop is why the spawn failed (it ended the sandbox under it), and
                    # the start says so, as when the claim comes after the spawn.
                    claimed = tx.processes.get(process_id)
                    if claimed is None or claimed.running:
                        tx.processes.delete(process_id)
                        claimed = None
                if claimed is not None:
                    raise _stopped_as_it_started() from None
                if isinstance(exc, HungUpFirst) and self._ended_by_hang_up(sandbox, exc):
                    exc.retry = True  # the caller starts it again, in a new sandbox
                raise
            meta = {**process.meta, **meta}
            with self._registry.transaction() as tx:
                # The sandbox's row before the process's, in the order a stop's claim takes them:
                # on PostgreSQL, where each row is locked on its own, the other order deadlocked.
                tx.sandboxes.touch(sandbox.id, self._now())
                started = tx.processes.update(process_id, {"status": "running", "meta": meta})
            if not started:
                # A stop claimed the sandbox after the process was recorded: it recorded the process
                # killed, with its reason, and ends the sandbox (the process with it) if not done yet.
                raise _stopped_as_it_started()
            if on_recorded is not None:
                on_recorded()
        process = process._replace(status="running", meta=meta)
        if whole.held is not None:
            self._stop_started(sandbox, process, whole.held)
            whole.raise_held()
        return process

    def _stop_started(self, sandbox: LiveSandbox, process: LiveProcess, stop: BaseException) -> None:
        """Stopped as it started: what its person asked is that it not run. It is killed, and its
        outcome recorded here as any background process's ("killed", 137), saying why. Its
        supervisor reaps it a moment after the signal: a look at once found it still running, and
        its end was recorded seconds later by whoever looked next, as ended by that one (a
        suspend: "the workspace's suspend ended it")."""
        why = f"its start was interrupted ({stop.name if isinstance(stop, Terminated) else 'SIGINT'})"
        # A second stop (Ctrl-C pressed twice, SIGINT then SIGTERM) is held, then dropped: the
        # first is raised once this is done. Raised in the wait below, it left the process killed
        # but its end unrecorded, for whoever looked next to record as ended by that one.
        with stops.Whole(), contextlib.suppress(WardenError, OSError):
            self._sandboxes.signal(sandbox, process, signal.SIGKILL)
            seen = self._sandboxes.wait(sandbox, process.id, _STOPPED_WAIT_S)
            if seen.status not in ("starting", "running"):
                self._finish(sandbox, process, seen, reason=why)
            else:  # not reaped in time: the next look records it
                self._check(sandbox)

    def _spawn(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> dict[str, object]:
        """The background command spawned in `sandbox`. Its supervisor keeps ended processes until
        told to forget them, which a Warden process that recorded one's end may not have got to
        (killed between the two, or the forget unanswered): counted there, not in the registry,
        they made it refuse a start the registry admitted. Those are forgotten, and it is asked
        again once."""
        try:
            return self._sandboxes.spawn(sandbox, process_id, request, ring=self.settings.ring)
        except Unavailable as exc:
            if exc.rule != "live.max_processes":
                raise
        with self._registry.transaction(write=False) as tx:
            recorded = {p.id: p for p in tx.processes.of_sandbox(sandbox.id)}
        for seen in self._sandboxes.listing(sandbox):
            row = recorded.get(seen.id)
            if seen.status not in ("starting", "running") and (row is None or not row.running):
                self._sandboxes.forget(sandbox, seen.id)
        return self._sandboxes.spawn(sandbox, process_id, request, ring=self.settings.ring)

    def _enter(self, record: WorkspaceRecord, principal: str, process_id: str, request: SandboxRequest, bot: str,
               busy: Busy | None) -> tuple[LiveSandbox, LiveProcess]:
        """The live sandbox a background process starts in, its row recorded there "starting"."""
        collected = False
        for _ in range(4):
            sandbox = self._sandbox_for(record, principal, request, start=True)
            assert sandbox is not None
            meta: dict[str, object] = {"starter_pid": os.getpid(), "timeout_s": request.limits.timeout_s}
            if "PATH" in request.env:
                # The PATH its command was given: a program not found on it, though on the
                # sandbox's own, is then explained as a foreground run's is (why_not_started).
                meta["given_path"] = request.env["PATH"][:_GIVEN_PATH_KEPT]
            process = LiveProcess(process_id, sandbox.id, record.name, principal, bot, tuple(request.argv),
                                  "starting", None, None, False, self._now(), None, self.node, meta)
            # The front end's foreground commands are counted, and no more admitted, until this
            # process is recorded (committed): else one admitted meanwhile counted it not there.
            counted = busy(bot) if bot and busy is not None else contextlib.nullcontext((0, 0))
            try:
                with counted as foreground, self._registry.transaction() as tx:
                    # Only into a sandbox whose row is still there, in the same transaction: a stop
                    # claims the row before it ends the sandbox (_stop), and a process recorded
                    # after that claim would be killed by the stop with nothing to record it, its
                    # row "running" for good (and holding its bot's exec slot).
                    if not tx.sandboxes.touch(sandbox.id, process.started_at):
                        continue
                    if sum(1 for p in tx.processes.of_sandbox(sandbox.id) if p.running) >= MAX_BACKGROUND:
                        # Its supervisor would refuse it, which read as a broken sandbox ("answered
                        # what Warden does not accept; it is stopped", and nothing was stopped).
                        raise Unavailable(too_many_background(record.name), rule="live.max_processes")
                    if bot:
                        self._admit(tx, bot, foreground)
                    tx.processes.insert(process)
            except Unavailable as exc:
                if collected or exc.rule not in _COUNTED:
                    raise
                # A process is counted until a Warden process records its end (`ps`, `wait`, the
                # sweep): 64 quick `run --detach` in a row filled the sandbox with processes long
                # done, and every start after them was refused. Their ends are recorded now, and
                # the count taken again, once.
                if exc.rule == "live.max_processes":
                    self.collect_ended(sandbox)
                else:
                    self.collect_ended(bot=bot if exc.rule == "api.max_execs_per_bot" else None)
                collected = True
                continue
            return sandbox, process
        raise Unavailable(f"the live sandbox of {record.name!r} keeps changing under this command; run it again",
                          rule="live.contended")

    def collect_ended(self, sandbox: LiveSandbox | None = None, *, bot: str | None = None) -> None:
        """The ends of the processes that have ended recorded, so that they no longer count as
        running (a sandbox's 64, the bots' exec slots): in `sandbox`, else in this node's
        sandboxes that hold processes counted as running (`bot`'s, when given: a bot's refused
        request asks only the sandboxes its own processes hold). A sandbox that does not answer
        is left to the sweep."""
        if sandbox is not None:
            holding = [sandbox]
        else:
            with self._registry.transaction(write=False) as tx:
                holding = [s for s in tx.sandboxes.of_node(self.node)
                           if any(p.running and (bot is None or p.bot == bot) for p in tx.processes.of_sandbox(s.id))]
        for each in holding:
            with contextlib.suppress(Unavailable):
                self._collect(each)

    def _admit(self, tx: Tx, bot: str, foreground: tuple[int, int]) -> None:
        """Refuse a bot's background process over api.max_execs or api.max_execs_per_bot, counting
        its running ones in the registry (all server workers) and the front end's `foreground`
        ones (all, the bot's)."""
        total_fg, mine_fg = foreground
        mine = tx.processes.count_running(bot=bot) + mine_fg
        if mine >= self.settings.max_execs_per_bot:
            raise Unavailable(f"the bot this grant comes from already runs {self.settings.max_execs_per_bot} commands "
                              "at once, background ones included (api.max_execs_per_bot); kill one or retry when "
                              "one ends", rule="api.max_execs_per_bot")
        if tx.processes.count_running() + total_fg >= self.settings.max_execs:
            raise Unavailable(f"the server already runs {self.settings.max_execs} commands at once, background "
                              "ones included (api.max_execs); retry when one ends", rule="api.max_execs")

    def running_counts(self, bot: str) -> tuple[int, int]:
        """(all bots', `bot`'s) background processes running, from the registry."""
        with self._registry.transaction(write=False) as tx:
            return tx.processes.count_running(), tx.processes.count_running(bot=bot)

    # -- which sandbox -------------------------------------------------------------------------
    def _sandbox_for(self, record: WorkspaceRecord, principal: str, request: SandboxRequest, *,
                     start: bool, seen: Seen | None = None) -> LiveSandbox | None:
        network, fingerprint = _network(request), _fingerprint(request)
        for _ in range(3):
            chain = None
            if seen is not None:
                # As the run's lease take read them, in its transaction: reads of its own would
                # find the same (a stop or revoke that comes later is met as it is after them).
                found = next((s for s in seen.sandboxes if (s.node, s.principal, s.network) == (self.node, principal,
                                                                                                network)), None)
                fence, chain, seen = seen.fence, seen.chain, None
            else:
                with self._registry.transaction(write=False) as tx:
                    found = tx.sandboxes.find(self.node, record.name, principal, network)
                    fence = tx.leases.read(record.name)[0].fence
            if found is not None:
                problem = self._problem(found, record, fence, chain, request)
                if problem is None and found.fingerprint != fingerprint:
                    if not start and _only_more_to_read(found, request):
                        return None  # a command that needs more mounts (an install) runs in a fresh one
                    # Else the policy changed since it started (a path denied, a zone made read-only,
                    # layers replaced): what runs in it must not keep what is no longer allowed.
                    problem = "its mounts are not what the workspace's policy says now"
                if problem is None:
                    return self._touch(found)
                self._stop(found, problem)
            if not start:
                return None
            made = self._start(record, principal, request, network, fingerprint, fence)
            if made is not None:
                return made
        raise Unavailable(f"the live sandbox of {record.name!r} keeps changing under this command; run it again",
                          rule="live.contended")

    # -- for forwards ----------------------------------------------------------------------------
    def usable(self, workspace: str, wanted: Callable[[str], bool]) -> list[LiveSandbox]:
        """The live sandboxes of this node in `workspace` whose principal `wanted` accepts and that
        may still be used (as a command's would be), the most recently used first."""
        with self._registry.transaction(write=False) as tx:
            found = [s for s in tx.sandboxes.of_workspace(workspace) if s.node == self.node and wanted(s.principal)]
            record = tx.workspaces.get(workspace)
            fence = tx.leases.read(workspace)[0].fence
        ok = [s for s in found if self._problem(s, record, fence) is None]
        return sorted(ok, key=lambda s: s.last_used, reverse=True)

    def connect(self, sandbox: LiveSandbox, port: int) -> Connection:
        """A TCP connection to `port` inside `sandbox` (NotListening when nothing accepts it); a
        supervisor that answers badly has its sandbox stopped, as for any other request."""
        try:
            sock = self._sandboxes.connect(sandbox, port)
        except Unavailable as exc:
            if exc.rule == "live.bad_answer":
                self._stop(sandbox, "its supervisor answered badly")
            raise
        self._touch(sandbox)  # in use: its idle period starts again
        return sock

    def _touch(self, sandbox: LiveSandbox) -> LiveSandbox:
        """`sandbox` marked used now, for its idle stop (workspace.sandbox_idle). The write is
        skipped when its row was marked under a tenth of the idle period ago (at most a second),
        which the idle stop cannot tell apart from now: an agent's next command, or the end of a
        quick one, costs no registry write."""
        now = self._clock()
        last = _parse_time(sandbox.last_used)
        if last is not None and 0 <= (now - last).total_seconds() < min(1.0, self.settings.idle_s / 10):
            return sandbox
        stamp = now.isoformat()
        with self._registry.transaction() as tx:
            tx.sandboxes.touch(sandbox.id, stamp)
        return sandbox._replace(last_used=stamp)

    def _start(self, record: WorkspaceRecord, principal: str, request: SandboxRequest, network: str,
               fingerprint: str, fence: int) -> LiveSandbox | None:
        sandbox_id = "sbx_" + os.urandom(8).hex()
        # The path policy it starts under (the run read it a moment ago), before anything starts.
        # Of its session's lists too: a session's deny must stop what started under its allow.
        paths = (self._path_policy(record, request.policy_session, request.policy)
                 if self._path_policy is not None else None)
        # Which folders its read-only paths are (env layers, the person's TLS trust), taken before
        # it mounts them: one replaced afterwards (a layer rebuilt or repaired) makes it stale.
        mounted = {path: _mount_identity(path) for path in sorted(request.ro_paths)}
        started = self._sandboxes.start(sandbox_id, request, idle_s=self.settings.idle_s)
        now = self._now()
        meta = {**started.meta, "policy": _policy(request), "ro_paths": sorted(request.ro_paths),
                "folder": _folder_identity(record.path), "mounted": mounted}
        if paths is not None:
            meta["paths"] = paths
            if request.policy_session is not None:
                meta["paths_session"] = request.policy_session
        instance = self._instance() if self._instance is not None else None
        if instance is not None:  # the Warden process that started it: its death stops it (services/instances)
            meta["instance"] = instance
        sandbox = LiveSandbox(sandbox_id, record.name, record.id, principal, network, fingerprint, fence, self.node,
                              started.pid, started.pid_start, started.supervisor_pid, started.supervisor_start,
                              started.socket, now, now, meta)
        with self._registry.transaction() as tx:
            # Recorded only with the bot's grant read again, in this transaction: a revoke stops
            # the sandboxes recorded when it looks (stop_principals), and one committed after
            # the run's own read (under its lease) but before this row found none to stop; the
            # command then ran in it, a background one too, until the next sweep.
            dead = self._dead_grant(tx, principal)
            won = dead is None and tx.sandboxes.insert(sandbox)
            if won:
                self._audit.record(actor=principal, action="sandbox.start", target=record.name, decision="allow",
                                   rule="sandbox", result="started",
                                   detail={"sandbox": sandbox_id, "network": network,
                                           "limits_via": sandbox.meta.get("limits_via")}, tx=tx)
        if dead is not None:
            self._sandboxes.stop(sandbox)  # nothing ran in it: no row, no stop to audit
            raise dead
        if not won:  # another process started one for this key meanwhile: its sandbox serves
            self._sandboxes.stop(sandbox)
            return None
        return sandbox

    def _ended_by_hang_up(self, sandbox: LiveSandbox, exc: BaseException) -> bool:
        """Whether `exc` is a refusal or hang-up before any answer to the spawn (HungUpFirst), so
        nothing ran there: its supervisor is ending (an idle stop met the command as it was sent;
        still alive the moment it was looked at) or broken. That sandbox is then ended, unless a
        stop claimed it first (its reason stands)."""
        if not isinstance(exc, HungUpFirst) or self._claimed(sandbox):
            return False
        self._stop(sandbox, "its supervisor hung up before the command started")
        return True

    def _dead_grant(self, tx: Tx, principal: str) -> Denied | None:
        """Why the grant chain `principal` acts through is no longer live, read in `tx` and held
        until it ends; None when it is, or for the person's."""
        # Held: on PostgreSQL (READ COMMITTED) a revoke committed after this read, whose stop of
        # the principal's sandboxes looked before this row was committed, missed the sandbox; its
        # command then ran after the revoke. Held, the revoke waits for this row, or this read
        # waits for the revoke and sees it.
        chain = self.grant_chain(tx, principal, hold=True)
        if chain is None:
            return None
        from warden.core.grants import alive

        life = alive(list(chain), self._clock())
        if life.allowed:
            return None
        return Denied(f"{life.reason} while the command was being prepared; nothing ran (ask the workspace's "
                      "owner for a new grant)", rule=life.rule)

    def grant_chain(self, tx: Tx, principal: str, *, hold: bool = False) -> tuple[Grant, ...] | None:
        """The grant chain `principal` acts through, read in `tx` (None for the person's; `hold`:
        see chain_of)."""
        accessor = _accessor(principal)
        if accessor is None:
            return None
        from warden.services.grants import chain_of

        return tuple(chain_of(tx, accessor, hold=hold))

    def _problem(self, sandbox: LiveSandbox, record: WorkspaceRecord | None, fence: int | None,
                 chain: tuple[Grant, ...] | None = None, request: SandboxRequest | None = None) -> str | None:
        """Why `sandbox` may no longer be used, or None (`chain`: its principal's grant chain as
        read just now, else read here; `request`: a command's, whose path policy was read just now)."""
        if not self._sandboxes.alive(sandbox):
            return "stopped"
        if record is None or record.id != sandbox.workspace_id:
            return "the workspace is gone"
        if record.status != "ready":
            return f"the workspace is {record.status}"
        held = sandbox.meta.get("folder")
        if held is not None and held != _folder_identity(record.path):
            # It mounted the folder it found at its start: moved away, its commands would write
            # there (outside the workspace); deleted, they would find no folder at all.
            return "its workspace folder was replaced since it started (moved or deleted, and made again)"
        mounted = sandbox.meta.get("mounted")
        if isinstance(mounted, dict):
            for path, identity in mounted.items():
                if identity != _mount_identity(path):
                    # A bind mount holds the folder it found: an env layer swapped by a rebuild or
                    # a repair left it the old one, emptied (ModuleNotFoundError in every command).
                    # Said without the path: a bot reads this (its process's stopped_by), and a
                    # layer's path tells it Warden's home and the person's.
                    return "what it mounts read-only (an environment layer or trust file) was replaced since it started"
        if not self._sandboxes.intact(sandbox):
            return UNDONE  # said without the path, as above: the bot reads this
        changed = self._policy_changed(sandbox, record, request)
        if changed is not None:
            # What it mounts was judged once, as it started: a zone made read-only or a path denied
            # since was still writable by its background processes (a bot's dev server, a loop),
            # for as long as they ran: only a new command of its principal compared its mounts.
            return changed
        if fence is not None and fence != sandbox.fence:
            return "its lease was lost (the workspace was taken exclusively since it started)"
        accessor = _accessor(sandbox.principal)
        if accessor is not None:
            from warden.core.grants import alive

            if chain is None or not chain or chain[0].accessor != accessor:
                with self._registry.transaction(write=False) as tx:
                    chain = self.grant_chain(tx, sandbox.principal)
            life = alive(list(chain or ()), self._clock())
            if not life.allowed:
                return f"its grant is no longer live ({life.rule})"
        return None

    def _policy_changed(self, sandbox: LiveSandbox, record: WorkspaceRecord,
                        request: SandboxRequest | None = None) -> str | None:
        """Why the workspace's path policy is not the one `sandbox` started under (or can no longer
        be read, which refuses every run too), or None. A command's `request` of the same session
        carries the answer its run read a moment ago: compared as it is, not read again."""
        if self._path_policy is None:
            return None
        held, session = sandbox.meta.get("paths"), sandbox.meta.get("paths_session")
        if not isinstance(held, str):
            # Started by a Warden that recorded no policy (before the digest): what it mounts was
            # never compared, so a tightening made since would never stop it. Started again once.
            return "it started before Warden recorded the path policy it runs under"
        session = session if isinstance(session, str) else None
        given = request.policy if request is not None and request.policy_session == session else None
        try:
            same = self._path_policy(record, session, given) == held
        except WardenError:
            same = False
        return None if same else "the workspace's path policy (zones, allowed or denied paths) changed since it started"

    # -- stopping ------------------------------------------------------------------------------
    def stop(self, sandbox: LiveSandbox, reason: str, *, actor: str = "warden") -> None:
        """Stop `sandbox` of this node, its running processes killed (audited with `reason`)."""
        self._stop(sandbox, reason, actor=actor)

    def _stop(self, sandbox: LiveSandbox, reason: str, *, killed: bool = True, actor: str = "warden",
              idle: bool = False) -> bool:
        """Stop `sandbox` (if it still runs), end its processes' records and remove its row; False
        when `idle` (an idle stop) and it was used since `sandbox` was read: then it runs on."""
        with contextlib.suppress(Unavailable):
            self._collect(sandbox)  # what had ended before is recorded as it ended
        # What the processes it is about to kill have used: read before the stop, which removes
        # their cgroups with the sandbox's (after it, nothing is left to read).
        with self._registry.transaction(write=False) as tx:
            running = [p for p in tx.processes.of_sandbox(sandbox.id) if p.running]
        used = {p.id: self._sandboxes.usage(p) for p in running}
        # Claimed and recorded before the stop, not after it: the stop first asks the supervisor
        # to end, and another Warden process (a server's sweep, a `ps`) that looked at the
        # sandbox meanwhile found it dead and recorded its processes "lost" under its own
        # reason. With the row gone first, that process's claim fails and it leaves the records
        # to this one, and no new command is sent into a sandbox being stopped. A crash before the
        # stop below leaves a sandbox without a row: the orphan sweep kills it (services/sweeper).
        ended = []
        status, exited = ("killed", Exited(137, 9)) if killed else ("lost", None)
        with self._registry.transaction() as tx:
            # An idle stop claims the row only as it read it: a command that started in the
            # sandbox since recorded its use there, and the sandbox is no longer idle.
            claimed = tx.sandboxes.delete(sandbox.id, used_last=sandbox.last_used if idle else None)
            if not claimed and idle and tx.sandboxes.get(sandbox.id) is not None:
                return False
            # Every row ended before any is audited: on PostgreSQL the audit's append takes a lock
            # on the whole chain, and a collector that ended one of these rows first waits for it
            # while holding that row, which this transaction would then wait for (a deadlock).
            for process in tx.processes.of_sandbox(sandbox.id) if claimed else ():
                if process.running:
                    # Why, on its own row: `warden ps` shows a dev server "killed" with the reason
                    # (a policy change, a revoke), which was in the audit log only.
                    tx.processes.update(process.id, {"meta": {**process.meta, "stopped_by": reason}})
                if process.running and self._ended(tx, process, status, exited):
                    ended.append(process)
            for process in ended:
                self._audit_end(tx, process, status, exited, reason, used=used.get(process.id))
            if claimed:
                self._audit.record(actor=actor, action="sandbox.stop", target=sandbox.workspace, decision="none",
                                   rule="sandbox", result="stopped",
                                   detail={"sandbox": sandbox.id, "principal": sandbox.principal, "reason": reason,
                                           "processes_ended": [p.id for p in ended]}, tx=tx)
        # Stopped here even when another process claimed it: the caller (an archive, a destroy)
        # goes on as if nothing of it runs, which the claimer may not have made true yet.
        self._sandboxes.stop(sandbox)
        if not claimed:
            return True  # the claimer records it and releases its processes
        for process in ended:
            self._sandboxes.release(process)
        self._sweep_git(sandbox.workspace)
        return True

    def _sweep_git(self, workspace: str) -> None:
        """Move aside what the sandbox's bot left of git's control files (core/gitcontrol)."""
        with self._registry.transaction(write=False) as tx:
            record = tx.workspaces.get(workspace)
        if record is not None and record.status == "ready":
            with contextlib.suppress(Exception):  # a missing folder has nothing to sweep
                self._git.workspace(record.path).after()

    def stop_principals(self, accessors: list[str], *, reason: str = "its grant was revoked",
                        actor: str = "user") -> list[str]:
        """Stop the live sandboxes of grants `accessors` (revoked); the ids stopped."""
        wanted = set(accessors)
        with self._registry.transaction(write=False) as tx:
            found = [s for s in tx.sandboxes.of_node(self.node) if _accessor(s.principal) in wanted]
        for sandbox in found:
            self._stop(sandbox, reason, actor=actor)
        return [s.id for s in found]

    def stop_workspace(self, workspace: str, *, reason: str, actor: str = "user") -> list[str]:
        with self._registry.transaction(write=False) as tx:
            found = tx.sandboxes.of_workspace(workspace)
        for sandbox in found:
            if sandbox.node == self.node:
                self._stop(sandbox, reason, actor=actor)
        return [s.id for s in found]

    # -- collecting outcomes ---------------------------------------------------------------------
    def sweep(self) -> list[str]:
        """Every live sandbox of this node looked at: ended processes recorded, sandboxes that may
        no longer run (dead, idle, workspace changed, lease lost, grant revoked or expired)
        stopped. The ids of those stopped."""
        with self._registry.transaction(write=False) as tx:
            sandboxes = tx.sandboxes.of_node(self.node)
        stopped = []
        for sandbox in sandboxes:
            if self._check(sandbox, idle=True) or self._past_quota(sandbox):
                stopped.append(sandbox.id)
        return stopped

    def stop_undone(self) -> list[str]:
        """Stop the live sandboxes of this node whose mounts a change on the host undid (their
        background processes could read a denied file an editor saved, or write a read-only
        zone); the ids stopped. Cheap (no supervisor asked): run every second beside the sweep."""
        with self._registry.transaction(write=False) as tx:
            sandboxes = tx.sandboxes.of_node(self.node)
        stopped = []
        for sandbox in sandboxes:
            if self._sandboxes.alive(sandbox) and not self._sandboxes.intact(sandbox):
                self._stop(sandbox, UNDONE)
                stopped.append(sandbox.id)
        return stopped

    def _past_quota(self, sandbox: LiveSandbox) -> bool:
        """Stop `sandbox` when background processes run in it and its workspace has passed its
        disk quota: a foreground run is watched while it runs, a background one only here (each
        file it writes is capped at the room left when it started)."""
        if self._over_quota is None:
            return False
        with self._registry.transaction(write=False) as tx:
            running = any(p.running for p in tx.processes.of_sandbox(sandbox.id))
            record = tx.workspaces.get(sandbox.workspace)
        why = self._over_quota(record) if running and record is not None else None
        if why is None:
            return False
        self._stop(sandbox, f"{why}: its background processes were stopped")
        return True

    def keep(self) -> set[int]:
        """The bwrap pids of this node's live sandboxes (the orphan sweep leaves them running)."""
        with self._registry.transaction(write=False) as tx:
            return {s.pid for s in tx.sandboxes.of_node(self.node)}

    def _check(self, sandbox: LiveSandbox, *, idle: bool = False) -> bool:
        """Collect `sandbox`'s ended processes, or stop it if it may no longer run; True if stopped."""
        with self._registry.transaction(write=False) as tx:
            record = tx.workspaces.get(sandbox.workspace)
            lease = tx.leases.read(sandbox.workspace)[0]
        problem = self._problem(sandbox, record, lease.fence)
        if problem == "stopped":
            reason, killed = self._why_gone(record, sandbox, lease)
            self._stop(sandbox, reason, killed=killed)
            return True
        if problem is not None:
            self._stop(sandbox, problem)
            return True
        try:
            running = self._collect(sandbox)
        except Unavailable as exc:
            self._stop(sandbox, "its supervisor does not answer" if exc.rule == "live.unreachable"
                       else "its supervisor answered badly")
            return True
        if idle and not running:
            last = _parse_time(sandbox.last_used)
            if (last is not None and (self._clock() - last).total_seconds() >= self.settings.idle_s
                    and not self._runs_foreground(sandbox)):
                return self._stop(sandbox, f"idle for {self.settings.idle_s:g} s (workspace.sandbox_idle)",
                                  killed=False, idle=True)
        return False

    def _runs_foreground(self, sandbox: LiveSandbox) -> bool:
        """Whether a foreground command runs in `sandbox` (it has no process row; its supervisor
        lists it): one running longer than the idle period was stopped under it as idle. Its
        row is marked used at its end. Asked only of a sandbox about to be stopped as idle."""
        try:
            return any(seen.status in ("starting", "running") and not seen.background
                       for seen in self._sandboxes.listing(sandbox))
        except Unavailable:
            return False  # the stop that follows finds why

    @staticmethod
    def _why_gone(record: WorkspaceRecord | None, sandbox: LiveSandbox, lease: LeaseState) -> tuple[str, bool]:
        """Why `sandbox` is found dead, and whether its running processes were killed (else lost)."""
        if record is None:
            return "the workspace was destroyed", True
        if record.status != "ready":
            reason = "destroyed" if record.id != sandbox.workspace_id else record.status
            return f"the workspace was {reason}", True
        # A suspend, archive or destroy ends the workspace's processes (its lease's drain) before
        # it changes the workspace's status: a look in between finds the sandbox dead under a
        # workspace still "ready", and must not record its processes "lost".
        taker = next((h.holder.op for h in lease.held if h.mode != "shared" and h.holder.op in ENDING_OPS), None)
        if taker is not None:
            return f"the workspace's {taker} ended it", True
        if record.id != sandbox.workspace_id:
            return "the workspace was destroyed", False
        return "it ended (idle, or its supervisor was killed)", False

    def _audit_network(self, sandbox: LiveSandbox) -> None:
        """Audit what the proxy of `sandbox` refused since it was last asked (`network.refused`)."""
        found, dropped = self._sandboxes.net_events(sandbox)
        refused = [e for e in found if not e.allowed]
        if not refused and not dropped:
            return
        with self._registry.transaction() as tx:
            for event in refused[:100]:
                self._audit.record(actor=sandbox.principal, action="network.refused", target=sandbox.workspace,
                                   decision="deny", rule=event.rule, result="refused",
                                   detail={**event.to_json(), "sandbox": sandbox.id}, tx=tx)
            if len(refused) > 100 or dropped:
                # Not one row each (a command may ask without end), but never unsaid.
                self._audit.record(actor=sandbox.principal, action="network.refused", target=sandbox.workspace,
                                   decision="deny", rule="network.events_dropped", result="refused",
                                   detail={"sandbox": sandbox.id, "not_listed": max(0, len(refused) - 100),
                                           "not_kept": dropped}, tx=tx)

    def _collect(self, sandbox: LiveSandbox) -> int:
        """Record the outcome of every process of `sandbox` that has ended; how many still run."""
        if sandbox.network != "none":
            self._audit_network(sandbox)
        with self._registry.transaction(write=False) as tx:
            rows = [p for p in tx.processes.of_sandbox(sandbox.id) if p.running]
        if not rows:
            return 0
        listed = {s.id: s for s in self._sandboxes.listing(sandbox)}
        running = 0
        for process in rows:
            seen = listed.get(process.id)
            # A row still "starting" is its starter's until it records it running (with its host
            # details): a quick command may have ended by then, which the next look records.
            # Recorded here, the start found its row taken and refused a command that had run.
            alive = self._starting(process) or (seen is not None and seen.status in ("starting", "running"))
            if alive:
                running += 1
                continue
            self._finish(sandbox, process, seen)
        return running

    def _starting(self, process: LiveProcess) -> bool:
        """Whether `process`, which its supervisor does not list, is being started: recorded
        "starting" and not yet asked for (a `ps` meanwhile must not record it lost)."""
        started = _parse_time(process.started_at)
        return (process.status == "starting" and started is not None
                and (self._clock() - started).total_seconds() < _STARTING_S)

    def _finish(self, sandbox: LiveSandbox, process: LiveProcess, seen: Supervised | None, *,
                reason: str | None = None) -> None:
        """Record how `process` ended (`seen` by its supervisor; None: it lost track of it), and
        why when Warden ended it (`reason`)."""
        logs = None
        if seen is not None:
            with contextlib.suppress(Unavailable):
                logs, _ = self._sandboxes.logs(sandbox, process.id)
        exited = seen.exited if seen is not None else None
        used = self._sandboxes.usage(process, exited)  # before release drops its cgroup
        oom = self._sandboxes.release(process)
        if logs is not None:
            self._sandboxes.keep_logs(process.id, logs)
        status = "lost" if exited is None else "exited"
        if exited is not None and (exited.timed_out or exited.signal is not None):
            status = "killed"
        with self._registry.transaction() as tx:
            if reason is not None and process.running:  # on its row too, as a stop's (`ps` says it)
                tx.processes.update(process.id, {"meta": {**process.meta, "stopped_by": reason}})
            if self._ended(tx, process, status, exited):
                self._used_until(tx, process.sandbox_id, seen)
                self._audit_end(tx, process, status, exited, reason, oom=oom, used=used)
        if seen is not None:
            with contextlib.suppress(Unavailable):
                self._sandboxes.forget(sandbox, process.id)
        self._prune(process.workspace)

    def _used_until(self, tx: Tx, sandbox_id: str, seen: Supervised | None) -> None:
        """A background process's end (when its supervisor said how long ago) marked as its
        sandbox's last use, as a foreground command's end is: a bot that waited on a process
        running past the idle period (`wait` asks nothing of the sandbox while it runs) had its
        sandbox, and what the process left in /tmp, stopped as idle by the very sweep that
        recorded the end, the period counted from the process's start. When it ended, not when
        that was recorded: a quick process collected by a sweep much later is no use then. An
        idle stop that read the row before this mark claims nothing (`_stop`)."""
        if seen is None or seen.ended_ago is None:
            return
        ended = self._clock() - timedelta(seconds=seen.ended_ago)
        row = tx.sandboxes.get(sandbox_id)
        last = _parse_time(row.last_used) if row is not None else None
        if row is not None and (last is None or ended > last):
            tx.sandboxes.touch(sandbox_id, ended.isoformat())

    def _ended(self, tx: Tx, process: LiveProcess, status: str, exited: Exited | None) -> bool:
        """The outcome of `process` written, once: False when another Warden process ended its
        record first (that one audits it)."""
        code, sig, timed_out = _outcome(exited)
        return tx.processes.finish(process.id, status=status, exit_code=code, signal=sig, timed_out=timed_out,
                                   ended_at=self._now())

    def _audit_end(self, tx: Tx, process: LiveProcess, status: str, exited: Exited | None, reason: str | None, *,
                   oom: bool = False, used: Usage | None = None) -> None:
        """The audit event of the outcome `_ended` wrote (last in its transaction: see `_stop`)."""
        code, sig, timed_out = _outcome(exited)
        detail: dict[str, object] = {"run_id": process.id, "background": True, "argv": list(process.argv),
                                     "exit_code": code, "signal": sig, "timed_out": timed_out, "oom_killed": oom,
                                     "sandbox": process.sandbox_id}
        if reason is not None:
            detail["stopped_by"] = reason
        if used is not None:  # as a foreground run's event has it
            detail["usage"] = used.to_json()
        if status == "lost":
            self._audit.record(actor=process.principal, action="run.lost", target=process.workspace,
                               decision="allow", rule="sandbox", result="lost", detail=detail, tx=tx)
        else:
            self._audit.record(actor=process.principal, action="run", target=process.workspace, decision="allow",
                               rule="sandbox", result=str(code), detail=detail, tx=tx)

    def _prune(self, workspace: str) -> None:
        """Drop the records (and kept output) of all but the newest _KEEP_ENDED ended processes."""
        with self._registry.transaction() as tx:
            ended = [p for p in tx.processes.of_workspace(workspace) if not p.running]
            old = ended[:-_KEEP_ENDED] if len(ended) > _KEEP_ENDED else []
            for process in old:
                tx.processes.delete(process.id)
        for process in old:
            self._sandboxes.drop_logs(process.id)

    # -- what people and bots ask ----------------------------------------------------------------
    def _refresh(self, workspace: str) -> None:
        """Collect what ended in the workspace's live sandboxes of this node (stopping those that
        may no longer run), so what is shown is what is."""
        with self._registry.transaction(write=False) as tx:
            sandboxes = [s for s in tx.sandboxes.of_workspace(workspace) if s.node == self.node]
        for sandbox in sandboxes:
            self._check(sandbox)

    def list(self, workspace: str, *, principal: str | None = None) -> tuple[ProcessView, ...]:
        """The workspace's background processes (only `principal`'s when given), oldest first."""
        self._refresh(workspace)
        with self._registry.transaction(write=False) as tx:
            processes = tx.processes.of_workspace(workspace, principal=principal)
        return tuple(ProcessView.of(p, self._used_so_far(p)) for p in processes)

    def _used_so_far(self, process: LiveProcess) -> Usage | None:
        """What a running process of this node has used so far (a cgroup or /proc read, no
        supervisor call); None for an ended one (its audit event has it) or another node's."""
        if not process.running or process.node != self.node:
            return None
        return self._sandboxes.usage(process)

    def resolve(self, workspace: str, process_id: str, *, principal: str | None = None) -> str:
        """The whole id of the process `process_id` begins (`warden logs ws 9d3b`), among the
        workspace's processes `principal` may see (all of them for a person): a bot's prefix is
        matched against its own processes alone. A whole id is given back as it is; NotFound for
        a prefix none begins, InvalidInput for one several do."""
        whole = complete_process_id(process_id, ())  # its shape checked: InvalidInput for a bad one
        if whole is not None:
            return whole  # looked up, and scoped to its principal, where it is used
        with self._registry.transaction(write=False) as tx:
            mine = [p.id for p in tx.processes.of_workspace(workspace, principal=principal)]
        found = complete_process_id(process_id, mine)
        if found is None:
            raise NotFound(f"no process {process_id} in workspace {workspace!r}: `warden ps {workspace}` lists them")
        return found

    def _process(self, workspace: str, process_id: str, principal: str | None) -> LiveProcess:
        """The process, if it is of `workspace` and (when given) of `principal`: NotFound alike
        for one that does not exist and one that is another principal's."""
        check_process_id(process_id)
        with self._registry.transaction(write=False) as tx:
            process = tx.processes.get(process_id)
        if process is None or process.workspace != workspace or (principal is not None
                                                                   and process.principal != principal):
            raise NotFound(f"no process {process_id} in workspace {workspace!r}: `warden ps {workspace}` lists them")
        return process

    def _sandbox_of(self, process: LiveProcess) -> LiveSandbox | None:
        with self._registry.transaction(write=False) as tx:
            sandbox = tx.sandboxes.get(process.sandbox_id)
        if sandbox is not None and sandbox.node != self.node:
            raise Unavailable(f"process {process.id} runs on node {sandbox.node}; ask Warden there",
                              rule="live.other_node")
        return sandbox

    def get(self, workspace: str, process_id: str, *, principal: str | None = None) -> ProcessView:
        process_id = self.resolve(workspace, process_id, principal=principal)
        process = self._process(workspace, process_id, principal)
        sandbox = self._sandbox_of(process)
        if sandbox is not None and process.running:
            self._check(sandbox)
        process = self._process(workspace, process_id, principal)
        return ProcessView.of(process, self._used_so_far(process))

    def logs(self, workspace: str, process_id: str, *, principal: str | None = None) -> Logs:
        """What the process printed, as much as was kept."""
        process_id = self.resolve(workspace, process_id, principal=principal)
        process = self._process(workspace, process_id, principal)
        sandbox = self._sandbox_of(process)
        if process.running and sandbox is not None:
            try:
                logs, ended = self._sandboxes.logs(sandbox, process.id)
            except Unavailable:
                self._check(sandbox)
            else:
                if ended is not None:
                    self._check(sandbox)
                return logs
        kept = self._sandboxes.kept_logs(process.id)
        return kept if kept is not None else Logs(b"", b"")

    def why_not_started(self, workspace: str, process_id: str, *, principal: str | None = None) -> str | None:
        """Warden's line for an ended process whose program could not be started (not found, not
        executable), or that its timeout killed (a dev server left running meets sandbox.timeout:
        `ps` said only `killed 124`), as a foreground run says it; None for any other."""
        process_id = self.resolve(workspace, process_id, principal=principal)
        process = self._process(workspace, process_id, principal)
        if process.running:
            return None
        limit = process.meta.get("timeout_s")
        if process.timed_out and isinstance(limit, int | float):
            return timed_out_line(float(limit), again="start")
        if process.exit_code not in (126, 127):
            return None
        tail = self.logs(workspace, process_id, principal=principal).stderr[-4096:]
        given = process.meta.get("given_path")
        programs: Collection[str] = ()
        if process.exit_code == 127 and self._programs is not None:
            with self._registry.transaction(write=False) as tx:
                record = tx.workspaces.get(workspace)
            programs = self._programs(record.path) if record is not None else ()
        return explain_not_started(process.exit_code, tail.decode("utf-8", "replace"), programs=programs,
                                   given_path=given if isinstance(given, str) else None,
                                   named=process.argv[0] if process.argv else None)

    def follow(self, workspace: str, process_id: str, *, principal: str | None = None) -> Iterator[Chunk | None]:
        """The process's output so far and as it comes, then its end (`Chunk.exited`); None after
        each second of quiet. An ended process: its kept output and its end."""
        process_id = self.resolve(workspace, process_id, principal=principal)
        process = self._process(workspace, process_id, principal)
        sandbox = self._sandbox_of(process)
        if process.running and sandbox is not None:
            try:
                for chunk in self._sandboxes.follow(sandbox, process.id):
                    yield chunk
                    if chunk is not None and chunk.exited is not None:
                        with contextlib.suppress(Unavailable):
                            self._check(sandbox)
                        return
            except Unavailable:
                self._check(sandbox)
            process = self._process(workspace, process_id, principal)
            if process.running:
                # Its supervisor let this follower go: it fell more than a few MiB behind (a
                # process that floods its output). Said, not ended as if the process had.
                raise Unavailable(f"stopped following process {process_id}, which still runs: it printed faster "
                                  "than its output could be passed on; read its latest output (logs) or follow "
                                  "it again", rule="live.follow_behind")
        kept = self._sandboxes.kept_logs(process.id) or Logs(b"", b"")
        for stream, data in (("stdout", kept.stdout), ("stderr", kept.stderr)):
            if data:
                yield Chunk(stream, data)
        yield Chunk("", b"", Exited(process.exit_code if process.exit_code is not None else 255, process.signal,
                                    process.timed_out))

    def kill(self, workspace: str, process_id: str, sig: int, *, principal: str | None = None,
             actor: str = "user") -> ProcessView:
        """Send `sig` to the process's group; after SIGKILL (or a signal it dies of within a few
        seconds) its outcome is recorded."""
        process_id = self.resolve(workspace, process_id, principal=principal)
        process = self._process(workspace, process_id, principal)
        if not process.running:
            # The process's state, not a policy, stands in the way: conflict (exit 5, HTTP 409).
            raise Conflict(f"process {process_id} has ended ({process.status}); nothing to signal",
                           rule="process.ended")
        sandbox = self._sandbox_of(process)
        self._sandboxes.signal(sandbox, process, sig)
        self._audit.record_made(actor=actor, action="process.kill", target=workspace, decision="allow", rule="sandbox",
                           result="signalled", detail={"id": process_id, "signal": sig})
        if sandbox is not None:
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                self._check(sandbox)
                if not self._process(workspace, process_id, principal).running:
                    break
                time.sleep(0.02)
        return ProcessView.of(self._process(workspace, process_id, principal))

    def wait(self, workspace: str, process_id: str, timeout: float, *, principal: str | None = None) -> ProcessView:
        """The process once it has ended; TimedOut when it still runs after `timeout` seconds."""
        process_id = self.resolve(workspace, process_id, principal=principal)
        process = self._process(workspace, process_id, principal)
        sandbox = self._sandbox_of(process)
        deadline = time.monotonic() + timeout
        while process.running and sandbox is not None:
            left = deadline - time.monotonic()
            with contextlib.suppress(Unavailable):
                self._sandboxes.wait(sandbox, process.id, max(min(left, 60.0), 0.0))
            self._check(sandbox)
            process = self._process(workspace, process_id, principal)
            if not process.running or time.monotonic() >= deadline:
                break
            sandbox = self._sandbox_of(process)
        if process.running:
            raise TimedOut(f"process {process_id} still runs after {timeout:g} s; `warden kill {workspace} "
                           f"{process_id}` stops it")
        return ProcessView.of(process)


# The refusals of a background start that count processes: ended ones count until collected.
_COUNTED = ("live.max_processes", "api.max_execs", "api.max_execs_per_bot")


def _folder_identity(path: str) -> list[int] | None:
    """Which folder `path` is now (device and inode; None when it is missing): one stat."""
    found = _stat(path)
    return None if found is None else [found.st_dev, found.st_ino]


def _mount_identity(path: str) -> list[int] | None:
    """Which folder (or file) `path` is now, for a read-only mount: device, inode and change time
    (None when missing). An inode number alone is reused by a folder removed and made again at
    once; nothing changes a sealed layer's own folder (or a trust file) but its replacement."""
    found = _stat(path)
    return None if found is None else [found.st_dev, found.st_ino, found.st_ctime_ns]


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _outcome(exited: Exited | None) -> tuple[int | None, int | None, bool]:
    """The exit code, signal and timed-out flag a process's record keeps of how it ended."""
    if exited is None:
        return None, None, False
    if exited.timed_out:
        return 124, None, True
    return exited.exit_code, exited.signal, False


def _stopped_as_it_started() -> StoppedAsItStarted:
    return StoppedAsItStarted("the workspace's live sandbox was stopped as the command started (`warden ps` says "
                              "why); run it again", rule="live.stopped")


def _parse_time(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None
