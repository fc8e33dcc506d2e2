"""LiveSandboxService on fakes (services/live.py): which sandbox a command goes to, when one may no
longer be used and what its processes' records say then, exec slots, and who sees what."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fake_registry import MemoryRegistry
from tests.support.fakes import FakeGitGuards, FakeLiveSandboxes
from warden.core.errors import NotFound, Terminated, TimedOut, Unavailable
from warden.core.grants import Grant
from warden.core.leases import LeaseState
from warden.core.limits import Limits
from warden.core.live import LiveSandbox, Supervised
from warden.core.network import NetworkPolicy
from warden.core.runs import RunResult, SandboxRequest
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog
from warden.services.live import UNDONE, LiveSandboxService, LiveSettings

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FOLDER = "/home/u/.warden/workspaces/w1"
ALICE = "bot:alice@acc_a"
BOB = "bot:bob@acc_b"


class World:
    def __init__(self) -> None:
        self.now = T0
        self.registry = MemoryRegistry()
        self.audit = AuditLog(self.registry, lambda: self.now)
        self.sandboxes = FakeLiveSandboxes()
        self.git = FakeGitGuards()
        self.service = LiveSandboxService(registry=self.registry, audit=self.audit, sandboxes=self.sandboxes,
                                          clock=lambda: self.now, node="node-a",
                                          settings=LiveSettings(idle_s=60, max_execs=4, max_execs_per_bot=2),
                                          git=self.git)
        self.record = WorkspaceRecord(id="ws_w1", name="w1", path=FOLDER, type="user", status="ready",
                                      created_at=T0.isoformat(), last_accessed=T0.isoformat())
        with self.registry.transaction() as tx:
            tx.workspaces.insert(self.record)
            for accessor, bot in (("acc_a", "alice"), ("acc_b", "bob")):
                tx.grants.insert(Grant(accessor=accessor, workspace="w1", workspace_id="ws_w1", bot=bot,
                                       permissions=frozenset({"read", "execute"}), zones=None, secrets=(),
                                       created=T0, expires=T0 + timedelta(hours=1),
                                       max_expires=T0 + timedelta(days=1)), f"hash-{bot}")
        self._ids = iter(range(1, 1000))

    def request(self, *argv: str, network: NetworkPolicy | None = None, denied: tuple[str, ...] = ()) -> SandboxRequest:
        return SandboxRequest(FOLDER, argv or ("sleep", "300"), Limits(timeout_s=30), network=network, denied=denied)

    def start(self, principal: str = ALICE, *argv: str, bot: str = "", **options: object) -> str:
        process_id = f"{next(self._ids):016x}"
        self.service.start_background(self.record, principal, process_id, self.request(*argv, **options),  # type: ignore[arg-type]
                                      bot=bot)
        return process_id

    def rows(self) -> list[LiveSandbox]:
        with self.registry.transaction(write=False) as tx:
            return tx.sandboxes.of_workspace("w1")

    def status(self, process_id: str) -> tuple[str, int | None]:
        with self.registry.transaction(write=False) as tx:
            process = tx.processes.get(process_id)
        assert process is not None
        return process.status, process.exit_code

    def actions(self) -> list[str]:
        return [e.action for e in self.audit.list(limit=1000)]

    def stop_reasons(self) -> list[str]:
        """Why each sandbox stopped, the newest first."""
        return [str(e.detail["reason"]) for e in reversed(self.audit.list(limit=1000)) if e.action == "sandbox.stop"]


@pytest.fixture
def world() -> World:
    return World()


def test_one_sandbox_per_workspace_principal_and_network(world: World) -> None:
    world.start(ALICE)
    world.start(ALICE)
    assert len(world.sandboxes.started) == 1  # the second process went into the first one's sandbox
    world.start(BOB)
    world.start(ALICE, network=NetworkPolicy.parse(["example.com"]))
    keys = sorted((s.principal, s.network) for s in world.rows())
    assert len(keys) == 3 and keys[0][0] == ALICE and keys[0][1] != keys[1][1]
    assert world.actions().count("sandbox.start") == 3


def test_a_foreground_command_uses_the_live_sandbox_only_when_one_runs(world: World) -> None:
    assert world.service.run_in_live(world.record, ALICE, world.request("true")) is None
    world.start(ALICE)
    ran = world.service.run_in_live(world.record, ALICE, world.request("sh", "-c", "echo hi; exit 3"))
    assert ran is not None and (ran.exit_code, ran.stdout) == (3, "hi\n")
    assert world.service.run_in_live(world.record, BOB, world.request("true")) is None  # not Bob's


def test_a_sandbox_whose_mounts_changed_is_stopped_not_reused(world: World) -> None:
    server = world.start(ALICE)
    assert world.service.run_in_live(world.record, ALICE, world.request("true", denied=(f"{FOLDER}/secret",))) is None
    assert world.status(server) == ("killed", 137)
    assert world.stop_reasons() == ["its mounts are not what the workspace's policy says now"]
    assert world.rows() == []


def test_a_sandbox_whose_masks_were_undone_on_the_host_is_stopped_at_its_next_use_and_by_the_look(
        world: World) -> None:
    server = world.start(ALICE)
    [first] = world.rows()
    world.sandboxes.undone.add(first.id)  # an editor saved over a denied file
    ran = world.service.run_in_live(world.record, ALICE, world.request("true"))
    assert ran is None and world.status(server) == ("killed", 137)
    assert world.stop_reasons() == [UNDONE] and FOLDER not in UNDONE
    # A background process is not left to the next command (or the sweep, 15 s away).
    other = world.start(BOB)
    [second] = world.rows()
    assert world.service.stop_undone() == []
    world.sandboxes.undone.add(second.id)
    assert world.service.stop_undone() == [second.id]
    assert world.status(other) == ("killed", 137) and world.rows() == []


def test_a_sandbox_whose_layer_was_replaced_says_so_without_the_layers_path(
        world: World, tmp_path: Path) -> None:
    """A bot reads why its process was stopped; the layer's host path would tell it Warden's home."""
    layer = tmp_path / "home" / ".warden" / "layers" / "py-3.11"
    layer.mkdir(parents=True)
    request = SandboxRequest(FOLDER, ("sleep", "300"), Limits(timeout_s=30), ro_paths=(str(layer),))
    world.service.start_background(world.record, ALICE, "0000000000000001", request)
    layer.rmdir()
    layer.mkdir()  # rebuilt: another folder at the same path
    assert world.service.run_in_live(world.record, ALICE, request) is None
    [reason] = world.stop_reasons()
    assert "replaced since it started" in reason and str(tmp_path) not in reason, reason


def test_a_command_needing_only_more_to_read_goes_to_a_fresh_sandbox(world: World) -> None:
    server = world.start(ALICE)
    install = SandboxRequest(FOLDER, ("pip", "install", "x"), Limits(timeout_s=30), ro_paths=("/opt/index",))
    assert world.service.run_in_live(world.record, ALICE, install) is None  # a fresh sandbox runs it …
    assert world.status(server) == ("running", None) and world.sandboxes.stopped == []  # … and this one goes on


def test_a_lost_lease_stops_the_sandbox(world: World) -> None:
    server = world.start(ALICE)
    with world.registry.transaction() as tx:  # an exclusive holder (repair, resume, …) came and went
        state, version = tx.leases.read("w1")
        tx.leases.write(LeaseState("w1", state.fence + 1), version)
    assert world.service.list("w1")[0].status == "killed"
    assert world.status(server) == ("killed", 137)
    assert "lease was lost" in world.stop_reasons()[0]


def test_revoked_and_expired_grants_end_their_sandboxes(world: World) -> None:
    mine = world.start(ALICE)
    bobs = world.start(BOB)
    assert world.service.stop_principals(["acc_a"])
    assert world.status(mine) == ("killed", 137) and world.status(bobs) == ("running", None)
    world.now = T0 + timedelta(hours=2)  # Bob's grant expires
    world.service.sweep()
    assert world.status(bobs) == ("killed", 137)
    assert "no longer live (grant.expired)" in world.stop_reasons()[0]


def test_an_ended_process_is_collected_once_with_its_output(world: World) -> None:
    job = world.start(ALICE, "sh", "-c", "echo done; exit 3")
    assert [(p.id, p.status, p.exit_code) for p in world.service.list("w1")] == [(job, "exited", 3)]
    world.service.list("w1")
    outcome = [e for e in world.audit.list(limit=100) if e.action == "run"]
    assert len(outcome) == 1 and outcome[0].detail["background"] is True and outcome[0].result == "3"
    assert world.sandboxes.kept[job].stdout == b"done\n" and world.sandboxes.released == [job]
    assert world.sandboxes.procs[world.rows()[0].id] == {}  # the supervisor was told to forget it
    assert world.service.logs("w1", job).stdout == b"done\n"  # from what was kept


def test_a_sandbox_that_died_leaves_lost_processes_and_a_destroyed_one_killed_ones(world: World) -> None:
    lost = world.start(ALICE)
    world.sandboxes.end(world.rows()[0].id)
    world.service.list("w1")
    assert world.status(lost) == ("lost", None)
    assert "run.lost" in world.actions()
    gone = world.start(ALICE)
    with world.registry.transaction() as tx:
        tx.workspaces.delete("w1")
    world.sandboxes.end(world.rows()[0].id)
    world.service.sweep()
    assert world.status(gone) == ("killed", 137)
    assert world.stop_reasons()[0] == "the workspace was destroyed"


def test_a_bad_answer_stops_the_sandbox(world: World) -> None:
    server = world.start(ALICE)
    world.sandboxes.bad = True
    views = world.service.list("w1")
    assert [v.status for v in views] == ["killed"]
    assert world.stop_reasons() == ["its supervisor answered badly"]
    assert world.status(server) == ("killed", 137)


def test_an_idle_sandbox_is_stopped_by_the_sweep(world: World) -> None:
    job = world.start(ALICE, "sh", "-c", "exit 0")
    world.service.sweep()
    assert len(world.rows()) == 1 and world.status(job) == ("exited", 0)
    world.now = T0 + timedelta(seconds=61)
    world.service.sweep()
    assert world.rows() == [] and world.stop_reasons()[0].startswith("idle for 60 s")
    world.start(ALICE)  # and the next command starts a new one
    assert len(world.sandboxes.started) == 2


def test_the_idle_period_runs_from_the_last_commands_end_and_a_quick_loop_writes_no_row(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.start(ALICE, "sh", "-c", "exit 0")  # starts the sandbox and ends: nothing keeps it running
    world.service.sweep()  # its end recorded now (the fake says any end is 0 s ago): a use at T0
    [row] = world.rows()
    assert row.last_used == T0.isoformat()
    world.now = T0 + timedelta(seconds=0.5)  # an agent's next command at once: the row is not written
    assert world.service.run_in_live(world.record, ALICE, world.request("true")) is not None
    assert world.rows()[0].last_used == T0.isoformat()
    world.now = T0 + timedelta(seconds=30)  # later: marked used
    assert world.service.run_in_live(world.record, ALICE, world.request("true")) is not None
    assert world.rows()[0].last_used == (T0 + timedelta(seconds=30)).isoformat()
    # A command that runs 50 s: its end starts the idle period, so the sweep 20 s after it ends
    # (70 s after it started, past the 60 s period) keeps the sandbox.
    quick = world.sandboxes.run

    def slow(sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        world.now += timedelta(seconds=50)
        return quick(sandbox, process_id, request)

    monkeypatch.setattr(world.sandboxes, "run", slow)
    assert world.service.run_in_live(world.record, ALICE, world.request("true")) is not None
    assert world.rows()[0].last_used == (T0 + timedelta(seconds=80)).isoformat()
    world.now += timedelta(seconds=20)
    world.service.sweep()
    assert len(world.rows()) == 1
    world.now += timedelta(seconds=41)
    world.service.sweep()
    assert world.rows() == [] and world.stop_reasons()[0].startswith("idle for 60 s")


def test_a_command_that_ran_is_answered_though_its_sandbox_cannot_be_marked_used(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mark of the sandbox as used, after a long command, is a write: on a full disk it
    raised 'no space left' and the bot was answered that for a command that had run (it would
    run it again). The command's result stands; only the idle period starts early."""
    world.start(ALICE, "sh", "-c", "exit 0")
    quick, writes = world.sandboxes.run, world.registry.transaction
    full = False

    def transaction(*, write: bool = True) -> contextlib.AbstractContextManager[object]:
        if full and write:
            raise Unavailable("no space left on warden.db; free some space", rule="disk.full")
        return writes(write=write)

    def slow(sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        nonlocal full
        world.now += timedelta(seconds=50)
        full = True  # the disk fills while it runs
        return quick(sandbox, process_id, request)

    monkeypatch.setattr(world.registry, "transaction", transaction)
    monkeypatch.setattr(world.sandboxes, "run", slow)
    ran = world.service.run_in_live(world.record, ALICE, world.request("sh", "-c", "echo hi; exit 3"))
    assert ran is not None and (ran.exit_code, ran.stdout) == (3, "hi\n")
    assert world.rows()[0].last_used == T0.isoformat()  # not marked: the write failed


def test_background_processes_hold_their_bots_exec_slots(world: World) -> None:
    world.start(ALICE, bot="alice")
    world.start(ALICE, bot="alice")
    with pytest.raises(Unavailable, match="max_execs_per_bot"):
        world.start(ALICE, bot="alice")
    world.start(BOB, bot="bob")
    with pytest.raises(Unavailable, match=r"api\.max_execs\)"):
        world.service.start_background(world.record, BOB, "f" * 16, world.request(), bot="bob",
                                       busy=lambda bot: contextlib.nullcontext((1, 0)))  # one of the front end
    world.start("user")  # the person's take no bot's slot
    assert world.service.running_counts("alice") == (3, 2)


def test_a_principal_sees_and_kills_only_its_own(world: World) -> None:
    mine = world.start(ALICE)
    assert [v.id for v in world.service.list("w1", principal=ALICE)] == [mine]
    assert world.service.list("w1", principal=BOB) == ()
    for call in (lambda: world.service.get("w1", mine, principal=BOB),
                 lambda: world.service.logs("w1", mine, principal=BOB),
                 lambda: world.service.kill("w1", mine, 9, principal=BOB)):
        with pytest.raises(NotFound):
            call()
    assert world.service.kill("w1", mine, 15, principal=ALICE).status == "killed"
    assert world.status(mine) == ("killed", 143)
    with pytest.raises(TimedOut):
        world.service.wait("w1", world.start(ALICE), 0)


def test_a_lost_start_race_uses_the_winners_sandbox(world: World) -> None:
    world.start(ALICE)
    winner = world.rows()[0]
    # Another process started the winner while this one started its own for the same key.
    loser = world.service._start(world.record, ALICE, world.request(), "none", winner.fingerprint, winner.fence)
    assert loser is None and world.sandboxes.stopped == [world.sandboxes.started[-1][0]]
    assert world.rows() == [winner] and world.service.keep() == {winner.pid}


def test_a_foreground_run_in_a_sandbox_that_just_ended_goes_to_a_fresh_one(world: World) -> None:
    world.start(ALICE)
    world.sandboxes.result = RunResult(0, "live\n", "", 0.1)
    sandbox = world.rows()[0]
    original = world.sandboxes.run

    def ended_meanwhile(s: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        world.sandboxes.end(s.id)
        return original(s, process_id, request)

    world.sandboxes.run = ended_meanwhile  # type: ignore[method-assign]
    assert world.service.run_in_live(world.record, ALICE, world.request("true")) is None
    assert sandbox.id in world.sandboxes.stopped


def test_ps_shows_a_running_processs_cpu_so_far_and_none_once_it_ended(world: World) -> None:
    server = world.start(ALICE)
    world.sandboxes.cpu_so_far[server] = 1.25
    [view] = world.service.list("w1")
    assert view.usage is not None and view.to_json()["usage"] == {
        "cpu_s": 1.25, "memory_peak_bytes": None, "memory_measured": None, "measured_by": "rusage"}
    assert world.service.get("w1", server).usage == view.usage
    job = world.start(ALICE, "sh", "-c", "exit 0")
    ended = {v.id: v for v in world.service.list("w1")}[job]
    assert ended.status == "exited" and ended.usage is None and ended.to_json()["usage"] is None


def test_a_background_processs_run_event_says_what_it_used(world: World) -> None:
    from warden.core.live import Exited

    job = world.start(ALICE)
    sandbox = world.rows()[0].id
    # What its supervisor's wait4 reported with its status.
    world.sandboxes.procs[sandbox][job].exited = Exited(0, None, False, 420, 2048)
    world.service.list("w1")
    [ran] = [e for e in world.audit.list(limit=100) if e.action == "run"]
    assert ran.detail["usage"] == {"cpu_s": 0.42, "memory_peak_bytes": 2 << 20, "memory_measured": "process",
                                   "measured_by": "rusage"}
    # One its sandbox's stop killed: what was read before its cgroup went.
    killed = world.start(ALICE)
    world.sandboxes.cpu_so_far[killed] = 0.5
    with world.registry.transaction() as tx:
        tx.workspaces.delete("w1")
    world.service.sweep()
    assert world.status(killed) == ("killed", 137)
    [stopped] = [e for e in world.audit.list(limit=100) if e.action == "run" and e.detail["run_id"] == killed]
    assert stopped.detail["usage"]["cpu_s"] == 0.5


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated(15, "SIGTERM")])
def test_a_process_stopped_as_it_started_is_recorded_killed_by_its_start_saying_why(
        world: World, stop: BaseException) -> None:
    """A person's Ctrl-C (or SIGTERM) while `warden run --detach` spawned its process: the start
    kills it and records its end itself, with the reason, though the supervisor reaps it only a
    moment after the signal. It was left to whoever looked next, which recorded it seconds later
    as ended by that one ("the workspace's suspend ended it")."""
    from warden.core import stops

    world.sandboxes.reap_late = True
    spawn = world.sandboxes.spawn

    def stopped_meanwhile(sandbox: LiveSandbox, process_id: str, request: SandboxRequest,
                          **options: object) -> dict[str, object]:
        answer = spawn(sandbox, process_id, request, **options)  # type: ignore[arg-type]
        assert stops.held_back(stop)  # as the CLI's handler does with the signal it got
        return answer

    world.sandboxes.spawn = stopped_meanwhile  # type: ignore[method-assign]
    with pytest.raises(type(stop)):
        world.start(ALICE)
    [row] = world.service.list("w1")
    name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
    assert (row.status, row.exit_code, row.stopped_by) == ("killed", 137, f"its start was interrupted ({name})")
    [ran] = [e for e in world.audit.list(limit=100) if e.action == "run"]
    assert ran.detail["stopped_by"] == f"its start was interrupted ({name})" and ran.result == "137"


