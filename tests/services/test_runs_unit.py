"""The run service on fakes of its ports: no bwrap, no database, no disk — milliseconds each.

The same service runs real commands in bubblewrap, on SQLite, in test_isolation.py, test_crash.py
and the `warden run` tests (tests/interfaces/test_cli_run*.py).
"""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fake_registry import MemoryRegistry
from tests.support.fakes import (
    FakeDisk,
    FakeGitGuards,
    FakeHostProcesses,
    FakeMountSources,
    FakeNetEvent,
    FakeSafeRoots,
    FakeSandboxRunner,
    FakeWorkspaceIO,
)
from warden.core.bwrap_argv import Bind
from warden.core.errors import Conflict, Denied, InvalidInput, Locked, NotFound, Refused, Unavailable
from warden.core.grants import Grant
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
        self.on_path: set[str] = set()  # the names on a sandbox's PATH, for a "did you mean"
        self.io = FakeWorkspaceIO()  # the workspace folders, as the run's cwd is judged in them
        self.io.make_folder("/home/u/.warden/workspaces/w1")
        self.records = RunsInProgress(self.audit, self.processes, lambda: self.now, "node-a")
        self.settings = dataclasses.replace(RunSettings.from_settings(resolved), **settings)  # type: ignore[arg-type]
        self.service = RunService(registry=self.registry, audit=self.audit, workspaces=Workspaces(self.registry),
                                  leases=self.leases, quota=self.quota, paths=self.paths,  # type: ignore[arg-type]
                                  settings=self.settings, sandbox=self.sandbox, records=self.records,
                                  git=self.git, mounts=self.mounts, roots=FakeSafeRoots(self.io),
                                  programs=lambda _folder: self.on_path)
        self.add_workspace("w1")
        with self.registry.transaction() as tx:  # the grants the bots' runs act through, live
            for accessor in ("acc", "acc_1"):
                tx.grants.insert(Grant(accessor=accessor, workspace="w1", workspace_id="ws_w1", bot="b",
                                       permissions=frozenset({"execute"}), zones=None, secrets=(), created=T0,
                                       expires=T0 + timedelta(hours=1), max_expires=T0 + timedelta(days=1)),
                                 f"hash-{accessor}")

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
    loopback = FakeNetEvent("CONNECT", "::1", 8080, False, "network.loopback", "loopback")
    world.sandbox.net_events = [refused, loopback]
    out: list[bytes] = []
    notice: list[bytes] = []
    result = world.service.execute(RunRequest("w1", ["curl", "https://evil.example"], net="allow",
                                              allow_domains=["pypi.org"]),
                                   RunOutput(on_stdout=out.append, on_notice=notice.append, capture=False))
    line = "warden: network refused CONNECT evil.example:443: not listed\n"
    six = "warden: network refused CONNECT [::1]:8080: loopback\n"  # an IPv6 address as a URL has it
    # The command failed (1): the first refusal is said again last, below the program's own error.
    last = "warden: the sandbox's proxy refused this command's network request (CONNECT evil.example:443: not listed)\n"
    assert out == [b"out\n"] and notice == [line.encode(), six.encode(), last.encode()]
    assert (result.stdout, result.stderr) == ("", line + six + last)  # not captured; Warden's own lines are kept
    assert world.events("network.refused") == [("network.refused", "deny", "network.not_allowed", "refused"),
                                               ("network.refused", "deny", "network.loopback", "refused")]


def test_a_front_end_gets_the_kill_switch_and_a_killed_run_is_audited_as_such(world: World) -> None:
    # A streamed exec whose client left kills its command through `on_started` (interfaces/http).
    kills: list[object] = []

    def started(kill: object) -> None:
        kills.append(kill)
        assert callable(kill)
        kill()

    result = world.service.execute(RunRequest("w1", ["sleep", "100"]), RunOutput(capture=False, on_started=started))
    assert len(kills) == 1 and (result.exit_code, result.signal) == (137, 9)
    assert world.events("run") == [("run", "allow", "sandbox", "137")]


def test_a_terminal_is_handed_to_the_sandbox(world: World) -> None:
    master, slave = os.openpty()
    try:
        world.service.execute(RunRequest("w1", ["sh"], terminal=slave), RunOutput(capture=False))
        assert world.sandbox.requests[0].terminal == slave
        assert os.read(master, 100) == b"hello\r\n"  # what the command wrote reaches the terminal alone
    finally:
        os.close(master)
        os.close(slave)


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


