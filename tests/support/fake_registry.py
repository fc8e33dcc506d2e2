"""An in-memory registry (core.ports.Registry) for fast unit tests of services.

It keeps the promises the SQL registry keeps — a transaction commits whole or not at all,
one writer at a time, names unique, compare-and-set really compares, the audit chain is
hashed — and tests/contracts/test_registry_contract.py holds both to them.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from warden.core.approvals import ApprovalRecord
from warden.core.audit import GENESIS, AuditEvent, StoredEvent, detail_text, event_hash
from warden.core.errors import Conflict
from warden.core.grants import BotRow, Grant
from warden.core.leases import LeaseState
from warden.core.live import LiveProcess, LiveSandbox
from warden.core.nodes import Instance
from warden.core.runs import RunInProgress
from warden.core.secrets import Sealed, SecretRow
from warden.core.workspaces import WorkspaceRecord


@dataclass
class _State:
    workspaces: dict[str, WorkspaceRecord] = field(default_factory=dict)
    bots: dict[str, tuple[BotRow, str]] = field(default_factory=dict)
    grants: dict[str, tuple[Grant, str]] = field(default_factory=dict)
    secrets: dict[str, SecretRow] = field(default_factory=dict)
    leases: dict[str, tuple[LeaseState, int]] = field(default_factory=dict)
    runs: dict[str, RunInProgress] = field(default_factory=dict)
    sandboxes: dict[str, LiveSandbox] = field(default_factory=dict)
    processes: dict[str, LiveProcess] = field(default_factory=dict)
    audit: list[StoredEvent] = field(default_factory=list)
    approvals: dict[str, tuple[ApprovalRecord, bytes | None]] = field(default_factory=dict)
    instances: dict[str, Instance] = field(default_factory=dict)
    nonces: dict[str, str] = field(default_factory=dict)


def _stored_meta(meta: object) -> dict[str, object]:
    """Meta as the SQL registry gives it back: through JSON (tuples become lists)."""
    return json.loads(json.dumps(meta, sort_keys=True))  # type: ignore[no-any-return]


class _Workspaces:
    def __init__(self, state: _State) -> None:
        self._s = state

    def get(self, name: str) -> WorkspaceRecord | None:
        return self._s.workspaces.get(name)

    def list_all(self, *, status: str | None = None, kind: str | None = None) -> list[WorkspaceRecord]:
        return [r for _, r in sorted(self._s.workspaces.items())
                if (status is None or r.status == status) and (kind is None or r.type == kind)]

    def elsewhere(self, node: str) -> dict[str, str]:
        return {n: r.node for n, r in self._s.workspaces.items() if r.node is not None and r.node != node}

    def count_created_by(self, actor: str) -> int:
        return sum(1 for r in self._s.workspaces.values() if r.created_by == actor)

    def insert(self, record: WorkspaceRecord) -> None:
        if record.name in self._s.workspaces or any(r.id == record.id for r in self._s.workspaces.values()):
            raise Conflict(f"workspace {record.name!r} already exists; pick another name "
                           "or `warden destroy` it first")
        self._s.workspaces[record.name] = dataclasses.replace(record, meta=_stored_meta(dict(record.meta)))

    def _apply(self, name: str, changes: Mapping[str, object]) -> None:
        values = dict(changes)
        if "meta" in values:
            values["meta"] = _stored_meta(values["meta"])
        self._s.workspaces[name] = dataclasses.replace(self._s.workspaces[name], **values)  # type: ignore[arg-type]

    def update(self, name: str, changes: Mapping[str, object]) -> None:
        if name in self._s.workspaces:
            self._apply(name, changes)

    def compare_and_set(self, name: str, record_id: str, status: str, changes: Mapping[str, object]) -> bool:
        current = self._s.workspaces.get(name)
        if current is None or current.id != record_id or current.status != status:
            return False
        self._apply(name, changes)
        return True

    def delete(self, name: str, *, record_id: str | None = None) -> None:
        current = self._s.workspaces.get(name)
        if current is not None and (record_id is None or current.id == record_id):
            del self._s.workspaces[name]


class _Bots:
    def __init__(self, state: _State) -> None:
        self._s = state

    def insert(self, bot: BotRow, token_hash: str) -> None:
        if bot.name in self._s.bots:
            raise Conflict(f"bot {bot.name!r} is already registered; `warden bot rm {bot.name}` first "
                           "to issue a new identity token")
        self._s.bots[bot.name] = (bot, token_hash)

    def by_name(self, name: str) -> BotRow | None:
        found = self._s.bots.get(name)
        return found[0] if found else None

    def by_hash(self, token_hash: str) -> tuple[BotRow, str] | None:
        return next(((b, h) for b, h in self._s.bots.values() if h == token_hash), None)

    def list_all(self) -> list[BotRow]:
        return [b for _, (b, _h) in sorted(self._s.bots.items())]

    def delete(self, name: str) -> None:
        self._s.bots.pop(name, None)


class _Grants:
    def __init__(self, state: _State) -> None:
        self._s = state

    def purge(self, before: datetime) -> list[str]:
        gone = sorted(a for a, (g, _) in self._s.grants.items()
                      if (g.revoked is not None and g.revoked < before) or g.expires < before)
        for accessor in gone:
            del self._s.grants[accessor]
        return gone

    def insert(self, grant: Grant, token_hash: str) -> None:
        if grant.accessor in self._s.grants:
            raise Conflict(f"already exists or still in use (grant {grant.accessor})")
        self._s.grants[grant.accessor] = (grant, token_hash)

    def chain_by_hash(self, token_hash: str, max_depth: int) -> tuple[list[Grant], str] | None:
        first = next((g for g, h in self._s.grants.values() if h == token_hash), None)
        if first is None:
            return None
        chain = [first]
        while chain[-1].parent is not None and len(chain) <= max_depth:
            parent = self._s.grants.get(chain[-1].parent)
            if parent is None:
                break
            chain.append(parent[0])
        return chain, token_hash

    def by_accessor(self, accessor: str, *, hold: bool = False) -> Grant | None:
        found = self._s.grants.get(accessor)
        return found[0] if found else None

    def _sorted(self, grants: list[Grant]) -> list[Grant]:
        return sorted(grants, key=lambda g: (g.created.isoformat(), g.accessor))

    def of_workspace(self, workspace: str, *, live_only: bool = False) -> list[Grant]:
        return self._sorted([g for g, _ in self._s.grants.values()
                             if g.workspace == workspace and not (live_only and g.revoked)])

    def of_bot(self, bot: str, *, workspace: str | None = None, live_only: bool = True) -> list[Grant]:
        return self._sorted([g for g, _ in self._s.grants.values()
                             if g.bot == bot and (workspace is None or g.workspace == workspace)
                             and not (live_only and g.revoked)])

    def descendants(self, accessors: Sequence[str]) -> list[str]:
        found: list[str] = []
        seen = set(accessors)
        frontier = list(accessors)
        while frontier:
            children = [g.accessor for g, _ in self._s.grants.values()
                        if g.parent in frontier and g.accessor not in seen]
            seen.update(children)
            found.extend(children)
            frontier = children
        return found

    def revoke(self, accessors: Sequence[str], at: datetime) -> int:
        changed = 0
        for accessor in accessors:
            found = self._s.grants.get(accessor)
            if found is not None and found[0].revoked is None:
                self._s.grants[accessor] = (dataclasses.replace(found[0], revoked=at), found[1])
                changed += 1
        return changed


class _Secrets:
    def __init__(self, state: _State) -> None:
        self._s = state

    def upsert(self, name: str, sealed: Sealed, at: str) -> bool:
        old = self._s.secrets.get(name)
        self._s.secrets[name] = SecretRow(name, sealed, old.created_at if old else at, at)
        return old is None

    def get(self, name: str) -> SecretRow | None:
        return self._s.secrets.get(name)

    def list_all(self) -> list[SecretRow]:
        return [row for _, row in sorted(self._s.secrets.items())]

    def names(self) -> list[str]:
        return sorted(self._s.secrets)

    def delete(self, name: str) -> bool:
        return self._s.secrets.pop(name, None) is not None

    def hold_key(self) -> str | None:
        """Nothing to hold: one process, no cluster keyring."""
        return None


class _Leases:
    def __init__(self, state: _State) -> None:
        self._s = state

    def read(self, workspace: str) -> tuple[LeaseState, int | None]:
        found = self._s.leases.get(workspace)
        return found if found else (LeaseState(workspace), None)

    def names(self) -> list[str]:
        return sorted(n for n, (state, _) in self._s.leases.items() if state.held or state.lock is not None)

    def write(self, state: LeaseState, version: int | None) -> bool:
        found = self._s.leases.get(state.workspace)
        if (found[1] if found else None) != version:
            return False
        self._s.leases[state.workspace] = (state, (version or 0) + 1)
        return True


class _Runs:
    def __init__(self, state: _State) -> None:
        self._s = state

    def insert(self, run: RunInProgress) -> None:
        if run.run_id in self._s.runs:
            raise Conflict(f"already exists or still in use (run {run.run_id})")
        self._s.runs[run.run_id] = run

    def delete(self, run_id: str) -> bool:
        return self._s.runs.pop(run_id, None) is not None

    def of_node(self, node: str) -> list[RunInProgress]:
        return sorted((r for r in self._s.runs.values() if r.node == node), key=lambda r: r.started_at)

    def of_workspace(self, workspace: str) -> list[RunInProgress]:
        return [r for r in self._s.runs.values() if r.workspace == workspace]

    def of_workspace_or_node(self, workspace: str, node: str) -> list[RunInProgress]:
        return sorted((r for r in self._s.runs.values() if r.workspace == workspace or r.node == node),
                      key=lambda r: r.started_at)


def _stored_live(meta: Mapping[str, object]) -> dict[str, object]:
    """Meta as the SQL registry gives it back: through JSON."""
    return json.loads(json.dumps(dict(meta), sort_keys=True, default=str))  # type: ignore[no-any-return]


class _Sandboxes:
    def __init__(self, state: _State) -> None:
        self._s = state

    def insert(self, sandbox: LiveSandbox) -> bool:
        key = (sandbox.node, sandbox.workspace, sandbox.principal, sandbox.network)
        if sandbox.id in self._s.sandboxes or any((s.node, s.workspace, s.principal, s.network) == key
                                                  for s in self._s.sandboxes.values()):
            return False
        self._s.sandboxes[sandbox.id] = sandbox._replace(meta=_stored_live(sandbox.meta))
        return True

    def get(self, sandbox_id: str) -> LiveSandbox | None:
        return self._s.sandboxes.get(sandbox_id)

    def find(self, node: str, workspace: str, principal: str, network: str) -> LiveSandbox | None:
        return next((s for s in self._s.sandboxes.values()
                     if (s.node, s.workspace, s.principal, s.network) == (node, workspace, principal, network)), None)

    def _sorted(self, found: list[LiveSandbox]) -> list[LiveSandbox]:
        return sorted(found, key=lambda s: (s.started_at, s.id))

    def of_workspace(self, workspace: str) -> list[LiveSandbox]:
        return self._sorted([s for s in self._s.sandboxes.values() if s.workspace == workspace])

    def of_node(self, node: str) -> list[LiveSandbox]:
        return self._sorted([s for s in self._s.sandboxes.values() if s.node == node])

    def touch(self, sandbox_id: str, at: str) -> bool:
        if sandbox_id not in self._s.sandboxes:
            return False
        self._s.sandboxes[sandbox_id] = self._s.sandboxes[sandbox_id]._replace(last_used=at)
        return True

    def delete(self, sandbox_id: str, *, used_last: str | None = None) -> bool:
        found = self._s.sandboxes.get(sandbox_id)
        if found is None or (used_last is not None and found.last_used != used_last):
            return False
        return self._s.sandboxes.pop(sandbox_id, None) is not None


class _Processes:
    def __init__(self, state: _State) -> None:
        self._s = state

    def insert(self, process: LiveProcess) -> None:
        if process.id in self._s.processes:
            raise Conflict(f"already exists or still in use (process {process.id})")
        self._s.processes[process.id] = process._replace(meta=_stored_live(process.meta),
                                                         principal=process.principal[:200])

    def get(self, process_id: str) -> LiveProcess | None:
        return self._s.processes.get(process_id)

    def of_workspace(self, workspace: str, *, principal: str | None = None) -> list[LiveProcess]:
        return sorted((p for p in self._s.processes.values()
                       if p.workspace == workspace and (principal is None or p.principal == principal)),
                      key=lambda p: (p.started_at, p.id))

    def of_sandbox(self, sandbox_id: str) -> list[LiveProcess]:
        return sorted((p for p in self._s.processes.values() if p.sandbox_id == sandbox_id),
                      key=lambda p: (p.started_at, p.id))

    def count_running(self, *, bot: str | None = None) -> int:
        return sum(1 for p in self._s.processes.values()
                   if p.running and (p.bot != "" if bot is None else p.bot == bot))

    def update(self, process_id: str, changes: Mapping[str, object]) -> bool:
        found = self._s.processes.get(process_id)
        if found is None or not found.running:
            return False
        values = {k: v for k, v in changes.items() if k in ("status", "meta", "sandbox_id")}
        if "meta" in values:
            values["meta"] = _stored_live(values["meta"])  # type: ignore[arg-type]
        self._s.processes[process_id] = found._replace(**values)  # type: ignore[arg-type]
        return True

    def finish(self, process_id: str, *, status: str, exit_code: int | None, signal: int | None, timed_out: bool,
               ended_at: str) -> bool:
        found = self._s.processes.get(process_id)
        if found is None or not found.running:
            return False
        self._s.processes[process_id] = found._replace(status=status, exit_code=exit_code, signal=signal,
                                                       timed_out=timed_out, ended_at=ended_at)
        return True

    def delete(self, process_id: str) -> None:
        self._s.processes.pop(process_id, None)


class _Audit:
    def __init__(self, state: _State) -> None:
        self._s = state

    def append(self, event: AuditEvent) -> AuditEvent:
        last = self.head()
        seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
        digest = event_hash(event, seq, prev)
        self._s.audit.append(StoredEvent(seq=seq, at=event.at, actor=event.actor, action=event.action,
                                         target=event.target, decision=event.decision, rule=event.rule,
                                         result=event.result, detail=detail_text(event.detail),
                                         prev_hash=prev, hash=digest))
        return dataclasses.replace(event, seq=seq, prev_hash=prev, hash=digest)

    def head(self) -> tuple[int, str] | None:
        return (self._s.audit[-1].seq, self._s.audit[-1].hash) if self._s.audit else None

    def newest(self, *, target: str | None, limit: int) -> list[StoredEvent]:
        chosen = [e for e in self._s.audit
                  if target is None or e.target == target or e.target.startswith(f"{target}:")]
        return list(reversed(chosen))[:limit]

    def page(self, *, after: int | None, limit: int) -> list[StoredEvent]:
        return [e for e in self._s.audit if after is None or e.seq > after][:limit]


class _Approvals:
    def __init__(self, state: _State) -> None:
        self._s = state

    def insert(self, record: ApprovalRecord, content: bytes | None) -> None:
        if record.id in self._s.approvals:
            raise Conflict(f"already exists (approval {record.id})")
        self._s.approvals[record.id] = (record, content)

    def get(self, approval_id: str) -> ApprovalRecord | None:
        found = self._s.approvals.get(approval_id)
        return found[0] if found else None

    def content(self, approval_id: str) -> bytes | None:
        found = self._s.approvals.get(approval_id)
        return found[1] if found else None

    def move(self, approval_id: str, from_status: str, changes: Mapping[str, object], *,
             answered_at: datetime | None = None) -> bool:
        found = self._s.approvals.get(approval_id)
        if found is None or found[0].status != from_status:
            return False
        if answered_at is not None and found[0].answered_at != answered_at:
            return False
        record = dataclasses.replace(found[0], **changes)  # type: ignore[arg-type]
        final = changes.get("status") in ("approved", "denied", "expired", "failed")
        self._s.approvals[approval_id] = (record, None if final else found[1])
        return True

    def listed(self, *, workspace: str | None, statuses: Sequence[str] | None, limit: int) -> list[ApprovalRecord]:
        rows = [r for r, _ in self._s.approvals.values()
                if (workspace is None or r.workspace == workspace) and (statuses is None or r.status in statuses)]
        return sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True)[:limit]

    def count_waiting(self, minter: str, now: str) -> tuple[int, int]:
        at = datetime.fromisoformat(now)
        waiting = [r for r, _ in self._s.approvals.values() if r.status == "pending" and r.expires_at > at]
        return sum(1 for r in waiting if r.minter == minter), sum(r.size or 0 for r in waiting)

    def expire(self, now: str) -> list[str]:
        at = datetime.fromisoformat(now)
        gone = sorted(i for i, (r, _) in self._s.approvals.items() if r.status == "pending" and r.expires_at <= at)
        for approval_id in gone:
            self._s.approvals[approval_id] = (dataclasses.replace(self._s.approvals[approval_id][0],
                                                                  status="expired"), None)
        return gone

    def forget_workspace(self, workspace_id: str) -> int:
        gone = [i for i, (r, _) in self._s.approvals.items() if r.workspace_id == workspace_id]
        for approval_id in gone:
            del self._s.approvals[approval_id]
        return len(gone)


class _Instances:
    def __init__(self, state: _State) -> None:
        self._s = state

    def insert(self, instance: Instance) -> None:
        if instance.id in self._s.instances:
            raise Conflict(f"already exists (instance {instance.id})")
        self._s.instances[instance.id] = instance

    def beat(self, instance_id: str, at: str) -> bool:
        found = self._s.instances.get(instance_id)
        if found is None:
            return False
        self._s.instances[instance_id] = found._replace(heartbeat_at=at)
        return True

    def delete(self, instance_id: str) -> bool:
        return self._s.instances.pop(instance_id, None) is not None

    def list_all(self) -> list[Instance]:
        return sorted(self._s.instances.values(), key=lambda i: (i.node, i.started_at))

    def remember_nonce(self, nonce: str, at: str) -> bool:
        if nonce in self._s.nonces:
            return False
        self._s.nonces[nonce] = at
        return True

    def forget_nonces(self, before: str) -> int:
        gone = [n for n, at in self._s.nonces.items() if at < before]
        for nonce in gone:
            del self._s.nonces[nonce]
        return len(gone)


class MemoryTx:
    def __init__(self, state: _State) -> None:
        self.workspaces = _Workspaces(state)
        self.bots = _Bots(state)
        self.grants = _Grants(state)
        self.secrets = _Secrets(state)
        self.leases = _Leases(state)
        self.runs = _Runs(state)
        self.sandboxes = _Sandboxes(state)
        self.processes = _Processes(state)
        self.audit = _Audit(state)
        self.approvals = _Approvals(state)
        self.instances = _Instances(state)


class MemoryRegistry:
    """The registry in a dict: a transaction works on a copy and commits it only if it ends well."""

    url = "memory://"

    def __init__(self) -> None:
        self._state = _State()
        self._lock = threading.RLock()  # one transaction at a time, like SQLite's BEGIN IMMEDIATE

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[MemoryTx]:
        with self._lock:
            working = copy.deepcopy(self._state)
            yield MemoryTx(working)
            # A read transaction that writes commits too, as SQLite's deferred BEGIN does.
            self._state = working

    def close(self) -> None:
        pass

    def tamper_audit(self, seq: int, **changes: object) -> None:
        """Edit one stored audit event behind the log's back (for tests of `verify`)."""
        with self._lock:
            self._state.audit = [dataclasses.replace(e, **changes) if e.seq == seq else e  # type: ignore[arg-type]
                                 for e in self._state.audit]