@pytest.mark.parametrize("again", [KeyboardInterrupt(), Terminated(15, "SIGTERM")])
def test_a_second_stop_while_the_stopped_start_waits_leaves_its_end_recorded(
        world: World, again: BaseException) -> None:
    """Ctrl-C pressed twice (or SIGINT, then a SIGTERM) on `warden run --detach`: the second
    came as the start waited for its killed process to be reaped. Raised there (the CLI's handler
    raises a stop no write holds back), it left the process killed and its end unrecorded, for
    whoever looked next to record as ended by that one."""
    from warden.core import stops

    world.sandboxes.reap_late = True
    spawn, wait = world.sandboxes.spawn, world.sandboxes.wait

    def stopped_meanwhile(sandbox: LiveSandbox, process_id: str, request: SandboxRequest,
                          **options: object) -> dict[str, object]:
        answer = spawn(sandbox, process_id, request, **options)  # type: ignore[arg-type]
        assert stops.held_back(KeyboardInterrupt())
        return answer

    def stopped_again(sandbox: LiveSandbox, process_id: str, timeout: float) -> object:
        if not stops.held_back(again):  # as the CLI's handler does with the signal it got
            raise again
        return wait(sandbox, process_id, timeout)

    world.sandboxes.spawn = stopped_meanwhile  # type: ignore[method-assign]
    world.sandboxes.wait = stopped_again  # type: ignore[assignment,method-assign]
    with pytest.raises(KeyboardInterrupt):  # the first stop, as the person asked first
        world.start(ALICE)
    [row] = world.service.list("w1")
    assert (row.status, row.exit_code) == ("killed", 137)
    [ran] = [e for e in world.audit.list(limit=100) if e.action == "run"]
    assert ran.detail["stopped_by"] == "its start was interrupted (SIGINT)" and ran.result == "137"


