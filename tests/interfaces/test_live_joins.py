"""Live sandboxes at the joins of two operations, with real bubblewrap sandboxes: a lifecycle
change (archive, suspend, destroy) or a revoke ending a sandbox while its bot uses it.

The homes are test_live_concurrency's (a bot `tester` with a grant on WS, api.max_execs_per_bot
1), on SQLite and on PostgreSQL when WARDEN_TEST_DATABASE_URL names one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from tests.interfaces import test_live_concurrency
from tests.interfaces.test_live_concurrency import OTHER, WS, Home
from tests.support.audit_outcomes import assert_one_outcome_per_run, outcomes
from tests.support.waiting import wait_until
from warden.bootstrap import App
from warden.core.errors import Refused, WardenError
from warden.services.runs import RunRequest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

home = test_live_concurrency.home  # the fixture: a home on SQLite, and on PostgreSQL when there is one

_STOPS = {"archive": ("archive", WS), "suspend": ("suspend", WS),
          "destroy": ("destroy", WS, "--yes", "--no-archive")}


def _bot_on(app: App, workspace: str) -> str:
    """The principal of a grant of bot `tester` on `workspace`."""
    return app.auth.authenticate(app.grants.grant(workspace, "tester", ["read", "execute"]).token).actor


def _running(app: App) -> list[Any]:
    with app.registry.transaction(write=False) as tx:
        return [p for p in tx.processes.of_workspace(WS) + tx.processes.of_workspace(OTHER) if p.running]


@pytest.mark.parametrize("stop", sorted(_STOPS))
def test_a_lifecycle_stop_frees_the_exec_slots_of_the_processes_it_killed(home: Home, stop: str) -> None:
    """The bot's one slot (api.max_execs_per_bot 1) is taken by a background process in WS; the
    stop kills it. Its row stayed "running" until a later `ps` or sweep collected it, so the
    bot's next start (in another workspace) was refused over a limit nothing held."""
    app = home.app()
    try:
        elsewhere = _bot_on(app, OTHER)
        killed = app.runs.start(RunRequest(WS, ["sleep", "300"], actor=home.actor), bot="tester").id
        done = Cli(home.environ)(*_STOPS[stop])
        assert done.code == 0, done.stderr
        assert [p.id for p in _running(app)] == []
        started = app.runs.start(RunRequest(OTHER, ["sleep", "300"], actor=elsewhere), bot="tester")
        assert started.status == "running"
        (outcome,) = [e for e in outcomes(home.environ) if e["detail"].get("run_id") == killed]
        assert outcome["detail"]["signal"] == 9 and f"{stop}" in outcome["detail"]["stopped_by"], outcome
        assert_one_outcome_per_run(home.environ)
    finally:
        app.live.stop_workspace(OTHER, reason="the test ended")
        app.close()


def test_a_lifecycle_stop_another_process_claimed_first_frees_the_slots_too(home: Home) -> None:
    """The archive's stop finds the sandbox claimed by another Warden process's stop (a revoke)
    that got there first: that one records the processes killed, and the slot is free all the same
    once the archive returns."""
    archiver, revoker = home.app(), home.app()
    try:
        elsewhere = _bot_on(archiver, OTHER)
        archiver.runs.start(RunRequest(WS, ["sleep", "300"], actor=home.actor), bot="tester")
        collect = archiver.live._collect

        def revoked_first(sandbox: Any) -> int:
            # Between the archive's look at the sandbox and its claim: the other process claims it.
            revoker.live.stop_workspace(WS, reason="its grant was revoked")
            return collect(sandbox)

        archiver.live._collect = revoked_first  # type: ignore[method-assign]
        archiver.lifecycle.archive(WS)
        assert [p.id for p in _running(archiver)] == []
        started = archiver.runs.start(RunRequest(OTHER, ["sleep", "300"], actor=elsewhere), bot="tester")
        assert started.status == "running"
        assert_one_outcome_per_run(home.environ)
    finally:
        archiver.live.stop_workspace(OTHER, reason="the test ended")
        archiver.close()
        revoker.close()


