"""Two Warden processes' worth of apps on the same rows at once, with real bubblewrap sandboxes, on
SQLite and on PostgreSQL (when WARDEN_TEST_DATABASE_URL names one).

SQLite's write transaction locks the whole database, which made these orders safe there. On
PostgreSQL at READ COMMITTED each row is locked on its own (a transaction can wait for a row
another holds), each statement sees what was committed before it (two transactions can both read
a row neither has changed yet), and the audit's append takes one lock for the whole chain. Each
test orders the two apps (with hooks, no sleeps) the way that broke: a stop and a collector
deadlocked, an idle stop stopped a sandbox a start had just used, a foreground command and a
background start each counted the other's slot as free, a command sent to a sandbox a revoke was
stopping said the sandbox hung up, two starting runs both recorded one dead run lost.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli, isolated_environ
from tests.support.audit_outcomes import assert_one_outcome_per_run
from tests.support.nodes import ADMIN_URL, fresh_database
from tests.support.waiting import wait_until
from warden.adapters.processes import alive
from warden.bootstrap import App, bootstrap
from warden.core.errors import Unavailable, WardenError
from warden.core.runs import RunInProgress
from warden.interfaces.http.running import ExecSlots
from warden.services.runs import RunRequest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

WS, OTHER = "rows", "rows-too"
# Seconds a hook waits for the other app to get where the race needs it. On SQLite the other app
# waits for the database's lock meanwhile, which is the order that was always safe: the hook
# gives up and lets its app go on.
HOOK_WAIT = 2.0


@dataclass
class Home:
    path: Path
    environ: dict[str, str]
    actor: str  # the principal of bot `tester`'s grant on WS

    def app(self, *, clock: Any = None) -> App:
        return bootstrap(self.path, environ=self.environ, clock=clock)


@pytest.fixture(params=["sqlite", "postgresql"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Home]:
    path = tmp_path / "warden-home"
    path.mkdir()
    with contextlib.ExitStack() as stack:
        environ = {**isolated_environ(path), "WARDEN_WORKSPACE_SANDBOX_IDLE": "60s",
                   "WARDEN_API_MAX_EXECS_PER_BOT": "1"}
        cli = Cli(environ)
        if request.param == "postgresql":
            if not ADMIN_URL.startswith("postgresql"):
                pytest.skip("set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")
            environ["WARDEN_DATABASE_URL"] = stack.enter_context(fresh_database("warden_rows_"))
            environ["WARDEN_CLUSTER_KEY"] = base64.b64encode(os.urandom(32)).decode()
            assert cli("init").code == 0  # the cluster's keys, which a grant's token needs
        for name in (WS, OTHER):
            made = cli("create", name, "--template", "minimal")
            assert made.code == 0, made.stderr
            stack.callback(cli, "destroy", name, "--yes", "--no-archive")
        assert cli("bot", "register", "tester").code == 0
        app = bootstrap(path, environ=environ)
        try:
            actor = app.auth.authenticate(app.grants.grant(WS, "tester", ["read", "execute"]).token).actor
        finally:
            app.close()
        yield Home(path, environ, actor)


def _only_sandbox(app: App) -> Any:
    with app.registry.transaction(write=False) as tx:
        (sandbox,) = tx.sandboxes.of_workspace(WS)
    return sandbox


def _running(app: App) -> list[Any]:
    with app.registry.transaction(write=False) as tx:
        return [p for p in tx.processes.of_workspace(WS) if p.running]


def _recorded(app: App, action: str, run_id: str) -> int:
    return sum(1 for e in app.audit.list(limit=500) if e.action == action and e.detail.get("run_id") == run_id)


def test_a_stop_and_a_collector_of_one_of_its_processes_at_once_both_finish(home: Home) -> None:
    """A stop ends the records of the sandbox's running processes in one transaction; a `ps`
    collects one that ended meanwhile in another. The collector ends the row, then appends its
    audit event; the stop had ended an earlier row and appended its event, then waited for the
    collector's row, while the collector waited for the stop's lock on the audit chain: on
    PostgreSQL a deadlock, and the stop (a revoke's, an archive's) failed."""
    stopper, collector = home.app(), home.app()
    first = stopper.runs.start(RunRequest(WS, ["sleep", "300"])).id
    second = stopper.runs.start(RunRequest(WS, ["sleep", "300"])).id
    holds_the_row, stop_audited = threading.Event(), threading.Event()
    collected: list[object] = []

    def when(action: str, run_id: str, record: Any, before: Any = None, after: Any = None) -> Any:
        def hooked(**kwargs: Any) -> Any:
            ours = kwargs.get("action") == action and (kwargs.get("detail") or {}).get("run_id") == run_id
            if ours and before is not None:
                before()
            event = record(**kwargs)
            if ours and after is not None:
                after()
            return event
        return hooked

    # The collector appends the second's event only once the stop has appended the first's.
    collector.live._audit.record = when(  # type: ignore[method-assign]
        "run", second, collector.live._audit.record,
        before=lambda: (holds_the_row.set(), stop_audited.wait(HOOK_WAIT)))
    stopper.live._audit.record = when("run", first, stopper.live._audit.record,  # type: ignore[method-assign]
                                      after=stop_audited.set)

    def collect() -> None:
        try:
            collector.live.list(WS)
            collected.append("ok")
        except WardenError as exc:
            collected.append(exc)

    usage = stopper.live._sandboxes.usage

    def usage_as_the_second_ends(process: Any, exited: Any = None) -> Any:
        # Between the stop's look at what runs and its claim: the second ends, and a `ps` of
        # another Warden process is collecting it (its row ended, its event not yet appended).
        if process.id == second and exited is None:
            os.kill(int(process.meta["host_pid"]), signal.SIGKILL)
            sandbox = _only_sandbox(stopper)
            wait_until(lambda: any(s.id == second and s.status not in ("starting", "running")
                                   for s in stopper.live._sandboxes.listing(sandbox)),
                       message="the supervisor never saw the process end")
            threading.Thread(target=collect).start()
            assert holds_the_row.wait(30)
        return usage(process, exited)

    stopper.live._sandboxes.usage = usage_as_the_second_ends  # type: ignore[method-assign]
    try:
        stopper.live.stop_workspace(WS, reason="its grant was revoked")
        wait_until(lambda: collected, message="the collector never finished")
        assert collected == ["ok"]
        with stopper.registry.transaction(write=False) as tx:
            assert tx.sandboxes.of_workspace(WS) == []
            statuses = {p.id: p.status for p in tx.processes.of_workspace(WS)}
        assert statuses == {first: "killed", second: "killed"}  # SIGKILLed either way
        assert _recorded(stopper, "run", first) == 1 and _recorded(stopper, "run", second) == 1
        assert stopper.audit.verify()[1] is None
        assert_one_outcome_per_run(home.environ)
    finally:
        stopper.live.stop_workspace(WS, reason="the test ended")
        stopper.close()
        collector.close()


def test_an_idle_stop_spares_a_sandbox_a_start_used_since_it_looked(home: Home) -> None:
    """The sweep reads the sandboxes, finds one idle (nothing running, last used an idle period
    ago) and stops it; a start that recorded its process in it meanwhile had its process recorded
    lost ("idle") and killed, the start saying it was stopped, or worse, that it ran."""
    starter = home.app()
    # The sweeper's clock is an hour on: every sandbox it reads was last used an hour ago.
    sweeper = home.app(clock=lambda: datetime.now(UTC) + timedelta(hours=1))
    assert starter.runs.start(RunRequest(WS, ["true"])).status == "running"  # the sandbox up, idle once it ends
    started: list[str] = []
    runs_foreground = sweeper.live._runs_foreground

    def a_start_meanwhile(sandbox: Any) -> bool:
        # The sweep's last look before its stop: a command starts in the sandbox now.
        if not started:
            started.append(starter.runs.start(RunRequest(WS, ["sleep", "300"])).id)
        return runs_foreground(sandbox)

    sweeper.live._runs_foreground = a_start_meanwhile  # type: ignore[method-assign]
    try:
        sandbox = _only_sandbox(starter)
        wait_until(lambda: [s.status for s in starter.live._sandboxes.listing(sandbox)] == ["exited"],
                   message="`true` never ended")
        assert sweeper.live.sweep() == []
        (process,) = _running(starter)
        assert process.id == started[0] and process.status == "running"
        assert alive(int(process.meta["host_pid"]), int(process.meta["host_start"]))
        assert _only_sandbox(starter).id == process.sandbox_id
        assert not [e for e in starter.audit.list(target=WS, limit=100) if e.action in ("sandbox.stop", "run.lost")]
    finally:
        starter.live.stop_workspace(WS, reason="the test ended")
        starter.close()
        sweeper.close()


def _supervisors(app: App, workspace: str) -> int:
    """The live sandbox supervisors running in `workspace`'s folder (one per live sandbox)."""
    from warden.adapters.processes import workspace_processes
    from warden.core.live import SUPERVISOR_PATH

    found = 0
    for pid in workspace_processes(app.workspaces.get(workspace).path):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
            found += not argv[0].endswith(b"bwrap") and SUPERVISOR_PATH.encode() in argv  # not the bwraps around it
    return found


