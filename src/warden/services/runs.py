"""Run a command in a workspace's sandbox: the one way Warden executes bot commands.

Order of a run: look up the workspace → limits (settings, then per-run overrides) → the
command allowlist when `sandbox.enabled` is on → the network decision → the path policy
(zones, allowed/denied paths, protected files) → the sandbox adapter → one audit event.
Refusals happen before anything starts and carry exit status 126.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warden.adapters.store import runs_in_progress as in_progress
from warden.core.bwrap_argv import Bind
from warden.core.errors import Conflict, Denied, InvalidInput, Locked, NotFound, Unavailable, WardenError
from warden.core.limits import Limits, apply_overrides
from warden.core.runs import RunResult

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.network import NetworkPolicy
    from warden.core.workspaces import WorkspaceRecord
    from warden.services.leases import Lease

__all__ = ["REFUSED_EXIT", "RunService"]

REFUSED_EXIT = 126
Sink = Callable[[bytes], None]
_SYSTEM_BINS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _refused(exc: WardenError) -> WardenError:
    """Mark an error as "Warden refused to start the command" (exit status 126)."""
    exc.exit_status = REFUSED_EXIT  # type: ignore[attr-defined]
    return exc


@dataclass
class _Intent:
    """One run between its lease's take and release: what both transactions write."""

    run_id: str
    record: WorkspaceRecord
    actor: str
    argv: list[str]
    detail: dict[str, Any]
    others: bool = False
    outcome: Any = None