def test_the_quarantine_note_escapes_the_paths_a_bot_named_and_names_a_few(world: World) -> None:
    # The folders are the bot's to name; the note reaches the person's terminal raw.
    evil = "z\x1b]0;PWNED\x07\x1b[2J\u202e/.git"
    world.git.guard(WS).left = (evil, *(f"d{i}/.git" for i in range(30)))
    notice: list[bytes] = []
    world.service.execute(RunRequest("w1", ["sh"]), RunOutput(on_notice=notice.append))
    line = notice[0].decode()
    assert "(z\\x1b]0;PWNED\\x07\\x1b[2J\\u202e/.git, d0/.git," in line, line
    assert "\x1b" not in line and "\u202e" not in line and "d8/.git and 21 more (the audit lists them)" in line, line
    assert line.count("\n") == 1 and len(line) < 1000, line


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


# -- the working folder (cwd) ---------------------------------------------------------------------
def test_cwd_is_a_folder_of_the_workspace_given_to_the_sandbox(world: World) -> None:
    world.io.make_folder(f"{WS}/src/pkg")
    world.service.run("w1", ["ls"], cwd="src/pkg")
    world.service.run("w1", ["ls"], cwd=f"{WS}/src/./pkg/../pkg")
    world.service.run("w1", ["ls"], cwd=".")
    assert [r.cwd for r in world.sandbox.requests] == [f"{WS}/src/pkg", f"{WS}/src/pkg", WS]
    assert world.audit.list(limit=1)[0].detail["cwd"] == "."


@pytest.mark.parametrize(("cwd", "why"), [
    ("..", "climbs out of the workspace"), ("src/../../w2", "climbs out of the workspace"),
    ("/etc", "is outside the workspace"), (f"{WS}/../w2", "is outside the workspace"),
    ("/home/u/.warden/workspaces/w1-evil", "is outside the workspace"),
    ("missing", "is not a folder of the workspace"), ("up/etc", "goes through a symbolic link"),
    ("notes.txt", "is a file, not a folder"),
    ("up", "is a symbolic link, not a folder"), ("", "cwd is empty"), ("a\0b", "NUL byte")])
def test_a_cwd_outside_or_not_a_folder_is_refused_before_anything_runs(world: World, cwd: str, why: str) -> None:
    world.io.make_folder(f"{WS}/src")
    world.io.files[f"{WS}/notes.txt"] = b"x"
    world.io.links[f"{WS}/up"] = "/"
    with pytest.raises(InvalidInput, match=why) as caught:
        world.service.run("w1", ["ls"], cwd=cwd)
    assert isinstance(caught.value, Refused) and caught.value.code == "invalid"
    assert str(caught.value).count("\n") == 0
    assert world.sandbox.requests == [] and world.runs_in_progress() == []
    assert world.events() == [("run", "deny", "run.cwd", "refused")]


def test_a_cwd_under_a_denied_path_is_refused(world: World) -> None:
    world.io.make_folder(f"{WS}/private")
    world.paths.denied = (f"{WS}/private",)
    with pytest.raises(InvalidInput, match="denied path"):
        world.service.run("w1", ["ls"], cwd="private")
    assert world.sandbox.requests == []


# -- TLS trust and a bot's network ---------------------------------------------------------------
def test_tls_trust_reaches_runs_with_network_only() -> None:
    world = World(trust_env={"SSL_CERT_FILE": "/etc/corp/ca.pem", "UV_SYSTEM_CERTS": "1"},
                  trust_paths=("/etc/corp/ca.pem", "/home/u"))
    world.service.run("w1", ["ls"])
    world.service.run("w1", ["pip", "download", "six"], net="allow", allow_domains=["pypi.org"],
                      env={"UV_SYSTEM_CERTS": "0"})
    without, networked = world.sandbox.requests
    assert "SSL_CERT_FILE" not in without.env and "/etc/corp/ca.pem" not in without.ro_paths
    assert networked.env["SSL_CERT_FILE"] == "/etc/corp/ca.pem" and networked.env["UV_SYSTEM_CERTS"] == "0"
    assert "/etc/corp/ca.pem" in networked.ro_paths
    assert "/home/u" not in networked.ro_paths  # it would show Warden's home: never mounted