def test_a_foreground_command_running_past_the_idle_period_is_not_stopped_by_the_sweep(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A foreground command has no process row; the sweep counted only background ones, so a
    command running longer than workspace.sandbox_idle (a long build, a bot's exec with a long
    timeout) had its sandbox, and itself, stopped under it as idle. Its supervisor lists it."""
    world.start(ALICE, "sh", "-c", "exit 0")
    quick = world.sandboxes.run
    listing = world.sandboxes.listing
    swept: list[list[str]] = []

    def long(sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        def with_it(seen: LiveSandbox) -> list[Supervised]:
            return [*listing(seen), Supervised(process_id, 99, "running", None, None, False)]

        monkeypatch.setattr(world.sandboxes, "listing", with_it)
        world.now += timedelta(seconds=90)  # the serve loop's sweep, while it runs
        swept.append(world.service.sweep())
        monkeypatch.setattr(world.sandboxes, "listing", listing)
        return quick(sandbox, process_id, request)

    monkeypatch.setattr(world.sandboxes, "run", long)
    assert world.service.run_in_live(world.record, ALICE, world.request("make")) is not None
    assert swept == [[]] and len(world.rows()) == 1 and world.sandboxes.stopped == []
    world.now += timedelta(seconds=61)  # idle from its end on
    world.service.sweep()
    assert world.rows() == [] and world.stop_reasons()[0].startswith("idle for 60 s")


def test_a_revoke_records_its_processes_killed_though_another_process_looks_during_the_stop(world: World) -> None:
    """A server's sweep (or a `ps`) that looks at the sandbox while a revoke stops it finds its
    supervisor gone. It must neither record the processes "lost" under its own reason nor stop
    the sandbox a second time in the audit: the revoke claimed it before stopping it."""
    mine = world.start(ALICE)
    other = LiveSandboxService(registry=world.registry, audit=world.audit, sandboxes=world.sandboxes,
                               clock=lambda: world.now, node="node-a", settings=world.service.settings,
                               git=world.git)
    looked: list[list[str]] = []

    def look(sandbox: LiveSandbox) -> None:
        looked.append(other.sweep())
        other.list("w1")

    world.sandboxes.during_stop = look
    assert world.service.stop_principals(["acc_a"])
    assert looked == [[]]  # the other process found no sandbox left to stop
    assert world.status(mine) == ("killed", 137)
    assert world.stop_reasons() == ["its grant was revoked"]
    assert "run.lost" not in world.actions()


def test_a_stop_that_loses_the_claim_still_ends_the_sandbox_before_it_returns(world: World) -> None:
    """A destroy goes on as if nothing of the workspace runs once its stop returns, even when
    another process claimed the sandbox first and has not stopped it yet."""
    world.start(ALICE)
    sandbox = world.rows()[0]
    with world.registry.transaction() as tx:
        assert tx.sandboxes.delete(sandbox.id)  # the other process's claim
    world.service.stop(sandbox, "the workspace was destroyed")
    assert sandbox.id not in world.sandboxes.alive_ids and world.stop_reasons() == []


def test_a_sandbox_a_suspend_ended_before_the_workspace_changed_leaves_killed_processes(world: World) -> None:
    """A suspend, archive or destroy ends the workspace's processes while its lease drains, then
    changes the workspace's status: a `ps` in between finds the sandbox dead under a "ready"
    workspace. Its processes were killed by that operation, not lost."""
    from warden.core.leases import Held, Holder

    job = world.start(ALICE)
    with world.registry.transaction() as tx:
        state, version = tx.leases.read("w1")
        suspend = Held(Holder("h1", "node-a", 4242, 7, "suspend"), "draining", (T0 + timedelta(minutes=1)).isoformat())
        tx.leases.write(state._replace(held=(suspend,)), version)
    world.sandboxes.end(world.rows()[0].id)  # the drain killed everything under the folder
    world.service.list("w1")
    assert world.status(job) == ("killed", 137)
    assert world.stop_reasons()[0] == "the workspace's suspend ended it"
    assert "run.lost" not in world.actions()