def test_a_bots_background_starts_at_once_share_one_sandbox_and_its_bound(home: Home) -> None:
    """Three Warden processes start the bot's first background command at once: each starts a
    live sandbox for the same key, one row wins, the others' sandboxes are stopped (no supervisor
    left running without a row), and api.max_execs_per_bot (1) admits one command of the three."""
    apps = [home.app() for _ in range(3)]
    together = threading.Barrier(len(apps))
    outcomes: list[object] = []

    def start(app: App) -> None:
        together.wait(30)
        try:
            outcomes.append(app.runs.start(RunRequest(WS, ["sleep", "300"], actor=home.actor), bot="tester").status)
        except WardenError as exc:
            outcomes.append(exc.rule)

    starts = [threading.Thread(target=start, args=(app,)) for app in apps]
    try:
        for thread in starts:
            thread.start()
        for thread in starts:
            thread.join(120)
        assert sorted(map(str, outcomes)) == ["api.max_execs_per_bot", "api.max_execs_per_bot", "running"]
        (process,) = _running(apps[0])
        assert _only_sandbox(apps[0]).id == process.sandbox_id
        wait_until(lambda: _supervisors(apps[0], WS) == 1, message="a losing start left its supervisor running")
        assert_one_outcome_per_run(home.environ)
    finally:
        apps[0].live.stop_workspace(WS, reason="the test ended")
        for app in apps:
            app.close()