def test_a_foreground_command_its_grant_revoke_killed_says_why(home: Home) -> None:
    """A bot's foreground command runs in its live sandbox; `warden revoke` stops that sandbox
    and the command with it. It ended 137 with no word, where a lifecycle change's kill says who
    stopped it: it now says why, and its audited outcome too."""
    app = home.app()
    ended: list[Any] = []
    running = threading.Thread(target=lambda: ended.append(
        app.runs.execute(RunRequest(WS, ["sleep", "300"], actor=home.actor))))
    try:
        running.start()
        wait_until(lambda: _foreground_running(app), timeout=60, message="the command never started")
        revoked = Cli(home.environ)("revoke", WS, "tester")
        assert revoked.code == 0, revoked.stderr
        running.join(60)
        (result,) = ended
        assert (result.exit_code, result.signal) == (137, 9)
        assert result.stderr.endswith("warden: the command was stopped: its grant was revoked\n"), result.stderr
        (outcome,) = [e for e in outcomes(home.environ) if e["detail"].get("argv") == ["sleep", "300"]]
        assert outcome["result"] == "137" and outcome["detail"]["stopped_by"] == "its grant was revoked", outcome
    finally:
        running.join(60)
        app.close()


def _foreground_running(app: App) -> bool:
    with app.registry.transaction(write=False) as tx:
        sandboxes = tx.sandboxes.of_workspace(WS)
    return any(seen.status == "running" and not seen.background
               for sandbox in sandboxes for seen in app.live._sandboxes.listing(sandbox))


def test_a_sandbox_whose_bwrap_alone_is_killed_as_it_starts_is_not_used(home: Home,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive's drain killed bwrap as the sandbox started, but its init does not die with bwrap
    (a live sandbox outlives Warden). Released, the init forked the supervisor; when Warden, slow
    on a busy machine, first looked after that fork, it never saw bwrap gone: the supervisor
    answered, and the start used a sandbox for a workspace being archived (CI: "DID NOT RAISE",
    now and then). Here Warden's first look waits for the fork."""
    from warden.adapters.sandbox import live as live_adapter

    children = live_adapter._children

    def late_look(pid: int) -> list[int]:
        found: list[int] = []

        def forked() -> bool:
            found[:] = children(pid)
            return bool(found)

        wait_until(forked, timeout=30, message="the init's child")
        return found

    monkeypatch.setattr(live_adapter, "_children", late_look)
    app = home.app()
    adapter = app.live._sandboxes
    release = adapter._release  # type: ignore[attr-defined]
    inits: list[int] = []

    def bwrap_killed(proc: subprocess.Popen[bytes], control: Any, *args: Any, **kwargs: Any) -> Any:
        # Once bwrap has made the sandbox's init (which waits on the block pipe), bwrap alone is killed.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        wait_until(lambda: children.read_text().split() != [], timeout=30, message="bwrap's init")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        started = release(proc, control, *args, **kwargs)
        inits.append(started.meta["init_pid"])
        return started

    adapter._release = bwrap_killed  # type: ignore[attr-defined]
    try:
        with pytest.raises(WardenError) as refused:
            app.runs.start(RunRequest(WS, ["sleep", "300"], actor=home.actor))
        assert isinstance(refused.value, Refused) and "could not be set up" in refused.value.message, refused.value
        assert inits == []
        with app.registry.transaction(write=False) as tx:
            assert tx.sandboxes.of_workspace(WS) == []
        assert _running(app) == []
    finally:
        app.close()


@pytest.mark.parametrize(("stop", "done"), [("archive", "archived"), ("destroy", "destroyed")])
def test_a_sandbox_an_archive_kills_as_it_starts_is_refused_saying_so(home: Home, stop: str, done: str) -> None:
    """`warden archive` (or destroy) kills every process in the workspace's folder, a live
    sandbox's bwrap still starting among them: the start said "the sandbox could not be set up
    (bwrap exited with -15); run `warden doctor`", as if this machine lacked something."""
    app = home.app()
    adapter = app.live._sandboxes
    release = adapter._release  # type: ignore[attr-defined]
    stopping: list[subprocess.Popen[bytes]] = []

    def killed_as_it_starts(proc: subprocess.Popen[bytes], *args: Any, **kwargs: Any) -> Any:
        # bwrap is started and not yet released: the lifecycle change comes now, and kills it.
        stopping.append(subprocess.Popen([sys.executable, "-m", "warden", *_STOPS[stop]], env=home.environ,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        proc.wait(60)
        return release(proc, *args, **kwargs)

    adapter._release = killed_as_it_starts  # type: ignore[attr-defined]
    try:
        with pytest.raises(WardenError) as refused:
            app.runs.start(RunRequest(WS, ["sleep", "300"]))
        assert isinstance(refused.value, Refused) and refused.value.code == "conflict", refused.value
        assert refused.value.message == f"workspace {WS!r} was {done} while its sandbox started", refused.value
        (process,) = stopping
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()
        assert_one_outcome_per_run(home.environ)
    finally:
        for process in stopping:
            process.kill()
        app.close()
