"""A background process started while another Warden process stops the workspace's live sandbox
(a revoke, an archive, a destroy, a sweep), with real bubblewrap sandboxes.

A stop claims the sandbox (deletes its row, records its processes killed) before it ends it
(services/live.py `_stop`). A start that found the sandbox before that claim must not leave a
process the stop kills with nothing to record it: its row "running" for good, with no sandbox,
holding its bot's exec slot, and `warden run --detach` saying it started.

On SQLite and on PostgreSQL (when WARDEN_TEST_DATABASE_URL names one): on PostgreSQL the claim
and the start's record are at READ COMMITTED, where the row lock of the start's `touch` or of the
stop's delete, not one lock on the whole database, decides which goes first.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli, isolated_environ
from tests.support.audit_outcomes import assert_one_outcome_per_run
from tests.support.nodes import ADMIN_URL, fresh_database
from tests.support.waiting import wait_until
from warden.adapters.processes import alive
from warden.bootstrap import App, bootstrap
from warden.core.errors import WardenError
from warden.services.runs import RunRequest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

WS = "claimed"


_ENVIRON: dict[Path, dict[str, str]] = {}  # each test home's environment (its registry's URL)


@pytest.fixture(params=["sqlite", "postgresql"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "warden-home"
    path.mkdir()
    with contextlib.ExitStack() as stack:
        environ = {**isolated_environ(path), "WARDEN_WORKSPACE_SANDBOX_IDLE": "60s"}
        if request.param == "postgresql":
            if not ADMIN_URL.startswith("postgresql"):
                pytest.skip("set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")
            environ["WARDEN_DATABASE_URL"] = stack.enter_context(fresh_database("warden_claim_"))
        _ENVIRON[path] = environ
        cli = Cli(environ)
        assert cli("create", WS, "--template", "minimal").code == 0
        first = cli("run", WS, "--detach", "--", "sleep", "300")
        assert first.code == 0, first.stderr
        try:
            yield path
        finally:
            cli("destroy", WS, "--yes", "--no-archive")
            _ENVIRON.pop(path, None)


def _app(home: Path) -> App:
    return bootstrap(home, environ=_ENVIRON[home])


def _stale(app: App) -> None:
    """The starter's first look finds the sandbox as it was before the stop's claim."""
    live = app.live
    with app.registry.transaction(write=False) as tx:
        (before,) = tx.sandboxes.of_workspace(WS)
    found = live._sandbox_for
    looks = iter([before])

    def sandbox_for(*args: Any, **kwargs: Any) -> Any:
        return next(looks, None) or found(*args, **kwargs)

    live._sandbox_for = sandbox_for  # type: ignore[method-assign]


def _on_stop(app: App, action: Callable[[], None]) -> None:
    """`action` runs in the stop, after its claim and before the sandbox ends."""
    sandboxes = app.live._sandboxes
    stop = sandboxes.stop

    def stopping(sandbox: Any) -> None:
        action()
        stop(sandbox)

    sandboxes.stop = stopping  # type: ignore[method-assign]


def _unaccounted(home: Path) -> list[str]:
    """Processes recorded running whose sandbox has no row, or whose command is not alive."""
    app = _app(home)
    try:
        with app.registry.transaction(write=False) as tx:
            rows = {s.id for s in tx.sandboxes.of_workspace(WS)}
            processes = tx.processes.of_workspace(WS)
        return [f"{p.id} {p.status} in {p.sandbox_id}" for p in processes
                if p.running and (p.sandbox_id not in rows
                                  or not alive(int(p.meta["host_pid"]), int(p.meta["host_start"])))]  # type: ignore[call-overload]
    finally:
        app.close()


def test_a_start_that_found_the_sandbox_before_a_stop_claimed_it_does_not_record_into_it(home: Path) -> None:
    stopper, starter = _app(home), _app(home)
    try:
        _stale(starter)
        started: list[str] = []
        _on_stop(stopper, lambda: started.append(starter.runs.start(RunRequest(WS, ["sleep", "300"])).id))
        stopper.live.stop_workspace(WS, reason="its grant was revoked")
        assert len(started) == 1
        assert _unaccounted(home) == []
        with stopper.registry.transaction(write=False) as tx:
            process = tx.processes.get(started[0])
        assert process is not None and process.status == "running"  # in a sandbox of its own, started after
        assert_one_outcome_per_run(_ENVIRON[home])
    finally:
        stopper.close()
        starter.close()


def test_a_start_whose_process_a_stop_claimed_while_it_spawned_it_says_so(home: Path) -> None:
    stopper, starter = _app(home), _app(home)
    claimed, go = threading.Event(), threading.Event()
    _on_stop(stopper, lambda: (claimed.set(), go.wait(30)))
    stopping = threading.Thread(target=lambda: stopper.live.stop_workspace(WS, reason="its grant was revoked"))
    spawn = starter.live._sandboxes.spawn

    def spawn_while_claimed(*args: Any, **kwargs: Any) -> Any:
        # The process is recorded "starting" in the sandbox; the stop claims both now.
        stopping.start()
        assert claimed.wait(30)
        return spawn(*args, **kwargs)

    starter.live._sandboxes.spawn = spawn_while_claimed  # type: ignore[method-assign]
    try:
        with pytest.raises(WardenError) as refused:
            starter.runs.start(RunRequest(WS, ["sleep", "300"]))
        assert "stopped as the command started" in str(refused.value)
        go.set()
        stopping.join(30)
        wait_until(lambda: _unaccounted(home) == [], message="a process recorded running was not")
        with stopper.registry.transaction(write=False) as tx:
            statuses = sorted(p.status for p in tx.processes.of_workspace(WS))
        assert statuses == ["killed", "killed"]
        # The stop audited the start's process killed; the start's refusal is no second outcome.
        assert_one_outcome_per_run(_ENVIRON[home])
    finally:
        go.set()
        stopper.close()
        starter.close()


def test_a_look_while_a_process_starts_neither_records_it_lost_nor_fails_its_start(home: Path) -> None:
    """A `ps` (or a server's sweep) between the start's record and its spawn finds a process its
    supervisor does not list yet: it is starting, not lost."""
    looker, starter = _app(home), _app(home)
    spawn = starter.live._sandboxes.spawn

    def spawn_after_a_look(*args: Any, **kwargs: Any) -> Any:
        looker.live.list(WS)
        return spawn(*args, **kwargs)

    starter.live._sandboxes.spawn = spawn_after_a_look  # type: ignore[method-assign]
    try:
        started = starter.runs.start(RunRequest(WS, ["sleep", "300"]))
        assert started.status == "running"
        assert _unaccounted(home) == []
        with looker.registry.transaction(write=False) as tx:
            process = tx.processes.get(started.id)
        assert process is not None and process.status == "running" and process.ended_at is None
        assert "run.lost" not in [e.action for e in looker.audit.list(target=WS, limit=100)]
        assert_one_outcome_per_run(_ENVIRON[home])
    finally:
        looker.close()
        starter.close()


def test_starts_and_stops_at_once_leave_every_process_accounted_for(home: Path) -> None:
    """No hook orders them: a starter and a stopper in two processes' worth of apps, at once, for
    a while. Every process recorded running is alive in a sandbox that has a row; each start
    either started or said the sandbox was stopped under it."""
    stopper, starter = _app(home), _app(home)
    ended = threading.Event()
    problems: list[str] = []

    def stop_again_and_again() -> None:
        while not ended.is_set():
            try:
                stopper.live.stop_workspace(WS, reason="its grant was revoked")
            except WardenError as exc:  # a lease contended by the starter: tried again
                if exc.rule not in ("lease.contended", "live.contended"):
                    problems.append(f"stop: {exc}")

    stopping = threading.Thread(target=stop_again_and_again)
    stopping.start()
    outcomes: list[str] = []
    try:
        for _ in range(12):
            try:
                outcomes.append(starter.runs.start(RunRequest(WS, ["sleep", "300"])).status)
            except WardenError as exc:
                assert exc.rule in ("live.stopped", "live.contended"), exc
                outcomes.append(exc.rule or "")
    finally:
        ended.set()
        stopping.join(60)
        stopper.live.stop_workspace(WS, reason="the test ended")
        stopper.close()
        starter.close()
    assert problems == []
    assert "running" in outcomes or "live.stopped" in outcomes
    wait_until(lambda: _unaccounted(home) == [], message="a process recorded running was not")
    assert_one_outcome_per_run(_ENVIRON[home])