def test_a_bot_run_reaches_its_own_domains_not_the_settings_ones() -> None:
    world = World(allowed_domains=("pypi.org",))
    world.service.run("w1", ["curl", "x"], net="allow", allow_domains=["example.com:443"], actor="bot:b@acc",
                      grant_domains=["example.com"])
    world.service.run("w1", ["curl", "x"], net="allow", allow_domains=["example.com:443"])
    bot, person = world.sandbox.requests
    assert bot.network is not None and [r.text for r in bot.network.allowed] == ["example.com:443"]
    assert person.network is not None and [r.text for r in person.network.allowed] == ["pypi.org", "example.com:443"]
    with pytest.raises(Denied, match=r"does not allow network to other\.test:443") as caught:
        world.service.run("w1", ["curl", "x"], net="allow", allow_domains=["other.test:443"], actor="bot:b@acc",
                          grant_domains=["example.com"])
    assert isinstance(caught.value, Refused) and len(world.sandbox.requests) == 2
    assert world.events()[-1] == ("run", "deny", "grant.network", "refused")


def test_a_bot_picks_no_port_on_a_private_address_its_grant_did_not_name() -> None:
    """Listing a name without its port never reaches 127.0.0.1 or a private address (core.network);
    a bot asking `db.corp.test:5432` under a grant of `*.corp.test` must not turn that around."""
    world = World()
    world.service.run("w1", ["psql"], net="allow", allow_domains=["db.corp.test:5432", "127.0.0.1:8080"],
                      actor="bot:b@acc", grant_domains=["*.corp.test", "127.0.0.1:8080"])
    policy = world.sandbox.requests[0].network
    assert policy is not None and [r.text for r in policy.allowed] == ["db.corp.test:5432", "127.0.0.1:8080"]
    assert policy.special is not None and [r.text for r in policy.special] == ["127.0.0.1:8080"]


def test_a_failed_name_lookup_without_network_gets_a_hint_for_a_person_and_for_a_bot(world: World) -> None:
    world.sandbox.result = RunResult(1, "", "curl: (6) Could not resolve host: pypi.org\n", 0.1,
                                     stderr_tail="curl: (6) Could not resolve host: pypi.org\n")
    person = world.service.run("w1", ["curl", "https://pypi.org"])
    bot = world.service.run("w1", ["curl", "https://pypi.org"], actor="bot:b@acc_1")
    assert person.stderr.endswith("--allow-domain HOST (or `warden install` for packages)\n")
    assert '"network": {"allow": ["HOST:443"]}' in bot.stderr and "/install" in bot.stderr
    assert bot.stderr.count("warden:") == 1


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


def test_a_runs_end_marks_the_workspace_used_unless_it_was_marked_under_a_second_ago(world: World) -> None:
    """Its last use is what the janitor's idle archive reads (in days): a run right after
    another (an agent's next command) leaves the row as it is, saving the write in its commit."""
    from datetime import timedelta

    def last_used() -> str:
        with world.registry.transaction(write=False) as tx:
            record = tx.workspaces.get("w1")
        assert record is not None
        return record.last_accessed

    world.now = T0 + timedelta(milliseconds=400)
    world.service.run("w1", ["true"])
    assert last_used() == T0.isoformat()  # marked at T0, 0.4 s before: left
    world.now = T0 + timedelta(seconds=2)
    world.service.run("w1", ["true"])
    assert last_used() == world.now.isoformat()
    world.now = T0 + timedelta(seconds=2, milliseconds=999)
    world.service.run("w1", ["true"])
    assert last_used() == (T0 + timedelta(seconds=2)).isoformat()
    world.now = T0 + timedelta(seconds=3)
    world.service.run("w1", ["true"])
    assert last_used() == world.now.isoformat()
    world.now = T0  # the clock set back: written, not taken for "just now"
    world.service.run("w1", ["true"])
    assert last_used() == T0.isoformat()


@pytest.mark.parametrize("change", ["archived", "made again"])
def test_a_row_read_before_the_lease_is_checked_again_under_it(world: World, change: str) -> None:
    """A bot's exec judges the row its grant check read (`read`), not one read again: the run's
    intent checks it under the lease, so a workspace archived, or destroyed and made again under
    its name, between the two is refused there and nothing runs."""
    with world.registry.transaction(write=False) as tx:
        read = tx.workspaces.get("w1")
    assert read is not None and read.status == "ready"
    with world.registry.transaction() as tx:
        if change == "archived":
            tx.workspaces.update("w1", {"status": "archived"})
        else:
            tx.workspaces.delete("w1")
    if change == "made again":
        world.add_workspace("w1")
        with world.registry.transaction() as tx:
            tx.workspaces.update("w1", {"id": "ws_other"})
    with pytest.raises(Refused, match="changed"):
        world.service.run("w1", ["true"], read=read)
    assert world.sandbox.requests == [] and world.runs_in_progress() == []
    assert ("run.start", "allow", "sandbox", "started") not in world.events()
