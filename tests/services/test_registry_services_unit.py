"""The registry's services (audit log, secrets, grants, leases) on fakes of their ports: no disk,
no database, no keys on file — milliseconds each. The same services run on SQLite and the real
keystore in test_audit.py, test_secrets.py, test_grants.py and test_leases.py."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.clock import Clock
from tests.support.fake_keys import FakeKeys
from tests.support.fake_registry import MemoryRegistry
from warden.core.errors import Denied, Locked, NotFound
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog
from warden.services.grants import GrantService
from warden.services.leases import LeaseService
from warden.services.secrets import SecretService

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Processes:
    """Processes by pid: the ones in `running` are alive (this one, to begin with)."""

    def __init__(self) -> None:
        self.running: set[int] = {os.getpid()}

    def alive(self, pid: int, started: int | None = None) -> bool:
        return pid in self.running

    def start_time(self, pid: int) -> int | None:
        return 7 if pid in self.running else None


class Workspaces:
    """The one thing GrantService asks of the workspace service: a workspace's record."""

    def get(self, name: str) -> WorkspaceRecord:
        if name != "w1":
            raise NotFound(f"no workspace named {name!r}")
        return WorkspaceRecord(id="ws_1", name="w1", path="/w/w1", type="user", status="ready",
                               created_at=T0.isoformat(), last_accessed=T0.isoformat())


@pytest.fixture
def registry() -> MemoryRegistry:
    return MemoryRegistry()


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def audit(registry: MemoryRegistry, clock: Clock) -> AuditLog:
    return AuditLog(registry, clock)


# -- the audit log -------------------------------------------------------------------------------
def test_an_edited_event_breaks_the_chain_there(registry: MemoryRegistry, audit: AuditLog) -> None:
    for i in range(4):
        audit.record(actor="user", action="create", target=f"w{i}")
    assert audit.verify() == (4, None)
    registry.tamper_audit(3, actor="someone-else")
    _, broken = audit.verify()
    assert broken is not None and broken.seq == 3


def test_detail_warden_never_writes_is_reported(registry: MemoryRegistry, audit: AuditLog) -> None:
    audit.record(actor="user", action="create", target="w")
    registry.tamper_audit(1, detail='{"a": 1, "a": 2}')
    _, broken = audit.verify()
    assert broken is not None and "not what Warden writes" in broken.reason


def test_secret_values_never_reach_the_log(audit: AuditLog) -> None:
    event = audit.record(actor="user", action="x", target="w", detail={"token": "wdn_live", "n": 1})
    assert event.detail == {"token": "[redacted]", "n": 1}
    assert audit.list()[0].detail == {"token": "[redacted]", "n": 1}


# -- secrets -------------------------------------------------------------------------------------
def test_secrets_are_sealed_rotated_and_audited_without_values(registry: MemoryRegistry, audit: AuditLog,
                                                               clock: Clock) -> None:
    keys = FakeKeys()
    service = SecretService(registry, audit, keys, clock)
    assert service.set("API_KEY", "s3cret") is True
    assert service.set("API_KEY", "s3cret-2") is False
    assert service.environment(["API_KEY", "GONE"]).env == {"API_KEY": "s3cret-2"}
    assert service.environment(["API_KEY", "GONE"]).missing == ("GONE",)
    kid, count = service.rotate_key()
    assert (kid, count) == ("k2", 1) and service.list_secrets()[0].sealed.key_id == "k2"
    assert service.environment(["API_KEY"]).env == {"API_KEY": "s3cret-2"}
    actions = [e.action for e in audit.list()]
    assert actions == ["secret.set", "secret.set", "secret.rotate_key"]
    assert all("s3cret" not in str(e.detail) for e in audit.list())


def test_removing_an_unknown_secret_changes_nothing(registry: MemoryRegistry, audit: AuditLog,
                                                    clock: Clock) -> None:
    service = SecretService(registry, audit, FakeKeys(), clock)
    service.set("KEEP", "v")
    with pytest.raises(NotFound, match="no secret named 'NOPE'"):
        service.remove("NOPE")
    assert service.names() == ["KEEP"] and len(audit.list()) == 1


# -- grants --------------------------------------------------------------------------------------
def _grants(registry: MemoryRegistry, audit: AuditLog, clock: Clock) -> GrantService:
    counter = iter(range(1, 10_000))
    return GrantService(registry, audit, FakeKeys(), Workspaces(), clock,  # type: ignore[arg-type]
                        default_ttl=timedelta(hours=1), max_ttl=timedelta(days=1),
                        random=lambda n: next(counter).to_bytes(n, "big"))


def test_a_grant_needs_a_registered_bot_and_leaves_nothing_when_refused(
        registry: MemoryRegistry, audit: AuditLog, clock: Clock) -> None:
    grants = _grants(registry, audit, clock)
    with pytest.raises(NotFound, match="no bot named 'ghost'"):
        grants.grant("w1", "ghost", "read")
    assert grants.list_grants("w1") == [] and audit.list() == []


def test_revoking_a_grant_takes_its_children_and_their_tokens_stop_working(
        registry: MemoryRegistry, audit: AuditLog, clock: Clock) -> None:
    grants = _grants(registry, audit, clock)
    grants.register_bot("b1")
    root = grants.grant("w1", "b1", ["read", "admin"])
    _, chain = grants.resolve(root.token)
    child = grants.grant("w1", "b2", "read", parent=chain)
    assert [g.accessor for g in grants.resolve(child.token)[1]] == [child.grant.accessor, root.grant.accessor]
    revoked = grants.revoke("w1", accessor=root.grant.accessor)
    assert sorted(revoked) == sorted([root.grant.accessor, child.grant.accessor])
    assert all(g.revoked == T0 for g in grants.list_grants("w1"))


def test_a_grant_expires_by_the_clock(registry: MemoryRegistry, audit: AuditLog, clock: Clock) -> None:
    grants = _grants(registry, audit, clock)
    grants.register_bot("b1")
    grants.grant("w1", "b1", "read", ttl=timedelta(minutes=5))
    assert len(grants.grants_of_bot("b1")) == 1
    clock.now += timedelta(minutes=6)
    assert grants.grants_of_bot("b1") == []


# -- leases --------------------------------------------------------------------------------------
def test_an_exclusive_lease_refuses_others_until_released(registry: MemoryRegistry, clock: Clock) -> None:
    processes = Processes()
    leases = LeaseService(registry, processes, clock, "node-a")
    with leases.hold("w1", "exclusive", "archive"), pytest.raises(Locked, match="archive"), \
            leases.hold("w1", "shared", "run"):
        pass
    with leases.hold("w1", "shared", "run"), leases.hold("w1", "shared", "run"):
        assert len(leases.state("w1").held) == 2
    assert leases.state("w1").held == ()


def test_a_dead_holder_is_fenced_off(registry: MemoryRegistry, clock: Clock) -> None:
    processes = Processes()
    first = LeaseService(registry, processes, clock, "node-a")
    with first.hold("w1", "exclusive", "repair") as lease:
        processes.running.clear()  # the holder died (kill -9): its pid is gone
        with first.hold("w1", "exclusive", "destroy"), registry.transaction() as tx, \
                pytest.raises(Locked, match="taken over"):
            first.check(tx, lease)


def test_denied_is_not_locked() -> None:
    # The two refusals map to different exit statuses; a lease conflict must never read as a denial.
    assert not issubclass(Locked, Denied) and not issubclass(Denied, Locked)
