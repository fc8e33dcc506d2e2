"""The run service on fakes of its ports: no bwrap, no database, no disk — milliseconds each.

The same service runs real commands in bubblewrap, on SQLite, in test_isolation.py, test_crash.py
and the `warden run` tests (tests/interfaces/test_cli_run*.py).
"""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.fake_registry import MemoryRegistry
from tests.support.fakes import (
    FakeDisk,
    FakeGitGuards,
    FakeHostProcesses,
    FakeMountSources,
    FakeNetEvent,
    FakeSandboxRunner,
)
from warden.core.bwrap_argv import Bind
from warden.core.errors import Conflict, Denied, InvalidInput, Locked, NotFound, Refused, Unavailable
from warden.core.policy import EffectivePaths, ZoneMount
from warden.core.runs import RunInProgress, RunResult
from warden.core.settings import resolve
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog
from warden.services.leases import LeaseService
from warden.services.quota import QuotaService
from warden.services.runs import RunOutput, RunRequest, RunService, RunSettings
from warden.services.runs_in_progress import RunsInProgress

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WS = "/home/u/.warden/workspaces/w1"
OUTSIDE = "/home/u/projects/site"


class Workspaces:
    """The one thing the run service asks of the workspace service: a workspace's record."""

    def __init__(self, registry: MemoryRegistry) -> None:
        self._registry = registry

    def get(self, name: str) -> WorkspaceRecord:
        with self._registry.transaction(write=False) as tx:
            record = tx.workspaces.get(name)
        if record is None:
            raise NotFound(f"no workspace named {name!r}")
        return record


class PathPolicy:
    """What the run service asks of the sandbox paths service: a workspace's effective paths."""

    def __init__(self) -> None:
        self.allowed: tuple[tuple[str, str], ...] = ()
        self.denied: tuple[str, ...] = ()

    def effective(self, record: WorkspaceRecord, session: str | None = None) -> EffectivePaths:
        return EffectivePaths(workspace=record.path, zones=(ZoneMount("docs", f"{record.path}/docs", "ro"),),
                              allowed=self.allowed, denied=self.denied,  # type: ignore[arg-type]
                              readonly=(f"{record.path}/.warden",), system_blocked=())

    def exposure(self, path: str) -> str | None:
        return "it holds Warden's home" if path == "/home/u" else None


class World:
    """A RunService wired to fakes, and the fakes, for a test to look at."""

    def __init__(self, **settings: object) -> None:
        self.now = T0
        self.registry = MemoryRegistry()
        self.audit = AuditLog(self.registry, lambda: self.now)
        self.processes = FakeHostProcesses()
        self.leases = LeaseService(self.registry, self.processes, lambda: self.now, "node-a")
        self.disk = FakeDisk()
        resolved = resolve({}, {})
        self.quota = QuotaService(resolved, Path("/home/u/.warden"), self.disk)
        self.paths = PathPolicy()
        self.sandbox = FakeSandboxRunner(RunResult(0, "hello\n", "", 0.25))
        self.git = FakeGitGuards()
        self.mounts = FakeMountSources()
        self.records = RunsInProgress(self.audit, self.processes, lambda: self.now, "node-a")
        self.settings = dataclasses.replace(RunSettings.from_settings(resolved), **settings)  # type: ignore[arg-type]
        self.service = RunService(registry=self.registry, audit=self.audit, workspaces=Workspaces(self.registry),
                                  leases=self.leases, quota=self.quota, paths=self.paths,  # type: ignore[arg-type]
                                  settings=self.settings, sandbox=self.sandbox, records=self.records,
                                  git=self.git, mounts=self.mounts)
        self.add_workspace("w1")

    def add_workspace(self, name: str, status: str = "ready", **meta: object) -> None:
        record = WorkspaceRecord(id=f"ws_{name}", name=name, path=f"/home/u/.warden/workspaces/{name}", type="user",
                                 status=status, created_at=T0.isoformat(), last_accessed=T0.isoformat(), meta=meta)
        with self.registry.transaction() as tx:
            tx.workspaces.insert(record)

    def events(self, action: str | None = None) -> list[tuple[str, str, str, str]]:
        return [(e.action, e.decision, e.rule, e.result) for e in self.audit.list(limit=1000)
                if action is None or e.action == action]

    def runs_in_progress(self) -> list[RunInProgress]:
        with self.registry.transaction(write=False) as tx:
            return tx.runs.of_workspace("w1")


@pytest.fixture
def world() -> World:
    return World()


