"""One contract, three registries: the in-memory fake the service unit tests use, SQLite, and
PostgreSQL (when WARDEN_TEST_DATABASE_URL names a server). A fake that drifts from the real
registry fails here, not silently in a unit test that trusted it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fake_registry import MemoryRegistry
from warden.adapters.store.db import open_database
from warden.adapters.store.registry import SqlRegistry
from warden.core.audit import AuditEvent
from warden.core.errors import Conflict
from warden.core.grants import BotRow, Grant
from warden.core.leases import Held, Holder, LeaseState
from warden.core.live import LiveProcess, LiveSandbox
from warden.core.ports import Registry
from warden.core.runs import RunInProgress
from warden.core.secrets import Sealed
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog

ADMIN_URL = os.environ.get("WARDEN_TEST_DATABASE_URL", "")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    if request.param == "memory":
        yield MemoryRegistry()
        return
    if request.param == "sqlite":
        real = SqlRegistry(open_database(None, tmp_path))
        yield real
        real.close()
        return
    if not ADMIN_URL.startswith("postgresql"):
        pytest.skip("set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")
    name = "warden_contract_" + secrets.token_hex(6)
    _admin(f"CREATE DATABASE {name}")
    base, _, _ = ADMIN_URL.rpartition("/")
    real = SqlRegistry(open_database(f"{base}/{name}", tmp_path))
    try:
        yield real
    finally:
        real.close()
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _record(name: str, *, id: str | None = None, status: str = "ready", kind: str = "user") -> WorkspaceRecord:
    return WorkspaceRecord(id=id or f"ws_{name}", name=name, path=f"/w/{name}", type=kind, status=status,
                           created_at=T0.isoformat(), last_accessed=T0.isoformat(), meta={"layers": ("a", "b")})


def _grant(accessor: str, *, workspace: str = "w1", bot: str = "b1", parent: str | None = None,
           at: datetime = T0) -> Grant:
    return Grant(accessor=accessor, workspace=workspace, workspace_id=f"ws_{workspace}", bot=bot,
                 permissions=frozenset({"read", "execute"}), zones=("src",), secrets=("API_KEY",),
                 created=at, expires=at + timedelta(hours=1), max_expires=at + timedelta(days=1), parent=parent,
                 domains=("pypi.org:443", "*.example.com"))


def test_workspaces_round_trip_and_names_are_unique(registry: Registry) -> None:
    with registry.transaction() as tx:
        tx.workspaces.insert(_record("beta"))
        tx.workspaces.insert(_record("alpha", kind="bot", status="creating"))
    with registry.transaction(write=False) as tx:
        got = tx.workspaces.get("beta")
        assert got is not None and got.path == "/w/beta" and got.meta == {"layers": ["a", "b"]}
        assert [r.name for r in tx.workspaces.list_all()] == ["alpha", "beta"]
        assert [r.name for r in tx.workspaces.list_all(status="creating")] == ["alpha"]
        assert [r.name for r in tx.workspaces.list_all(kind="user")] == ["beta"]
        assert tx.workspaces.get("nosuch") is None
    with pytest.raises(Conflict, match="already exists"), registry.transaction() as tx:
        tx.workspaces.insert(_record("beta", id="ws_other"))


def test_workspace_compare_and_set_compares(registry: Registry) -> None:
    with registry.transaction() as tx:
        tx.workspaces.insert(_record("w", status="creating"))
    with registry.transaction() as tx:
        assert not tx.workspaces.compare_and_set("w", "ws_w", "ready", {"status": "archived"})  # wrong status
        assert not tx.workspaces.compare_and_set("w", "ws_older", "creating", {"status": "ready"})  # wrong id
        assert tx.workspaces.compare_and_set("w", "ws_w", "creating", {"status": "ready", "meta": {"k": 1}})
        tx.workspaces.update("w", {"last_accessed": "later"})
    with registry.transaction(write=False) as tx:
        got = tx.workspaces.get("w")
        assert got is not None and (got.status, got.meta, got.last_accessed) == ("ready", {"k": 1}, "later")
    with registry.transaction() as tx:
        tx.workspaces.delete("w", record_id="ws_older")  # a later creator's row is never deleted
        assert tx.workspaces.get("w") is not None
        tx.workspaces.delete("w", record_id="ws_w")
        assert tx.workspaces.get("w") is None


def test_a_transaction_that_raises_leaves_nothing(registry: Registry) -> None:
    with pytest.raises(RuntimeError), registry.transaction() as tx:
        tx.workspaces.insert(_record("ghost"))
        tx.audit.append(AuditEvent(at=T0.isoformat(), actor="t", action="x", target="ghost",
                                   decision="none", rule="", result="ok"))
        raise RuntimeError("crash between two writes")
    with registry.transaction(write=False) as tx:
        assert tx.workspaces.get("ghost") is None
        assert tx.audit.head() is None


def test_bots_and_grants(registry: Registry) -> None:
    with registry.transaction() as tx:
        tx.bots.insert(BotRow("bot_1", "b1", T0.isoformat(), "user"), "hash-b1")
        tx.grants.insert(_grant("acc_root"), "hash-root")
        tx.grants.insert(_grant("acc_child", bot="b2", parent="acc_root", at=T0 + timedelta(seconds=1)), "hash-child")
        tx.grants.insert(_grant("acc_grandchild", bot="b3", parent="acc_child", at=T0 + timedelta(seconds=2)),
                         "hash-gc")
        tx.grants.insert(_grant("acc_other", workspace="w2"), "hash-other")
    with pytest.raises(Conflict, match="already registered"), registry.transaction() as tx:
        tx.bots.insert(BotRow("bot_2", "b1", T0.isoformat(), "user"), "hash-again")
    with registry.transaction() as tx:
        assert tx.bots.by_name("b1") == BotRow("bot_1", "b1", T0.isoformat(), "user")
        assert tx.bots.by_hash("hash-b1") == (BotRow("bot_1", "b1", T0.isoformat(), "user"), "hash-b1")
        assert tx.bots.by_hash("nope") is None
        chain = tx.grants.chain_by_hash("hash-gc", 8)
        assert chain is not None and [g.accessor for g in chain[0]] == ["acc_grandchild", "acc_child", "acc_root"]
        assert chain[0][0] == _grant("acc_grandchild", bot="b3", parent="acc_child", at=T0 + timedelta(seconds=2))
        assert [g.accessor for g in tx.grants.of_workspace("w1")] == ["acc_root", "acc_child", "acc_grandchild"]
        assert [g.accessor for g in tx.grants.of_bot("b1")] == ["acc_other", "acc_root"]  # by time, then name
        assert [g.accessor for g in tx.grants.of_bot("b1", workspace="w2")] == ["acc_other"]
        assert tx.grants.descendants(["acc_root"]) == ["acc_child", "acc_grandchild"]
        assert tx.grants.revoke(["acc_child", "acc_child", "nosuch"], T0) == 1
        assert tx.grants.revoke(["acc_child"], T0) == 0
        revoked = tx.grants.by_accessor("acc_child")
        assert revoked is not None and revoked.revoked == T0
        assert [g.accessor for g in tx.grants.of_workspace("w1", live_only=True)] == ["acc_root", "acc_grandchild"]
        tx.bots.delete("b1")
        assert tx.bots.list_all() == []


@pytest.mark.parametrize("first", ["the held read", "the revoke"])
def test_a_grant_read_with_hold_and_a_revoke_happen_one_after_the_other(registry: Registry, first: str) -> None:
    """A live sandbox is recorded with its bot's grant read with `hold` in the same transaction,
    and a revoke stops the sandboxes recorded once it has committed. On PostgreSQL (READ
    COMMITTED) the two overlapped: the read saw the grant live while the revoke's stop looked
    before the sandbox's row was committed, and the sandbox ran on after the revoke. Held, the
    revoke waits for the reader, or the reader waits for the revoke and sees it."""
    if isinstance(registry, MemoryRegistry):
        pytest.skip("one process's memory: nothing runs at once")
    with registry.transaction() as tx:
        tx.grants.insert(_grant("acc_held"), "hash-held")
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []
    seen: list[Grant | None] = []

    def read() -> None:
        with registry.transaction() as tx:
            seen.append(tx.grants.by_accessor("acc_held", hold=True))
            inside.set()
            if first == "the held read":
                release.wait(10)
        order.append("read")

    def revoke() -> None:
        with registry.transaction() as tx:
            tx.grants.revoke(["acc_held"], T0)
            inside.set()
            if first == "the revoke":
                release.wait(10)
        order.append("revoke")

    one = threading.Thread(target=read if first == "the held read" else revoke)
    one.start()
    assert inside.wait(10)
    two = threading.Thread(target=revoke if first == "the held read" else read)
    two.start()
    two.join(0.5)  # it waits for the first's row (PostgreSQL) or for the database's lock (SQLite)
    assert order == []
    release.set()
    one.join(10)
    two.join(10)
    if first == "the held read":
        assert order == ["read", "revoke"] and seen[0] is not None and seen[0].revoked is None
    else:
        assert order == ["revoke", "read"] and seen[0] is not None and seen[0].revoked == T0


def test_a_held_chain_and_a_revoke_of_its_tree_never_deadlock(registry: Registry) -> None:
    """A bot acting through a child grant has its chain read with `hold` (child, then parent) as
    its live sandbox is recorded; a revoke of the parent updates the tree parent first. On
    PostgreSQL each held its first row and waited for the other's: "deadlock detected", one of
    them undone (the person's revoke told to try again, or the bot's command refused). Found
    attacking (attack24). Here a third transaction holds the parent until the revoke waits for it
    and the read has its child and waits behind the revoke: both must go through."""
    if isinstance(registry, MemoryRegistry):
        pytest.skip("one process's memory: nothing runs at once")
    from warden.services.grants import chain_of

    with registry.transaction() as tx:
        tx.grants.insert(_grant("acc_root"), "hash-root")
        tx.grants.insert(_grant("acc_child", parent="acc_root"), "hash-child")
    held, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    seen: list[list[Grant]] = []

    class Undo(Exception):
        pass

    def holder() -> None:
        with contextlib.suppress(Undo), registry.transaction() as tx:
            tx.grants.revoke(["acc_root"], T0)  # the parent's row, held (undone below)
            held.set()
            release.wait(10)
            raise Undo

    def revoke() -> None:
        try:
            with registry.transaction() as tx:
                tx.grants.revoke(["acc_root", *tx.grants.descendants(["acc_root"])], T0)  # as GrantService
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            with registry.transaction() as tx:
                seen.append(chain_of(tx, "acc_child", hold=True))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    assert held.wait(10)
    for target in (revoke, read):
        threads.append(threading.Thread(target=target))
        threads[-1].start()
        threads[-1].join(0.5)  # waiting: the revoke for the parent, the read for the revoke
    release.set()
    for thread in threads:
        thread.join(20)
    assert errors == []
    assert [g.accessor for g in seen[0]] == ["acc_child", "acc_root"]
    with registry.transaction(write=False) as tx:
        assert all(g.revoked == T0 for g in chain_of(tx, "acc_child"))


def test_a_new_secret_set_by_two_at_once_is_new_for_one_and_set_by_both(registry: Registry) -> None:
    """Two processes setting one new name at once: the second waits for the first's row and
    replaces it. An update-then-insert made the second's insert fail (Conflict) on PostgreSQL,
    where its update had found no committed row yet."""
    if isinstance(registry, MemoryRegistry):
        pytest.skip("one process's memory: nothing runs at once")
    inserted, release = threading.Event(), threading.Event()
    outcome: list[bool | Exception] = []

    def first() -> None:
        with registry.transaction() as tx:
            outcome.append(tx.secrets.upsert("FRESH", Sealed(b"one", b"nonce-12byte", "k1"), "t1"))
            inserted.set()
            release.wait(10)

    def second() -> None:
        try:
            with registry.transaction() as tx:
                outcome.append(tx.secrets.upsert("FRESH", Sealed(b"two", b"nonce-12byte", "k1"), "t2"))
        except Exception as exc:  # the failure this test is about
            outcome.append(exc)

    one = threading.Thread(target=first)
    one.start()
    assert inserted.wait(10)
    two = threading.Thread(target=second)
    two.start()
    two.join(0.5)  # it waits for the first's row (PostgreSQL) or for the database's lock (SQLite)
    release.set()
    one.join(10)
    two.join(10)
    assert outcome == [True, False]
    with registry.transaction(write=False) as tx:
        row = tx.secrets.get("FRESH")
    assert row is not None and row.sealed.ciphertext == b"two" and (row.created_at, row.updated_at) == ("t1", "t2")


def test_secrets_keep_their_creation_time(registry: Registry) -> None:
    sealed = Sealed(b"\x00cipher", b"nonce-12byte", "k1")
    with registry.transaction() as tx:
        assert tx.secrets.upsert("API_KEY", sealed, "t1") is True
        assert tx.secrets.upsert("API_KEY", Sealed(b"new", b"nonce-12byte", "k2"), "t2") is False
        tx.secrets.upsert("ALPHA", sealed, "t3")
    with registry.transaction() as tx:
        row = tx.secrets.get("API_KEY")
        assert row is not None and (row.created_at, row.updated_at, row.sealed.key_id) == ("t1", "t2", "k2")
        assert row.sealed.ciphertext == b"new"
        assert tx.secrets.names() == ["ALPHA", "API_KEY"]
        assert [r.name for r in tx.secrets.list_all()] == ["ALPHA", "API_KEY"]
        assert tx.secrets.delete("API_KEY") is True and tx.secrets.delete("API_KEY") is False


def test_lease_writes_are_compare_and_set(registry: Registry) -> None:
    held = Held(Holder("h1", "node-a", 10, 20, "run"), "shared", "2026-01-01T00:01:00+00:00")
    with registry.transaction() as tx:
        state, version = tx.leases.read("w")
        assert (state, version) == (LeaseState("w"), None)
        assert tx.leases.write(LeaseState("w", 0, (held,)), None)
        assert not tx.leases.write(LeaseState("w", 1), None)  # the row exists now
    with registry.transaction() as tx:
        state, version = tx.leases.read("w")
        assert state.held == (held,) and version is not None
        assert not tx.leases.write(LeaseState("w", 5), version + 1)
        assert tx.leases.write(LeaseState("w", 5), version)
        assert tx.leases.read("w")[0].fence == 5


def test_runs_in_progress(registry: Registry) -> None:
    run = RunInProgress("r1", "w", "bot:b1", "node-a", 100, 200, "2026-01-01T00:00:02", ("echo", "hi"))
    with registry.transaction() as tx:
        tx.runs.insert(run)
        tx.runs.insert(run._replace(run_id="r0", started_at="2026-01-01T00:00:01", workspace="v"))
        tx.runs.insert(run._replace(run_id="r2", node="node-b"))
    with registry.transaction() as tx:
        assert [r.run_id for r in tx.runs.of_node("node-a")] == ["r0", "r1"]
        assert sorted(tx.runs.of_workspace("w")) == [run, run._replace(run_id="r2", node="node-b")]
        # A run's two reads in one: its workspace's rows (any node) and its node's (any workspace).
        tx.runs.insert(run._replace(run_id="r3", node="node-c", workspace="v"))
        both = tx.runs.of_workspace_or_node("w", "node-a")
        assert [r.run_id for r in both][:1] == ["r0"] and sorted(r.run_id for r in both) == ["r0", "r1", "r2"]
        tx.runs.delete("r1")
        assert [r.run_id for r in tx.runs.of_node("node-a")] == ["r0"]


def _sandbox(sandbox_id: str, *, node: str = "node-a", workspace: str = "w", principal: str = "user",
             network: str = "none", at: str = "2026-01-01T00:00:01") -> LiveSandbox:
    return LiveSandbox(sandbox_id, workspace, f"ws_{workspace}", principal, network, "fp", 3, node, 100,
                       1 << 40, 101, (1 << 40) + 1, f"/h/run/{sandbox_id}/supervisor.sock", at, at,
                       {"init_pid": 102, "cgroups": [["v1", "/sys/fs/cgroup/pids/warden-live-x"]]})


def _process(process_id: str, *, sandbox_id: str = "sbx_a", workspace: str = "w", principal: str = "bot:b1@acc_1",
             bot: str = "b1", at: str = "2026-01-01T00:00:02") -> LiveProcess:
    return LiveProcess(process_id, sandbox_id, workspace, principal, bot, ("python3", "-m", "http.server"),
                       "running", None, None, False, at, None, "node-a", {"host_pid": 4242})


def test_live_sandboxes_are_one_per_key(registry: Registry) -> None:
    first = _sandbox("sbx_a")
    with registry.transaction() as tx:
        assert tx.sandboxes.insert(first)
        assert not tx.sandboxes.insert(_sandbox("sbx_b"))  # the same key: the first one wins
        assert tx.sandboxes.insert(_sandbox("sbx_c", network="net-1", at="2026-01-01T00:00:00"))
        assert tx.sandboxes.insert(_sandbox("sbx_d", principal="bot:b1@acc_1", workspace="v"))
        assert tx.sandboxes.insert(_sandbox("sbx_e", node="node-b"))
    with registry.transaction() as tx:
        assert tx.sandboxes.get("sbx_a") == first
        assert tx.sandboxes.get("sbx_b") is None
        assert tx.sandboxes.find("node-a", "w", "user", "none") == first
        assert tx.sandboxes.find("node-a", "w", "user", "net-2") is None
        assert [s.id for s in tx.sandboxes.of_workspace("w")] == ["sbx_c", "sbx_a", "sbx_e"]
        assert [s.id for s in tx.sandboxes.of_node("node-a")] == ["sbx_c", "sbx_a", "sbx_d"]
        assert tx.sandboxes.touch("sbx_a", "2026-01-01T01:00:00")
        assert tx.sandboxes.delete("sbx_c") and not tx.sandboxes.delete("sbx_c")
        assert not tx.sandboxes.touch("sbx_c", "2026-01-01T01:00:00")  # a stop claimed it: nothing starts there
    with registry.transaction(write=False) as tx:
        got = tx.sandboxes.get("sbx_a")
        assert got is not None and got.last_used == "2026-01-01T01:00:00" and got.pid_start == 1 << 40
        assert got.meta == {"init_pid": 102, "cgroups": [["v1", "/sys/fs/cgroup/pids/warden-live-x"]]}


def test_live_processes_end_once_and_count_against_their_bot(registry: Registry) -> None:
    with registry.transaction() as tx:
        tx.processes.insert(_process("p1"))
        tx.processes.insert(_process("p2", at="2026-01-01T00:00:01"))
        tx.processes.insert(_process("p3", bot="b2", principal="bot:b2@acc_2"))
        tx.processes.insert(_process("p4", bot="", principal="user", sandbox_id="sbx_b"))
    with pytest.raises(Conflict), registry.transaction() as tx:
        tx.processes.insert(_process("p1"))
    with registry.transaction() as tx:
        assert tx.processes.count_running() == 3  # the person's process takes no bot's slot
        assert tx.processes.count_running(bot="b1") == 2
        assert [p.id for p in tx.processes.of_workspace("w")] == ["p2", "p1", "p3", "p4"]
        assert [p.id for p in tx.processes.of_workspace("w", principal="bot:b1@acc_1")] == ["p2", "p1"]
        assert [p.id for p in tx.processes.of_sandbox("sbx_b")] == ["p4"]
        assert tx.processes.update("p1", {"meta": {"host_pid": 7, "cgroups": []}, "status": "running"})
        assert tx.processes.finish("p1", status="exited", exit_code=3, signal=None, timed_out=False,
                                   ended_at="2026-01-01T00:01:00")
        # A start that finds its process ended (a stop claimed it) cannot make it run again.
        assert not tx.processes.update("p1", {"status": "running"})
        assert not tx.processes.finish("p1", status="killed", exit_code=137, signal=9, timed_out=False,
                                       ended_at="2026-01-01T00:02:00")  # it had ended: the first outcome stays
        assert tx.processes.finish("p2", status="killed", exit_code=124, signal=None, timed_out=True,
                                   ended_at="2026-01-01T00:01:00")
        assert tx.processes.count_running(bot="b1") == 0
    with registry.transaction(write=False) as tx:
        got = tx.processes.get("p1")
        assert got is not None and (got.status, got.exit_code, got.signal, got.timed_out) == ("exited", 3, None, False)
        assert got.meta == {"host_pid": 7, "cgroups": []} and got.argv == ("python3", "-m", "http.server")
        assert not got.running and tx.processes.get("p2").timed_out  # type: ignore[union-attr]
        tx.processes.delete("p1")
        assert tx.processes.get("p1") is None


def test_audit_chain_through_the_log(registry: Registry) -> None:
    log = AuditLog(registry, lambda: T0)
    for i in range(5):
        log.record(actor="user", action="create", target="w_1" if i % 2 else f"w_1:f{i}", detail={"i": i})
    log.record(actor="user", action="create", target="wx1:f")  # `_` is no wildcard: not about w_1
    assert log.verify() == (6, None)
    assert log.head() is not None and log.head()[0] == 6  # type: ignore[index]
    listed = log.list(target="w_1", limit=3)
    assert [e.seq for e in listed] == [3, 4, 5] and [e.detail["i"] for e in listed] == [2, 3, 4]
    assert [e.seq for e in log.list(limit=50)] == [1, 2, 3, 4, 5, 6]


def test_the_audit_chain_has_one_appender_at_a_time(registry: Registry) -> None:
    log = AuditLog(registry, lambda: T0)

    def append(n: int) -> None:
        for i in range(10):
            log.record(actor=f"t{n}", action="x", target="w", detail={"i": i})

    threads = [threading.Thread(target=append, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log.verify() == (40, None)


def test_approvals_move_by_compare_and_set_and_drop_their_bytes_once_answered(registry: Registry) -> None:
    from warden.core.approvals import ApprovalRecord, content_digest

    content = bytes(range(256)) * 4
    record = ApprovalRecord(id="apr_" + "a" * 16, workspace="w1", workspace_id="ws_w1", op="write", path="/final/r",
                            requester="bot:b1@acc_1", bot="b1", minter="lead", accessor="acc_1", zone="final",
                            rule="allow: zone final (rw)", created_at=T0, expires_at=T0 + timedelta(hours=1),
                            digest=content_digest(content), size=len(content), detail={"recursive": False})
    with registry.transaction() as tx:
        tx.approvals.insert(record, content)
    with registry.transaction() as tx:
        assert tx.approvals.get(record.id) == record and tx.approvals.content(record.id) == content
        assert tx.approvals.count_waiting("lead", (T0 + timedelta(minutes=1)).isoformat(timespec="microseconds")) \
            == (1, len(content))
        assert tx.approvals.count_waiting("b1", T0.isoformat(timespec="microseconds"))[0] == 0
        assert [r.id for r in tx.approvals.listed(workspace="w1", statuses=("pending",), limit=5)] == [record.id]
    answered = T0 + timedelta(minutes=2)
    with registry.transaction() as tx:
        assert tx.approvals.move(record.id, "pending", {"status": "approving", "answered_by": "user",
                                                        "answered_at": answered})
        assert not tx.approvals.move(record.id, "pending", {"status": "denied"})  # already moved on
        assert not tx.approvals.move(record.id, "approving", {"status": "approving"},
                                     answered_at=answered + timedelta(seconds=1))  # someone else's claim
        assert tx.approvals.content(record.id) == content  # still needed to carry it out
        assert tx.approvals.move(record.id, "approving", {"status": "approved", "outcome": {"size": 1024}},
                                 answered_at=answered)
    with registry.transaction() as tx:
        done = tx.approvals.get(record.id)
        assert done is not None and done.status == "approved" and done.outcome == {"size": 1024}
        assert done.answered_at == answered and tx.approvals.content(record.id) is None
    other = dataclasses.replace(record, id="apr_" + "b" * 16, created_at=T0 + timedelta(seconds=1))
    with registry.transaction() as tx:
        tx.approvals.insert(other, b"x")
        assert tx.approvals.expire((T0 + timedelta(hours=2)).isoformat(timespec="microseconds")) == [other.id]
        assert tx.approvals.content(other.id) is None
        assert tx.approvals.forget_workspace("ws_w1") == 2