class RunService:
    """Runs commands in workspace sandboxes and audits every run."""

    def __init__(self, app: App) -> None:
        self._app = app

    # -- inputs --------------------------------------------------------------------------
    def default_limits(self) -> Limits:
        s = self._app.settings
        return Limits(memory=s.get_size("sandbox.memory"), cpu_seconds=s.get_int("sandbox.cpu_seconds"),
                      pids=s.get_int("sandbox.pids"), open_files=s.get_int("sandbox.open_files"),
                      file_size=s.get_int("sandbox.max_file_size_mb") * 1024 * 1024,
                      timeout_s=s.get_seconds("sandbox.timeout"))

    def network_policy(self, net: str | None, allow_domains: Sequence[str]) -> NetworkPolicy | None:
        """None for no network; the parsed allowlist otherwise."""
        from warden.core.network import NetworkPolicy

        s = self._app.settings
        mode = net or ("allow" if s.get_bool("network.enabled") else "none")
        if mode not in ("none", "allow"):
            raise InvalidInput(f"bad --net {mode!r}: use none or allow")
        if mode == "none":
            if allow_domains:
                raise InvalidInput("--allow-domain needs --net allow")
            return None
        allowed = [*s.get_list("network.allowed_domains"), *allow_domains]
        if not allowed:
            raise InvalidInput("--net allow needs at least one --allow-domain DOMAIN "
                               "(or network.allowed_domains in the settings)")
        return NetworkPolicy.parse(allowed, s.get_list("network.denied_domains"))

    def _path_policy(self, record: WorkspaceRecord, session: str | None) -> dict[str, Any]:
        """Zones, allowed and denied paths from the path policy (services/sandbox_paths)."""
        from warden.core.paths import is_inside
        from warden.services.sandbox_paths import effective_path_policy

        eff = effective_path_policy(self._app, record, session)
        binds: list[Bind] = []
        skipped: list[str] = []
        for path, mode in eff.allowed:
            if any(is_inside(path, root) for root in eff.system_blocked):
                continue
            # An allowed path that would show Warden's own state (a hand-edited `/`, say) is never
            # mounted; `sandbox add` refuses such paths in the first place. This is the check by
            # name; the one by inode is made when the path is opened for the mount.
            why = self._app.sandbox_paths.exposure(path)
            if why is None:
                binds.append(Bind(path, mode))
            else:
                skipped.append(f"{path} ({why})")
        covering = [d for d in eff.denied if is_inside(eff.workspace, d)]
        return {"ro_zones": [z.host_path for z in eff.zones if z.mode == "ro"], "binds": binds,
                "denied": list(eff.denied), "protected": list(eff.readonly), "skipped": skipped,
                "covering_deny": covering}

    # -- the run -------------------------------------------------------------------------
    def run(self, name: str, argv: Sequence[str], *, timeout: float | None = None,
            memory: str | int | None = None, cpu: int | None = None, pids: int | None = None,
            net: str | None = None, allow_domains: Sequence[str] = (),
            env: Mapping[str, str] | None = None, stdin: bytes | str | int | None = None,
            on_stdout: Sink | None = None, on_stderr: Sink | None = None, capture: bool = True,
            on_notice: Sink | None = None, actor: str = "user", session: str | None = None,
            ro_paths: Sequence[str] = (), max_output: int | None = None,
            within: Lease | None = None) -> RunResult:
        """Run `argv` in workspace `name`; the command's status, output and timing (captured
        output kept up to `max_output` bytes per stream, the runner's own cap by default).
        `within`: an exclusive lease on `name` the caller holds (repair reinstalling packages),
        under which the run goes instead of taking a shared one."""
        from warden.adapters.sandbox.host import build_spec
        from warden.adapters.sandbox.runner import run_sandboxed

        if isinstance(argv, str) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise InvalidInput("give the command as a non-empty list of strings (argv), e.g. ['python', '-V']")
        try:
            record = self._app.workspaces.get(name)
        except (Locked, Unavailable, NotFound) as exc:
            # No such workspace, or the registry is locked or lost: the command never starts
            # (126 whatever the reason; the code says which).
            raise _refused(exc) from None
        if record.status != "ready":
            fix = {"archived": f"`warden unarchive {name}` brings it back",
                   "suspended": f"`warden resume {name}` reopens it"}.get(
                       record.status, f"`warden health {name} --repair` makes it ready")
            raise _refused(Conflict(f"workspace {name!r} is {record.status} and cannot run commands; {fix}"))
        limits = apply_overrides(self.default_limits(), timeout=timeout, memory=memory, cpu=cpu, pids=pids)
        policy = self.network_policy(net, allow_domains)
        ws = os.path.realpath(record.path)
        audit_base = {"argv": list(argv), "limits": limits.to_json(),
                      "network": policy.to_json() if policy else "none",
                      "env_keys": sorted((env or {}).keys())}
        if self._app.settings.get_bool("sandbox.enabled"):
            from warden.core.commands import check_command

            decision = check_command(argv, self._app.settings.get_list("sandbox.allowed_commands"),
                                     trusted_dirs=[*_SYSTEM_BINS, f"{ws}/.venv/bin", f"{ws}/node_modules/.bin"],
                                     cwd=ws, env=env or {})
            if not decision.allowed:
                raise self._refuse(Denied(f"{decision.reason} (rule {decision.rule})", rule=decision.rule),
                                   actor, name, audit_base)
        paths = self._path_policy(record, session)
        if paths["covering_deny"]:
            # Every file of the workspace is denied (fs and `sandbox check` say so): running in it
            # would mean running in an empty, unusable folder, so refuse the way fs does.
            where = paths["covering_deny"][0]
            covered = Denied(f"workspace {name!r} lies under the denied path {where}; `warden sandbox list "
                             f"--workspace {name}` shows where it is denied", rule="paths.denied")
            raise self._refuse(covered, actor, name, audit_base)
        try:  # the disk quota (services/quota.py): nothing starts when the home's disk is nearly full
            self._app.quota.check_free()
        except Unavailable as exc:
            raise self._refuse(exc, actor, name, audit_base, result="unavailable", rule=exc.rule or "") from None
        run_id = os.urandom(8).hex()
        audit_base["run_id"] = run_id
        intent = _Intent(run_id, record, actor, list(argv), audit_base)
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._lease(name, intent, within))
            except (Locked, Unavailable, Conflict) as exc:
                # A lifecycle change holds (or changed) the workspace, or the intent could not be
                # recorded (a full disk, a locked registry): nothing runs without its audit row.
                raise _refused(exc) from None
            # Allowed paths are opened now, by descriptor with no link followed, judged by inode
            # against Warden's state, and mounted by that descriptor (adapters/sandbox/mountsrc).
            with self._open_binds(paths["binds"], ws) as (opened_binds, opened_fds, skipped):
                # The person's repositories in allowed read-write folders are theirs too: bound
                # read-only, and what a bot leaves there moved aside after the run.
                binds, bind_fds, allowed_git = self._guard_allowed_git(ws, opened_binds, opened_fds, held,
                                                                       intent.others)
                paths["skipped"] += skipped
                notice = on_notice or on_stderr
                for line in paths["skipped"]:
                    if notice is not None:
                        notice(f"warden: not mounting the allowed path {line}\n".encode())
                if paths["skipped"]:
                    audit_base["skipped_paths"] = paths["skipped"]
                layers = [*ro_paths, *self._layer_paths(record)]
                from warden.adapters.gitguard import GitGuard

                # Git control structures: the person's are bound read-only; whatever a bot leaves is
                # moved aside after the run (and, if this process dies first, before the next one).
                guard = GitGuard(ws)
                git = guard.before(bot_active=intent.others)
                self._report_quarantine(git.quarantined, actor, name, notice)
                try:
                    spec = build_spec(ws, argv, caller_env=self._app.environ, env=dict(env or {}),
                                      ro_paths=layers, extra_binds=binds, bind_fds=bind_fds, ro_zones=paths["ro_zones"],
                                      denied=paths["denied"],
                                      protected=[*paths["protected"], *(f"{ws}/{p}" for p in git.protected)],
                                      network=policy is not None,
                                      tmp_size=limits.memory)
                except Denied as exc:
                    for other in (guard, *(g for _, g in allowed_git)):
                        other.after()
                    raise self._refuse(exc, actor, name, audit_base) from None
                refusals: list[str] = []
                lock = threading.Lock()

                def say(line: str) -> None:
                    """One line of Warden's own on the run's stderr (kept, and shown as it comes)."""
                    with lock:
                        refusals.append(line + "\n")
                    if notice is not None:
                        notice((line + "\n").encode())

                def on_net_event(event: Any) -> None:
                    if not event.allowed:
                        say(f"warden: network refused {event.method} {event.host}:{event.port}: {event.reason}")

                stdin_arg: bytes | int | None = stdin.encode() if isinstance(stdin, str) else stdin
                try:
                    caps = {"max_capture": max_output} if max_output is not None else {}
                    try:
                        # The disk quota watches the workspace while the command runs; no single
                        # file may pass the bytes left (RLIMIT_FSIZE).
                        with self._app.quota.watch(ws) as watcher:
                            outcome = run_sandboxed(spec, self._app.quota.capped(limits, watcher.start),
                                                    stdin=stdin_arg, on_stdout=on_stdout,
                                                    on_stderr=on_stderr, capture=capture, network=policy,
                                                    on_net_event=on_net_event, on_started=watcher.arm, **caps)
                    finally:
                        moved = guard.after().quarantined
                        for where, other in allowed_git:
                            moved += tuple(f"{where}/{path}" for path in other.after().quarantined)
                    self._report_quarantine(moved, actor, name, notice)
                except Unavailable as exc:
                    from warden.adapters.sandbox.doctor import userns_fix

                    hint = userns_fix() if exc.rule == "sandbox.setup_failed" else None
                    message = exc.message + (f"; {hint}" if hint else "")
                    raise self._refuse(Unavailable(message, rule=exc.rule), actor, name, audit_base,
                                       result="unavailable", rule=exc.rule or "sandbox.unavailable") from None
                except Denied as exc:  # a protected path became a link between the check and the mount
                    raise self._refuse(exc, actor, name, audit_base) from None
                quota_note = self._app.quota.stop_note(watcher, name, outcome.exit_code)
                if watcher.notes:  # the quota held by rescans, or its watcher failed
                    audit_base["quota_notes"] = list(watcher.notes)
                if quota_note is not None:
                    audit_base["stopped_by"] = str(watcher.breach)
                    say(quota_note)
                from warden.core.runs import explain_failure

                why = explain_failure(outcome.exit_code, outcome.signal,
                                      outcome.stderr_tail.decode("utf-8", "replace"),
                                      oom_killed=outcome.oom_killed, network=policy is not None,
                                      max_file_mb=self._app.settings.get_int("sandbox.max_file_size_mb"),
                                      memory=limits.memory) if outcome.exit_code != 0 and quota_note is None else None
                if why is not None:
                    say(why)
                stopper = self._stopped_by(name, outcome.signal) if quota_note is None else None
                if stopper is not None:
                    audit_base["stopped_by"] = stopper
                    say(f"warden: the command was stopped by {stopper}")
                intent.outcome = outcome  # audited with the lease's release, in one transaction
                stderr = outcome.stderr.decode("utf-8", "replace") + "".join(refusals)
                if outcome.truncated:
                    limit = f"{max_output} bytes" if max_output is not None else "the capture limit"
                    stderr += f"\nwarden: output beyond {limit} per stream was dropped\n"
                return RunResult(exit_code=outcome.exit_code, stdout=outcome.stdout.decode("utf-8", "replace"),
                                 stderr=stderr, duration_s=outcome.duration_s, timed_out=outcome.timed_out,
                                 signal=outcome.signal, stopped_by=watcher.breach)

    def _refuse(self, exc: WardenError, actor: str, name: str, detail: Mapping[str, Any], *,
                result: str = "refused", rule: str | None = None) -> WardenError:
        """Audit a run Warden did not start, and mark `exc` so its status is 126."""
        self._app.audit.record(actor=actor, action="run", target=name, decision="deny",
                               rule=rule if rule is not None else exc.rule or "sandbox", result=result,
                               detail=dict(detail))
        return _refused(exc)

    @contextlib.contextmanager
    def _lease(self, name: str, intent: _Intent, within: Lease | None) -> Iterator[None]:
        """The run's shared lease with its intent and outcome written as it is taken and given
        back; under a caller's exclusive lease, the same writes in transactions of their own."""
        if within is None:
            with self._app.leases.hold(name, "shared", "run", on_take=self._take(intent),
                                       on_release=self._give_back(intent)):
                yield
            return
        if within.workspace != name or within.mode != "exclusive":
            raise InvalidInput(f"a run in {name!r} can only go under that workspace's exclusive lease")
        with self._app.db.transaction() as tx:
            self._app.leases.check(tx, within)
            self._take(intent)(tx, within)
        try:
            yield
        finally:
            with self._app.db.transaction() as tx:
                self._give_back(intent)(tx)

    def _stopped_by(self, name: str, sig: int | None) -> str | None:
        """Which lifecycle command ended a run killed by a signal (archive, destroy and suspend
        stop the runs in their way), or None."""
        if sig not in (9, 15):
            return None
        for held in self._app.leases.state(name).held:
            if held.mode != "shared":
                return f"`warden {held.holder.op}` (pid {held.holder.pid})"
        return None

    def _guard_allowed_git(self, ws: str, binds: list[Bind], fds: list[tuple[str, int]],
                           held: contextlib.ExitStack, bot_active: bool,
                           ) -> tuple[list[Bind], list[tuple[str, int]], list[tuple[str, Any]]]:
        """For each allowed read-write folder outside the workspace (open as a judged descriptor):
        its git guard, and read-only binds of the person's `.git` entries in it."""
        import hashlib

        opened = dict(fds)
        out_binds, out_fds = list(binds), list(fds)
        guards: list[tuple[str, Any]] = []
        for bind in binds:
            if bind.mode != "rw" or bind.path not in opened:
                continue
            from warden.adapters.gitguard import GitGuard
            from warden.adapters.sandbox.mountsrc import open_beneath

            state = "git-" + hashlib.sha256(bind.path.encode()).hexdigest()[:16] + ".json"
            guard = GitGuard(opened[bind.path], state_dir=os.path.join(ws, ".warden"), state_name=state)
            for rel in guard.before(bot_active=bot_active).protected:
                try:
                    fd = open_beneath(opened[bind.path], rel)
                except (OSError, Denied):
                    continue
                held.callback(os.close, fd)
                out_binds.append(Bind(f"{bind.path}/{rel}", "ro"))
                out_fds.append((f"{bind.path}/{rel}", fd))
            guards.append((bind.path, guard))
        return out_binds, out_fds, guards

    def _open_binds(self, binds: list[Bind], ws: str
                    ) -> contextlib.AbstractContextManager[tuple[list[Bind], list[tuple[str, int]], list[str]]]:
        if not binds:  # the common case: nothing to open, and mountsrc is not even imported
            return contextlib.nullcontext(([], [], []))
        from warden.adapters.sandbox.mountsrc import open_binds

        guard_of = self._app.sandbox_paths.state_guard
        return open_binds(binds, lambda: guard_of(ws), ws)

    def _take(self, intent: _Intent) -> Callable[[Any, Any], None]:
        """What is written, in the transaction that takes the run's lease, before anything starts:
        the workspace checked (still this one, still ready), the runs of this node whose process
        died marked lost, and the run's audit intent and in-progress row."""
        def write(tx: Any, _lease: Any) -> None:
            from warden.adapters.processes import start_time
            from warden.adapters.store import workspaces as rows

            name = intent.record.name
            current = rows.get(tx, name)
            if current is None or current.id != intent.record.id or current.status != "ready":
                now = current.status if current is not None else "gone"
                raise Conflict(f"workspace {name!r} changed ({now}) while the run was being prepared; "
                               "run it again")
            # Another run in progress here, or one that died unswept: what git files appeared
            # since are a bot's (adapters/gitguard).
            intent.others = bool(in_progress.of_workspace(tx, name))
            self.mark_lost(tx)
            leases = self._app.leases
            in_progress.insert(tx, intent.run_id, name, intent.actor, leases.node, os.getpid(),
                               start_time(os.getpid()) or 0, self._app.clock().isoformat(), intent.argv)
            self._app.audit.record(actor=intent.actor, action="run.start", target=name, decision="allow",
                                   rule="sandbox", result="started", detail=dict(intent.detail), tx=tx)

        return write

    def _give_back(self, intent: _Intent) -> Callable[[Any], None]:
        """What is written with the lease's release: the outcome (when the command ran) and the
        end of the in-progress row, together."""
        def write(tx: Any) -> None:
            if intent.outcome is not None:
                self._audit_run(tx, intent.actor, intent.record.name, intent.detail, intent.outcome)
            in_progress.delete(tx, intent.run_id)

        return write

    def mark_lost(self, tx: Any) -> list[dict[str, str]]:
        """Audit as `run.lost` the runs of this node whose process died before their outcome was
        written (a killed `warden run` or `serve`); returns their run ids and workspaces."""
        from warden.adapters.processes import alive

        lost = []
        for row in in_progress.of_node(tx, self._app.leases.node):
            if not alive(int(row["pid"]), int(row["pid_start"]) or None):
                self._app.audit.record(actor=str(row["actor"]), action="run.lost", target=str(row["workspace"]),
                                       decision="allow", rule="sandbox", result="lost",
                                       detail={"run_id": row["run_id"], "started_at": row["started_at"],
                                               "pid": row["pid"], "argv": row["argv"]}, tx=tx)
                in_progress.delete(tx, str(row["run_id"]))
                lost.append({"run_id": str(row["run_id"]), "workspace": str(row["workspace"])})
        return lost

    def _report_quarantine(self, moved: Sequence[str], actor: str, name: str, notice: Sink | None) -> None:
        """Say (and audit) which git control structures a bot left and Warden moved aside."""
        if not moved:
            return
        self._app.audit.record(actor=actor, action="git.quarantine", target=name, decision="deny",
                               rule="git.control_files", result="moved", detail={"moved": list(moved)})
        if notice is not None:
            notice(f"warden: moved aside git control files a command made ({', '.join(moved)}): a "
                   "person's git would have run the programs they name; git files are the "
                   "person's\n".encode())

    def _layer_paths(self, record: WorkspaceRecord) -> list[str]:
        """Env layers the workspace uses (bound read-only); filled in by the workspaces feature."""
        layers = record.meta.get("ro_paths") if isinstance(record.meta, Mapping) else None
        return [p for p in layers if isinstance(p, str)] if isinstance(layers, list) else []

    def _audit_run(self, tx: Any, actor: str, name: str, base: dict[str, Any], outcome: Any) -> None:
        from warden.adapters.store import workspaces as rows

        events = [e.to_json() for e in outcome.net_events]
        detail = {**base, "exit_code": outcome.exit_code, "duration_s": round(outcome.duration_s, 4),
                  "timed_out": outcome.timed_out, "signal": outcome.signal,
                  "oom_killed": outcome.oom_killed, "limits_via": outcome.limits_via,
                  "seccomp": outcome.seccomp, "truncated": outcome.truncated}
        if events:
            detail["network_events"] = events[:100]
        for event in events:
            if not event["allowed"]:
                self._app.audit.record(actor=actor, action="network.refused", target=name,
                                       decision="deny", rule=str(event["rule"]),
                                       result="refused", detail=event, tx=tx)
        self._app.audit.record(actor=actor, action="run", target=name, decision="allow",
                               rule="sandbox", result=str(outcome.exit_code), detail=detail, tx=tx)
        rows.update(tx, name, {"last_accessed": self._app.clock().isoformat()})
