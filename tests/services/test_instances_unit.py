"""services/instances.py on the fake registry with a clock the test moves: registering, beating
and leaving; the heartbeat window; dead by pid on this node only; what a dead instance held
released (leases, a shell's terminal lock, runs lost, another down node's sandboxes forgotten);
a long command registered only after its delay; old nonces forgotten by each pass."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.clock import Clock
from tests.support.fake_registry import MemoryRegistry
from tests.support.fakes import FakeHostProcesses
from tests.support.waiting import poll, wait_until
from warden.core import leases, nodes
from warden.core.errors import Unavailable
from warden.core.leases import Holder, LeaseState
from warden.core.live import LiveProcess, LiveSandbox
from warden.core.locks import TerminalLock
from warden.core.nodes import Instance
from warden.core.runs import RunInProgress
from warden.services.audit import AuditLog
from warden.services.instances import InstanceService, NodeSettings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=60)


@pytest.fixture
def registry() -> MemoryRegistry:
    return MemoryRegistry()


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def processes() -> FakeHostProcesses:
    return FakeHostProcesses()


def service(registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses, node: str = "a",
            interval: timedelta = timedelta(seconds=10)) -> InstanceService:
    return InstanceService(registry, AuditLog(registry, clock), clock, processes, node,
                           NodeSettings(interval=interval, window=WINDOW))


def rows(registry: MemoryRegistry) -> list[Instance]:
    with registry.transaction(write=False) as tx:
        return tx.instances.list_all()


def put(registry: MemoryRegistry, instance: Instance) -> None:
    with registry.transaction() as tx:
        tx.instances.insert(instance)


def other(ident: str, node: str, pid: int, beat: datetime, *, kind: str = "serve",
          terminal: str | None = None) -> Instance:
    return Instance(ident, node, kind, pid, 7, beat.isoformat(), beat.isoformat(), None, terminal)


def events(registry: MemoryRegistry, action: str) -> list[dict[str, object]]:
    with registry.transaction(write=False) as tx:
        return [json.loads(e.detail) for e in tx.audit.page(after=None, limit=1000) if e.action == action]


# -- this process ---------------------------------------------------------------------------------

def test_join_beat_leave(registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    instance = svc.join("daemon")
    assert svc.current == instance
    assert [(i.node, i.kind, i.pid, i.pid_start, i.heartbeat_at) for i in rows(registry)] == [
        ("a", "daemon", os.getpid(), 7, T0.isoformat())]
    clock.now = T0 + timedelta(seconds=10)
    svc.beat(instance)
    assert rows(registry)[0].heartbeat_at == clock.now.isoformat()
    svc.leave(instance)
    assert rows(registry) == [] and svc.current is None


def test_a_beat_after_being_presumed_dead_registers_again_unless_leaving(
        registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    import threading

    svc = service(registry, clock, processes)
    instance = svc.join("serve")
    with registry.transaction() as tx:
        tx.instances.delete(instance.id)  # another node's janitor found it dead meanwhile
    svc.beat(instance)
    assert [i.id for i in rows(registry)] == [instance.id]
    with registry.transaction() as tx:
        tx.instances.delete(instance.id)
    leaving = threading.Event()
    leaving.set()
    svc.beat(instance, stop=leaving)
    assert rows(registry) == []


def test_an_unknown_kind_is_refused(registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    with pytest.raises(ValueError):
        service(registry, clock, processes).join("bogus")
    assert rows(registry) == []


def test_registered_beats_on_its_own_and_leaves(registry: MemoryRegistry, clock: Clock,
                                                processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes, interval=timedelta(milliseconds=50))
    with svc.registered("shell", terminal="t1") as instance:
        clock.now = T0 + timedelta(seconds=5)
        wait_until(lambda: rows(registry)[0].heartbeat_at == clock.now.isoformat(), timeout=5,
                   message="the heartbeat thread did not beat")
        assert rows(registry)[0].terminal == "t1"
    assert rows(registry) == []
    # No beat after it left registers it again.
    clock.now = T0 + timedelta(seconds=9)
    assert poll(lambda: rows(registry), timeout=0.3, want=True) == []
    assert instance.kind == "shell"


def test_a_short_command_writes_nothing_a_long_one_registers_and_leaves(
        registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes, interval=timedelta(milliseconds=50))
    writes: list[str] = []
    real = registry.transaction

    def counted(*, write: bool = True):  # type: ignore[no-untyped-def]
        if write:
            writes.append("write")
        return real(write=write)

    registry.transaction = counted  # type: ignore[method-assign]
    with svc.registered_after(timedelta(seconds=30), "command"):
        pass  # a short run: over long before its delay
    assert writes == [] and rows(registry) == []

    with svc.registered_after(timedelta(milliseconds=50), "command"):
        found = wait_until(lambda: rows(registry), timeout=5, message="the long command did not register")
        assert found[0].kind == "command" and found[0].terminal is None
        assert svc.current is not None and svc.current.id == found[0].id
    assert rows(registry) == [] and svc.current is None


# -- the cluster ------------------------------------------------------------------------------------

def test_the_heartbeat_window(registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    put(registry, other("b1", "b", 4242, T0))
    clock.now = T0 + WINDOW
    assert svc.reap() == []  # exactly the window: still alive
    assert svc.live_nodes() == {"b": None}
    clock.now = T0 + WINDOW + timedelta(seconds=1)
    assert [i.id for i in svc.reap()] == ["b1"]
    assert rows(registry) == [] and [d["id"] for d in events(registry, "instance.dead")] == ["b1"]
    assert svc.reap() == []  # found once


def test_dead_by_pid_on_this_node_only(registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    processes.running.add(500)
    put(registry, other("mine-alive", "a", 500, T0))
    put(registry, other("mine-gone", "a", 501, T0))            # pid 501 is not running here
    put(registry, other("reused", "a", 500, T0)._replace(pid_start=99))  # pid 500, another start time
    put(registry, other("theirs", "b", 501, T0))               # pid 501 means nothing on this machine
    assert sorted(i.id for i in svc.reap(dry_run=True)) == ["mine-gone", "reused"]
    assert len(rows(registry)) == 4  # a dry run releases nothing
    assert sorted(i.id for i in svc.reap()) == ["mine-gone", "reused"]
    assert sorted(i.id for i in rows(registry)) == ["mine-alive", "theirs"]


def test_a_dead_instance_releases_its_leases_its_shells_lock_and_its_runs(
        registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    dead = other("dead", "b", 77, T0, kind="shell", terminal="term-b")
    put(registry, dead)
    holder = Holder("h-dead", "b", 77, 7, "run")
    survivor = Holder("h-other", "b", 78, 7, "run")
    state = LeaseState("w1")
    for h in (holder, survivor):
        state = leases.acquire(state, h, "shared", T0, timedelta(hours=1), lambda _h: None)
    lock = TerminalLock("term-b", "b", T0, T0 + timedelta(hours=1), 3600)
    other_lock = LeaseState("w2", lock=TerminalLock("term-c", "b", T0, T0 + timedelta(hours=1), 3600))
    run = RunInProgress("r1", "w1", "user", "b", 77, 7, T0.isoformat(), ("sleep", "9"))
    keep_run = RunInProgress("r2", "w1", "user", "b", 78, 7, T0.isoformat(), ("true",))
    with registry.transaction() as tx:
        tx.leases.write(state._replace(lock=lock), None)
        tx.leases.write(other_lock, None)
        tx.runs.insert(run)
        tx.runs.insert(keep_run)
    clock.now = T0 + WINDOW + timedelta(seconds=5)
    assert [i.id for i in svc.reap()] == ["dead"]
    with registry.transaction(write=False) as tx:
        w1, _ = tx.leases.read("w1")
        w2, _ = tx.leases.read("w2")
        left_runs = [r.run_id for r in tx.runs.of_node("b")]
    assert [h.holder.id for h in w1.held] == ["h-other"] and w1.lock is None
    assert w2.lock is not None and w2.lock.terminal == "term-c"  # another terminal's lock stays
    assert left_runs == ["r2"]
    detail = events(registry, "instance.dead")[0]
    assert detail["leases_released"] == ["w1"] and detail["locks_released"] == ["w1"]
    assert detail["runs_lost"] == ["r1"]
    assert [d["run_id"] for d in events(registry, "run.lost")] == ["r1"]


def test_a_dead_command_leaves_its_terminals_lock(registry: MemoryRegistry, clock: Clock,
                                                 processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    put(registry, other("cmd", "b", 77, T0, kind="command"))  # registered without a terminal
    with registry.transaction() as tx:
        tx.leases.write(LeaseState("w1", lock=TerminalLock("term-b", "b", T0, T0 + timedelta(hours=1), 3600)), None)
    clock.now = T0 + WINDOW + timedelta(seconds=5)
    assert [i.id for i in svc.reap()] == ["cmd"]
    with registry.transaction(write=False) as tx:
        assert tx.leases.read("w1")[0].lock is not None


def _sandbox(ident: str, node: str, instance: str) -> LiveSandbox:
    return LiveSandbox(ident, "w1", "ws_1", "user", "none", "fp", 1, node, 900, 7, 901, 7, "/run/x", T0.isoformat(),
                       T0.isoformat(), {"instance": instance})


def _process(ident: str, sandbox: str, node: str) -> LiveProcess:
    return LiveProcess(ident, sandbox, "w1", "user", "", ("sleep", "9"), "running", None, None, False,
                       T0.isoformat(), None, node, {})


def test_a_down_nodes_sandboxes_are_forgotten_and_a_live_nodes_left_alone(
        registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    put(registry, other("b-dead", "b", 77, T0))
    put(registry, other("c-dead", "c", 77, T0))
    with registry.transaction() as tx:
        tx.sandboxes.insert(_sandbox("sb-b", "b", "b-dead"))
        tx.processes.insert(_process("p-b", "sb-b", "b"))
        tx.sandboxes.insert(_sandbox("sb-c", "c", "c-dead")._replace(workspace="w2"))
    clock.now = T0 + WINDOW + timedelta(seconds=5)
    put(registry, other("c-alive", "c", 78, clock.now))  # node c still beats through another instance
    assert sorted(i.id for i in svc.reap()) == ["b-dead", "c-dead"]
    with registry.transaction(write=False) as tx:
        assert tx.sandboxes.get("sb-b") is None
        assert tx.processes.get("p-b").status == "lost"  # type: ignore[union-attr]
        assert tx.sandboxes.get("sb-c") is not None  # c lives: its own janitor stops it
    assert [d["sandbox"] for d in events(registry, "sandbox.stop")] == ["sb-b"]


def test_api_of_names_the_node_that_is_down_or_serves_nothing(
        registry: MemoryRegistry, clock: Clock, processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    put(registry, other("b-srv", "b", 1, T0)._replace(url="https://b:8443"))
    put(registry, other("c-daemon", "c", 1, T0, kind="daemon"))
    assert svc.api_of("b") == "https://b:8443"
    with pytest.raises(Unavailable, match="node 'c' runs no `warden serve`"):
        svc.api_of("c")
    with pytest.raises(Unavailable, match="node 'zz' is unavailable"):
        svc.api_of("zz")
    clock.now = T0 + WINDOW + timedelta(seconds=1)
    with pytest.raises(Unavailable, match="node 'b' is unavailable"):
        svc.api_of("b")


def test_each_pass_forgets_nonces_past_twice_the_skew(registry: MemoryRegistry, clock: Clock,
                                                     processes: FakeHostProcesses) -> None:
    svc = service(registry, clock, processes)
    with registry.transaction() as tx:
        assert tx.instances.remember_nonce("old", (T0 - 2 * nodes.SKEW - timedelta(seconds=1)).isoformat())
        assert tx.instances.remember_nonce("edge", (T0 - 2 * nodes.SKEW).isoformat())
        assert tx.instances.remember_nonce("new", T0.isoformat())
    assert svc.reap() == []  # nothing died: old nonces go all the same
    with registry.transaction() as tx:
        assert tx.instances.remember_nonce("old", T0.isoformat())  # forgotten: taken as new
        assert not tx.instances.remember_nonce("edge", T0.isoformat())
        assert not tx.instances.remember_nonce("new", T0.isoformat())