def test_a_foreground_command_and_a_background_start_at_once_keep_to_the_bots_bound(home: Home) -> None:
    """api.max_execs_per_bot is 1. A foreground exec counts the bot's background processes in
    the registry, then takes its slot under the exec-slot folder's lock; a background start counts
    the foreground slots under that lock, then records its process. Each counted before the other
    had recorded its own, and both ran: two commands of a bot allowed one."""
    foreground_app, background_app = home.app(), home.app()
    foreground, background = ExecSlots.from_settings(foreground_app), ExecSlots.from_settings(background_app)
    counting, recorded = threading.Event(), threading.Event()
    outcome: list[object] = []
    counted = background.counted

    @contextlib.contextmanager
    def counted_noting(bot: str) -> Iterator[tuple[int, int]]:
        counting.set()
        with counted(bot) as held:
            yield held
        recorded.set()

    background.counted = counted_noting  # type: ignore[method-assign]

    def start() -> None:
        try:
            outcome.append(background_app.runs.start(RunRequest(WS, ["sleep", "300"], actor=home.actor),
                                                     bot="tester", busy=background.counted).status)
        except WardenError as exc:
            outcome.append(exc)

    starting = threading.Thread(target=start)
    counts = foreground._background
    assert counts is not None

    def counts_then_a_start(bot: str) -> tuple[int, int]:
        # The exec's count of background processes, then the start, before the exec takes its slot.
        seen = counts(bot)
        if not starting.is_alive() and not outcome:
            starting.start()
            assert counting.wait(60)
            recorded.wait(HOOK_WAIT)
        return seen

    foreground._background = counts_then_a_start
    try:
        with foreground.take("tester"):
            starting.join(60)
            assert foreground_app.live.running_counts("tester")[1] == 0  # the start was refused
        (refused,) = outcome
        assert isinstance(refused, Unavailable) and refused.rule == "api.max_execs_per_bot"
        assert_one_outcome_per_run(home.environ)
    finally:
        starting.join(60)
        foreground_app.live.stop_workspace(WS, reason="the test ended")
        foreground_app.close()
        background_app.close()


def test_a_foreground_command_sent_to_a_sandbox_a_revoke_is_stopping_says_so(home: Home) -> None:
    """A bot's command found its live sandbox, then a revoke (from another Warden process) claimed
    and stopped it before the command reached its supervisor: the command was refused "the live
    sandbox hung up (Connection reset by peer)", which reads as a broken sandbox."""
    runner, revoker = home.app(), home.app()
    assert runner.runs.execute(RunRequest(WS, ["true"], actor=home.actor)).exit_code == 0  # its sandbox up
    sandboxes = runner.live._sandboxes
    run = sandboxes.run

    def run_after_a_revoke(*args: Any, **kwargs: Any) -> Any:
        revoker.live.stop_principals([home.actor.partition("@")[2]])
        return run(*args, **kwargs)

    sandboxes.run = run_after_a_revoke  # type: ignore[method-assign]
    # Its bwrap not yet gone when the command's channel broke (the stop is a moment behind).
    sandboxes.alive = lambda sandbox: True  # type: ignore[method-assign]
    try:
        with pytest.raises(WardenError) as refused:
            runner.runs.execute(RunRequest(WS, ["true"], actor=home.actor))
        assert refused.value.rule == "live.stopped"
        assert "was stopped as it started" in refused.value.message and f"--workspace {WS}" in refused.value.message
    finally:
        runner.close()
        revoker.close()


