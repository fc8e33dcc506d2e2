"""The janitor on a real home with a clock moved by hand: idle, expired temporary and bot
workspaces, busy ones left alone, a dry run changing nothing, old grants and approvals gone,
and two janitors at once never acting twice."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.clock import Clock
from warden.bootstrap import App, bootstrap
from warden.core.errors import NotFound
from warden.services.janitor import JANITOR_LEASE


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[App, Clock]]:
    clock = Clock()
    home = tmp_path / "home"
    app = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home),
                                   "WARDEN_CLEANUP_IDLE_AFTER": "1d", "WARDEN_CLEANUP_IDLE_ARCHIVE_AFTER": "10d",
                                   "WARDEN_CLEANUP_TEMPORARY_TTL": "2h", "WARDEN_CLEANUP_BOT_TTL": "3d"},
                    clock=clock)
    yield app, clock
    app.close()


def _statuses(app: App) -> dict[str, str]:
    return {r.name: r.status for r in app.workspaces.list()}


def test_a_pass_applies_the_cleanup_rules_and_a_dry_run_changes_nothing(world: tuple[App, Clock]) -> None:
    app, clock = world
    app.workspaces.create("mine", template="minimal")
    app.workspaces.create("scratch", template="minimal", kind="temporary")
    app.workspaces.create("botmade", template="minimal", kind="bot")
    clock.now += timedelta(hours=3)
    dry = app.janitor.run(dry_run=True)
    assert [(c["workspace"], c["action"]) for c in dry.chores] == [("scratch", "destroy")]
    assert _statuses(app) == {"mine": "ready", "scratch": "ready", "botmade": "ready"}
    done = app.janitor.run()
    assert [(c["workspace"], c["action"], c["done"]) for c in done.chores] == [("scratch", "destroy", True)]
    assert "scratch" not in _statuses(app)
    clock.now += timedelta(days=1)  # both are idle now: said once, changed in nothing
    first = app.janitor.run()
    assert [(c["workspace"], c["action"]) for c in first.chores] == [("botmade", "idle"), ("mine", "idle")]
    again = app.janitor.run()
    assert [c.get("new") for c in again.chores if c["workspace"] == "mine"] == [False]
    idle_events = [e for e in app.audit.list(target="mine", limit=50) if e.action == "workspace.idle"]
    assert len(idle_events) == 1 and _statuses(app)["mine"] == "ready"
    clock.now += timedelta(days=2)  # the bot's workspace passes cleanup.bot_ttl: archived
    app.janitor.run()
    assert _statuses(app)["botmade"] == "archived"
    clock.now += timedelta(days=8)  # and the person's passes cleanup.idle_archive_after
    app.janitor.run()
    assert _statuses(app) == {"mine": "archived", "botmade": "archived"}


def test_a_busy_workspace_is_left_alone(world: tuple[App, Clock]) -> None:
    app, clock = world
    record = app.workspaces.create("busy", template="minimal", kind="temporary")
    clock.now += timedelta(hours=3)
    from warden.adapters.processes import start_time
    from warden.core.runs import RunInProgress

    with app.registry.transaction() as tx:  # a run in progress, of a live process (this one)
        tx.runs.insert(RunInProgress("run_x", "busy", "user", app.leases.node, os.getpid(),
                                     start_time(os.getpid()) or 0, clock.now.isoformat(), ("sleep",)))
    assert app.janitor.run().chores == []
    assert app.workspaces.get("busy").id == record.id


def test_ended_grants_and_approvals_go_after_a_day(world: tuple[App, Clock]) -> None:
    app, clock = world
    app.workspaces.create("g", template="minimal")
    app.grants.register_bot("b")
    short = app.grants.grant("g", "b", ["read"], ttl=timedelta(hours=1))
    kept = app.grants.grant("g", "b", ["read"], ttl=timedelta(days=5))
    clock.now += timedelta(hours=26)
    report = app.janitor.run()
    assert report.grants_purged == [short.grant.accessor]
    with pytest.raises(NotFound):
        app.grants.get(short.grant.accessor)
    assert app.grants.get(kept.grant.accessor)


def test_two_janitors_at_once_never_both_act(world: tuple[App, Clock]) -> None:
    app, _ = world
    held, release = threading.Event(), threading.Event()

    def other() -> None:
        with app.leases.hold(JANITOR_LEASE, "exclusive", "janitor"):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert held.wait(10)
        assert app.janitor.run().ran is False
    finally:
        release.set()
        thread.join()
    assert app.janitor.run().ran is True


def test_a_purged_parent_takes_its_children_with_it(world: tuple[App, Clock]) -> None:
    """A child left unrevoked under a revoked parent (a revoke racing a mint) must not come back to
    life once the janitor purges the parent's row."""
    app, clock = world
    app.workspaces.create("p", template="minimal")
    app.grants.register_bot("b")
    parent = app.grants.grant("p", "b", ["read", "admin"], ttl=timedelta(days=5))
    child = app.grants.grant("p", "b", ["read"], zones=["*"], parent=app.grants.chain(parent.grant.accessor))
    with app.registry.transaction() as tx:  # only the parent revoked, as the race leaves it
        tx.grants.revoke([parent.grant.accessor], clock.now)
    clock.now += timedelta(days=2)
    assert parent.grant.accessor in app.janitor.run().grants_purged
    from warden.core.errors import Denied

    with pytest.raises(Denied):
        app.auth.authenticate(child.token)
    # And a child is never minted under a parent revoked after its request was authenticated.
    stale_chain = app.grants.chain(child.grant.accessor)
    with pytest.raises(Denied):
        app.grants.grant("p", "b", ["read"], zones=["*"], parent=stale_chain)


def test_a_change_through_the_file_api_is_use(world: tuple[App, Clock]) -> None:
    app, clock = world
    app.workspaces.create("edited", template="minimal")
    clock.now += timedelta(days=2)  # idle by now…
    app.files("edited").write_bytes("/notes.md", b"still here")  # … but the person just wrote to it
    assert [c for c in app.janitor.run().chores if c["workspace"] == "edited"] == []


def test_a_stop_between_the_idle_mark_and_its_event_leaves_it_to_be_said_again(world: tuple[App, Clock],
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle mark was committed, then its `workspace.idle` event written apart: a stop (or a
    kill) between the two left the mark, and every later pass took the workspace for one said
    idle already, so the log never said it. Both land together now, or neither does. The stop
    is raised as the event is written."""
    app, clock = world
    app.workspaces.create("quiet", template="minimal")
    clock.now += timedelta(days=1)
    real = app.janitor._audit.record

    def stopped(**event: object) -> object:
        if event.get("action") == "workspace.idle":
            raise KeyboardInterrupt
        return real(**event)  # type: ignore[arg-type]

    monkeypatch.setattr(app.janitor._audit, "record", stopped)
    with pytest.raises(KeyboardInterrupt):
        app.janitor.run()
    monkeypatch.setattr(app.janitor._audit, "record", real)
    app.janitor.run()
    idle_events = [e for e in app.audit.list(target="quiet", limit=50) if e.action == "workspace.idle"]
    assert len(idle_events) == 1