# -- a run ---------------------------------------------------------------------------------------
def test_a_run_is_audited_from_intent_to_outcome(world: World) -> None:
    result = world.service.run("w1", ["python", "-V"], timeout=5, env={"A": "1"})
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hello\n", "")
    assert world.events() == [("run.start", "allow", "sandbox", "started"), ("run", "allow", "sandbox", "0")]
    final = world.audit.list(limit=1)[0].detail
    assert final["argv"] == ["python", "-V"] and final["env_keys"] == ["A"] and final["exit_code"] == 0
    assert final["run_id"] and final["limits"]["timeout_s"] == 5
    assert world.runs_in_progress() == []  # written before it started, removed with its outcome
    assert world.leases.state("w1").held == ()
    assert world.mounts.open == set()


def test_the_sandbox_is_asked_for_the_workspace_its_layers_zones_and_protected_paths(world: World) -> None:
    world.add_workspace("w2", ro_paths=["/home/u/.warden/layers/py"])
    world.git.guard("/home/u/.warden/workspaces/w2").protected = (".git",)
    world.service.run("w2", ["ls"], ro_paths=["/opt/index"])
    request = world.sandbox.requests[0]
    folder = "/home/u/.warden/workspaces/w2"
    assert (request.workspace, request.argv) == (folder, ("ls",))
    assert request.ro_paths == ("/opt/index", "/home/u/.warden/layers/py")
    assert request.ro_zones == (f"{folder}/docs",)
    assert request.protected == (f"{folder}/.warden", f"{folder}/.git")
    assert request.network is None and request.limits == world.settings.limits
    assert world.git.guard(folder).calls == ["before(bot_active=False)", "after"]


def test_allowed_paths_are_opened_judged_and_closed_after_the_run(world: World) -> None:
    world.paths.allowed = ((OUTSIDE, "rw"), ("/home/u", "ro"), ("/srv/gone", "ro"))
    world.mounts.missing.add("/srv/gone")
    world.git.guard(OUTSIDE).protected = (".git",)
    notices: list[bytes] = []
    world.service.execute(RunRequest("w1", ["ls"]), RunOutput(on_notice=notices.append))
    request = world.sandbox.requests[0]
    assert [b.path for b in request.binds] == [OUTSIDE, f"{OUTSIDE}/.git"]
    assert request.binds[1] == Bind(f"{OUTSIDE}/.git", "ro")  # the person's repository stays theirs
    assert [path for path, _ in request.bind_fds] == [OUTSIDE, f"{OUTSIDE}/.git"]
    assert world.mounts.open == set()
    assert notices == [b"warden: not mounting the allowed path /home/u (it holds Warden's home)\n"]
    assert world.audit.list(limit=1)[0].detail["skipped_paths"] == ["/home/u (it holds Warden's home)"]


def test_output_goes_to_the_sinks_and_warden_lines_to_the_notice(world: World) -> None:
    world.sandbox.result = RunResult(1, "out\n", "err\n", 0.1)
    refused = FakeNetEvent("CONNECT", "evil.example", 443, False, "network.not_allowed", "not listed")
    world.sandbox.net_events = [refused]
    out: list[bytes] = []
    notice: list[bytes] = []
    result = world.service.execute(RunRequest("w1", ["curl", "https://evil.example"], net="allow",
                                              allow_domains=["pypi.org"]),
                                   RunOutput(on_stdout=out.append, on_notice=notice.append, capture=False))
    line = "warden: network refused CONNECT evil.example:443: not listed\n"
    assert out == [b"out\n"] and notice == [line.encode()]
    assert (result.stdout, result.stderr) == ("", line)  # not captured; Warden's own lines are kept
    assert world.events("network.refused") == [("network.refused", "deny", "network.not_allowed", "refused")]


def test_a_run_that_failed_says_why_when_warden_knows(world: World) -> None:
    world.sandbox.result = RunResult(137, "", "", 0.1, signal=9, oom_killed=True)
    result = world.service.run("w1", ["python", "-c", "x = ' ' * 10**12"])
    assert result.exit_code == 137 and "ran out of memory" in result.stderr


def test_what_a_bot_leaves_in_git_is_moved_aside_and_audited(world: World) -> None:
    world.git.guard(WS).left = ("sub/.git",)
    notice: list[bytes] = []
    world.service.execute(RunRequest("w1", ["sh"]), RunOutput(on_notice=notice.append))
    assert world.events("git.quarantine") == [("git.quarantine", "deny", "git.control_files", "moved")]
    assert b"moved aside git control files a command made (sub/.git)" in notice[0]


# -- refusals -------------------------------------------------------------------------------------
def test_a_refused_command_is_audited_and_never_reaches_the_sandbox() -> None:
    world = World(check_commands=True, allowed_commands=("python",))
    with pytest.raises(Denied) as caught:
        world.service.run("w1", ["curl", "https://example.com"])
    assert isinstance(caught.value, Refused) and caught.value.exit_status == 126
    assert caught.value.code == "denied"
    assert world.sandbox.requests == []
    [(action, decision, rule, result)] = world.events()
    assert (action, decision, result) == ("run", "deny", "refused") and rule == caught.value.rule
    assert world.runs_in_progress() == [] and world.leases.state("w1").held == ()