def test_two_runs_starting_at_once_record_a_dead_run_lost_once(home: Home) -> None:
    """Each run's start marks this node's runs whose process died as lost. Two runs starting at
    once (in two workspaces: two lease rows) both read the dead run before either had removed it,
    and both audited it `run.lost`."""
    first, second = home.app(), home.app()
    dead = RunInProgress("0123456789abcdef", WS, "user", first.leases.node, 2**22 + 1, 0,
                         datetime.now(UTC).isoformat(), ("sleep", "1"))
    with first.registry.transaction() as tx:
        tx.runs.insert(dead)
    looked = {first: threading.Event(), second: threading.Event()}

    class Looking:
        """A start's check of the dead run's process, held until the other start has looked too."""

        def __init__(self, app: App) -> None:
            self._real, self._mine = app.runs._records._processes, looked[app]
            self._other = looked[second if app is first else first]

        def alive(self, pid: int, started: int | None = None) -> bool:
            if pid == dead.pid:
                self._mine.set()
                self._other.wait(HOOK_WAIT)
            return bool(self._real.alive(pid, started))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

    for app in (first, second):
        app.runs._records._processes = Looking(app)  # type: ignore[assignment]
    results: list[object] = []

    def run(app: App, name: str) -> None:
        try:
            results.append(app.runs.execute(RunRequest(name, ["true"])).exit_code)
        except WardenError as exc:
            results.append(exc)

    runs = [threading.Thread(target=run, args=(first, WS)), threading.Thread(target=run, args=(second, OTHER))]
    try:
        for thread in runs:
            thread.start()
        for thread in runs:
            thread.join(60)
        assert results == [0, 0]
        assert _recorded(first, "run.lost", dead.run_id) == 1
        assert first.audit.verify()[1] is None
        assert_one_outcome_per_run(home.environ)
    finally:
        first.close()
        second.close()


def test_the_audit_chain_holds_under_commands_of_several_processes_at_once(home: Home) -> None:
    """Runs and detached starts from four `warden` processes at once, in both
    workspaces: every event is chained after the one committed before it (on PostgreSQL, appenders
    on any node take turns under one lock), and `warden audit verify` says so."""
    script = "python -m warden run $0 --detach -- sleep 0.2 && python -m warden run $0 -- true"
    environ = {**home.environ, "PATH": f"{Path(sys.executable).parent}:{home.environ['PATH']}"}
    workers = [subprocess.Popen(["sh", "-c", script, name], env=environ, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE) for name in (WS, OTHER, WS, OTHER)]
    try:
        for worker in workers:
            _, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err.decode()
        verified = Cli(environ)("audit", "verify")
        assert verified.code == 0, verified.stderr + verified.stdout
        app = home.app()
        try:
            assert len([e for e in app.audit.list(limit=500) if e.action == "run.start"]) == 8
            assert_one_outcome_per_run(home.environ)
        finally:
            app.close()
    finally:
        for worker in workers:
            worker.kill()
        Cli(environ)("ps", WS)


def test_two_creates_of_one_bot_at_once_keep_to_its_workspace_bound(home: Home) -> None:
    """api.max_workspaces_per_bot: each create counted the bot's workspaces before its layer build
    and inserted after it, so two at once both found room. The count that holds is taken in the
    transaction that claims the name; on PostgreSQL those take turns."""
    first, second = home.app(), home.app()
    both = threading.Barrier(2, timeout=30)
    results: dict[str, str] = {}

    def create(app: App, name: str) -> None:
        claim = app.workspaces._create_claimed

        def claim_together(*args: Any, **kwargs: Any) -> Any:
            both.wait()  # each has passed every look before the claim
            return claim(*args, **kwargs)

        app.workspaces._create_claimed = claim_together  # type: ignore[method-assign]
        try:
            app.workspaces.create(name, actor="bot:greedy", template="minimal", most=1)
            results[name] = "created"
        except WardenError as exc:
            results[name] = exc.code
    threads = [threading.Thread(target=create, args=(app, name)) for app, name in ((first, "greedy-a"),
                                                                                   (second, "greedy-b"))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(results.values()) == ["conflict", "created"], results
    finally:
        for name, outcome in results.items():
            if outcome == "created":
                first.workspaces.destroy(name, archive=False)
        first.close()
        second.close()
