"""Workspace leases in the registry, on SQLite and (with WARDEN_TEST_DATABASE_URL) PostgreSQL:
two processes never both hold an exclusive lease, holders are renewed while they work, and a
holder presumed dead is fenced off."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from warden.adapters.processes import HostProcesses
from warden.adapters.store.db import open_database
from warden.adapters.store.registry import SqlRegistry
from warden.core.errors import Locked
from warden.services.leases import LeaseService

ADMIN_URL = os.environ.get("WARDEN_TEST_DATABASE_URL", "")


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlRegistry]:
    if request.param == "sqlite":
        database = SqlRegistry(open_database(None, tmp_path))
        yield database
        database.close()
        return
    if not ADMIN_URL.startswith("postgresql"):
        pytest.skip("set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")
    name = "warden_lease_" + secrets.token_hex(6)
    _admin(f"CREATE DATABASE {name}")
    base, _, _ = ADMIN_URL.rpartition("/")
    database = SqlRegistry(open_database(f"{base}/{name}", tmp_path))
    try:
        yield database
    finally:
        database.close()
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def now() -> datetime:
    return datetime.now(UTC)


def test_exclusive_holders_never_overlap(db: SqlRegistry) -> None:
    """8 threads (standing in for processes: each its own holder) take one exclusive lease
    100 times in all; a counter that only a holder touches must never see two at once."""
    service = LeaseService(db, HostProcesses(), now, "node-a")
    inside = 0
    worst = 0
    won = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, worst, won
        for _ in range(25):
            try:
                with service.hold("w", "exclusive", "test"):
                    with guard:
                        inside += 1
                        worst = max(worst, inside)
                        won += 1
                    time.sleep(0.001)  # holds it a moment, so that others try meanwhile
                    with guard:
                        inside -= 1
            except Locked:
                time.sleep(0.001)  # and tries again a moment later

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert worst == 1 and won > 0
    assert service.state("w").held == ()


@pytest.mark.alone  # A's renewals must come within its 0.5 s ttl: no other test may take the cores
def test_two_nodes_share_the_registry(db: SqlRegistry) -> None:
    """Node B cannot take what node A holds (it cannot tell whether A's process lives), until
    A's lease expires; A's next state write then finds itself fenced off."""
    a = LeaseService(db, HostProcesses(), now, "node-a", ttl=timedelta(seconds=0.5))
    b = LeaseService(db, HostProcesses(), now, "node-b", ttl=timedelta(seconds=0.5))
    with a.hold("w", "exclusive", "archive") as lease:
        with pytest.raises(Locked, match=r"archive by pid .* on node-a"), b.hold("w", "shared", "run"):
            pass
        # Twice A's ttl by the wall clock, which its renewals run on: renewed meanwhile, still A's.
        time.sleep(1.0)
        with pytest.raises(Locked), b.hold("w", "exclusive", "destroy"):
            pass
        with db.transaction() as tx:
            a.check(tx, lease)  # still A's


def test_an_expired_holder_is_fenced_off(db: SqlRegistry) -> None:
    clock = [now()]
    a = LeaseService(db, HostProcesses(), lambda: clock[0], "node-a", ttl=timedelta(seconds=60))
    b = LeaseService(db, HostProcesses(), lambda: clock[0], "node-b", ttl=timedelta(seconds=60))
    held = a.hold("w", "exclusive", "archive")
    lease = held.__enter__()
    with a._lock:
        a._held.clear()  # A stops renewing (its process hangs)
    clock[0] += timedelta(seconds=120)
    with b.hold("w", "exclusive", "repair"), db.transaction() as tx, pytest.raises(Locked, match="taken over"):
        a.check(tx, lease)
    held.__exit__(None, None, None)  # A's late release changes nothing of B's
    assert b.state("w").held == ()


def test_a_lease_is_renewed_while_held(db: SqlRegistry) -> None:
    service = LeaseService(db, HostProcesses(), now, "node-a", ttl=timedelta(seconds=0.3))
    with service.hold("w", "shared", "run"):
        first = service.state("w").held[0].expires
        later = wait_until(lambda: [h for h in service.state("w").held if h.expires > first],
                           message="the lease was never renewed")
        assert later and later[0].expires > first
    assert service.state("w").held == ()


def test_a_dead_instances_hold_goes_though_a_live_holder_renews_the_lease_meanwhile(
        db: SqlRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reaper of a dead instance reads each lease and writes it back without the dead one's
    holds, by compare-and-set. On PostgreSQL each statement sees what was committed before it: a
    live holder's renewal between the read and the write made the write miss, and the dead
    instance's hold stayed (SQLite's write transaction let no renewal in)."""
    from tests.support.fakes import FakeHostProcesses
    from warden.adapters.store.leases import SqlLeases
    from warden.core import leases
    from warden.core.leases import Holder, LeaseState
    from warden.core.nodes import Instance
    from warden.services.audit import AuditLog
    from warden.services.instances import InstanceService, NodeSettings

    t0 = now()
    dead, survivor = Holder("h-dead", "node-b", 77, 7, "run"), Holder("h-live", "node-b", 78, 7, "run")
    state = LeaseState("w")
    for holder in (dead, survivor):
        state = leases.acquire(state, holder, "shared", t0, timedelta(hours=1), lambda _h: None)
    with db.transaction() as tx:
        tx.leases.write(state, None)
        tx.instances.insert(Instance("gone", "node-b", "serve", 77, 7, t0.isoformat(), t0.isoformat(), None, None))

    def renew() -> None:  # the survivor's renewal, from another connection
        with db.transaction() as tx:
            current, version = tx.leases.read("w")
            assert tx.leases.write(leases.renew(current, "h-live", now(), timedelta(hours=1)) or current, version)

    read, reaper = SqlLeases.read, threading.current_thread()
    renewals: list[threading.Thread] = []

    def read_then_a_renewal(self: SqlLeases, workspace: str) -> object:
        found = read(self, workspace)
        if threading.current_thread() is reaper and not renewals:
            renewals.append(threading.Thread(target=renew))
            renewals[0].start()
            renewals[0].join(2.0)  # on SQLite it waits for the reaper's transaction: the reaper goes on
        return found

    monkeypatch.setattr(SqlLeases, "read", read_then_a_renewal)
    later = t0 + timedelta(minutes=5)
    reaping = InstanceService(db, AuditLog(db, lambda: later), lambda: later, FakeHostProcesses(), "node-a",
                              NodeSettings(interval=timedelta(seconds=10), window=timedelta(seconds=60)))
    assert [i.id for i in reaping.reap()] == ["gone"]
    renewals[0].join(30)
    monkeypatch.undo()
    with db.transaction(write=False) as tx:
        left, _ = tx.leases.read("w")
    assert [h.holder.id for h in left.held] == ["h-live"]