def test_a_workspace_another_operation_holds_refuses_the_run(world: World) -> None:
    with world.leases.hold("w1", "exclusive", "archive"), pytest.raises(Locked) as caught:
        world.service.run("w1", ["true"])
    assert isinstance(caught.value, Refused)
    assert world.sandbox.requests == [] and world.runs_in_progress() == []


@pytest.mark.parametrize(("status", "fix"), [("suspended", "warden resume w2"), ("archived", "warden unarchive w2"),
                                             ("broken", "warden health w2 --repair")])
def test_a_workspace_that_is_not_ready_refuses_the_run(world: World, status: str, fix: str) -> None:
    world.add_workspace("w2", status=status)
    with pytest.raises(Conflict, match=fix) as caught:
        world.service.run("w2", ["true"])
    assert isinstance(caught.value, Refused) and world.sandbox.requests == []


def test_no_such_workspace_is_a_refusal_too(world: World) -> None:
    with pytest.raises(NotFound) as caught:
        world.service.run("nope", ["true"])
    assert isinstance(caught.value, Refused)


def test_a_workspace_under_a_denied_path_refuses_the_run(world: World) -> None:
    world.paths.denied = ("/home/u/.warden",)
    with pytest.raises(Denied, match="lies under the denied path") as caught:
        world.service.run("w1", ["ls"])
    assert caught.value.rule == "paths.denied" and world.sandbox.requests == []
    assert world.events() == [("run", "deny", "paths.denied", "refused")]


def test_a_nearly_full_disk_refuses_the_run(world: World) -> None:
    world.disk.free = 0
    with pytest.raises(Unavailable) as caught:
        world.service.run("w1", ["ls"])
    assert isinstance(caught.value, Refused) and world.sandbox.requests == []
    assert world.events() == [("run", "deny", "workspace.min_free", "unavailable")]


def test_a_sandbox_that_cannot_start_is_a_refusal_and_the_git_sweep_still_runs(world: World) -> None:
    world.sandbox.error = Unavailable("the sandbox could not be set up", rule="sandbox.setup_failed")
    with pytest.raises(Unavailable) as caught:
        world.service.run("w1", ["ls"])
    assert isinstance(caught.value, Refused)
    assert world.events()[-1] == ("run", "deny", "sandbox.setup_failed", "unavailable")
    assert world.git.guard(WS).calls == ["before(bot_active=False)", "after"]
    assert world.runs_in_progress() == [] and world.mounts.open == set()


@pytest.mark.parametrize("argv", [[], "ls -l", ["ls", "a\0b"]])
def test_a_command_must_be_a_list_of_strings(world: World, argv: object) -> None:
    with pytest.raises(InvalidInput):
        world.service.run("w1", argv)  # type: ignore[arg-type]
    assert world.events() == []


def test_bad_network_options_are_invalid(world: World) -> None:
    with pytest.raises(InvalidInput, match="--allow-domain needs --net allow"):
        world.service.run("w1", ["ls"], allow_domains=["pypi.org"])
    with pytest.raises(InvalidInput, match="at least one --allow-domain"):
        world.service.run("w1", ["ls"], net="allow")


# -- lost runs ------------------------------------------------------------------------------------
def test_runs_whose_process_died_are_marked_lost(world: World) -> None:
    dead = RunInProgress("r-dead", "w1", "bot:a", "node-a", 4242, 7, T0.isoformat(), ("sleep", "60"))
    alive = dead._replace(run_id="r-alive", pid=os.getpid())
    elsewhere = dead._replace(run_id="r-other-node", node="node-b")
    with world.registry.transaction() as tx:
        for run in (dead, alive, elsewhere):
            tx.runs.insert(run)
        assert world.records.mark_lost(tx) == [dead]
    assert world.events() == [("run.lost", "allow", "sandbox", "lost")]
    lost = world.audit.list(limit=1)[0]
    assert (lost.actor, lost.detail["run_id"], lost.detail["argv"]) == ("bot:a", "r-dead", '["sleep", "60"]')
    assert sorted(r.run_id for r in world.runs_in_progress()) == ["r-alive", "r-other-node"]


def test_a_run_after_a_lost_one_counts_the_bot_as_active(world: World) -> None:
    with world.registry.transaction() as tx:
        tx.runs.insert(RunInProgress("r-dead", "w1", "bot:a", "node-a", 4242, 7, T0.isoformat(), ("sh",)))
    world.service.run("w1", ["ls"])
    # What git files appeared since the dead run are a bot's: judged so before this run starts.
    assert world.git.guard(WS).calls[0] == "before(bot_active=True)"
    assert [e[0] for e in world.events()] == ["run.lost", "run.start", "run"]
