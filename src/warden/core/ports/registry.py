"""The registry as a unit of work, and the keys its rows are sealed and hashed with."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warden.core.approvals import ApprovalRecord
    from warden.core.audit import AuditEvent, StoredEvent
    from warden.core.grants import BotRow, Grant
    from warden.core.keyring import KeyringState, KeyRow, Purpose
    from warden.core.leases import LeaseState
    from warden.core.live import LiveProcess, LiveSandbox
    from warden.core.nodes import Instance
    from warden.core.runs import RunInProgress
    from warden.core.secrets import Sealed, SecretRow
    from warden.core.workspaces import WorkspaceRecord

__all__ = [
    "ApprovalTable",
    "AuditTable",
    "BotTable",
    "Clock",
    "ClusterKeyring",
    "GrantTable",
    "InstanceTable",
    "Keys",
    "LeaseTable",
    "ProcessTable",
    "Registry",
    "RunTable",
    "SandboxTable",
    "SecretTable",
    "Tx",
    "WorkspaceTable",
]


# Now, as an aware UTC datetime; tests pass a clock they move by hand.
Clock = Callable[[], datetime]


class WorkspaceTable(Protocol):
    def get(self, name: str) -> WorkspaceRecord | None: ...

    def list_all(self, *, status: str | None = None, kind: str | None = None) -> list[WorkspaceRecord]:
        """Every workspace (of `status`, of `kind`), by name."""
        ...

    def elsewhere(self, node: str) -> dict[str, str]:
        """The workspaces on another node than `node`, by name: their node."""
        ...

    def count_created_by(self, actor: str) -> int:
        """How many workspaces `actor` made (every status), counted so that two transactions that
        count and then insert take turns (a per-bot limit must hold across server processes)."""
        ...

    def insert(self, record: WorkspaceRecord) -> None:
        """Raises Conflict when the name is taken."""
        ...

    def update(self, name: str, changes: Mapping[str, object]) -> None: ...

    def compare_and_set(self, name: str, record_id: str, status: str, changes: Mapping[str, object]) -> bool:
        """Apply `changes` only if `name` is still workspace `record_id` in `status`."""
        ...

    def delete(self, name: str, *, record_id: str | None = None) -> None:
        """Delete `name` (only while it is still workspace `record_id`, when given)."""
        ...


class BotTable(Protocol):
    def insert(self, bot: BotRow, token_hash: str) -> None:
        """Raises Conflict when a bot of that name is registered."""
        ...

    def by_name(self, name: str) -> BotRow | None: ...

    def by_hash(self, token_hash: str) -> tuple[BotRow, str] | None:
        """The bot whose identity token has this hash, and the stored hash (compared by the caller)."""
        ...

    def list_all(self) -> list[BotRow]: ...

    def delete(self, name: str) -> None: ...


class GrantTable(Protocol):
    def insert(self, grant: Grant, token_hash: str) -> None: ...

    def chain_by_hash(self, token_hash: str, max_depth: int) -> tuple[list[Grant], str] | None:
        """The grant whose token has this hash and its ancestors (nearest first), and the stored hash."""
        ...

    def by_accessor(self, accessor: str, *, hold: bool = False) -> Grant | None:
        """The grant `accessor`; with `hold`, a revoke of it on another connection waits until
        this transaction ends, and one under way is waited for (PostgreSQL's FOR SHARE; SQLite's
        write transactions are one at a time already)."""
        ...

    def of_workspace(self, workspace: str, *, live_only: bool = False) -> list[Grant]: ...

    def of_bot(self, bot: str, *, workspace: str | None = None, live_only: bool = True) -> list[Grant]:
        """The bot's grants (on `workspace`); `live_only` drops revoked ones (expiry is the service's)."""
        ...

    def descendants(self, accessors: Sequence[str]) -> list[str]:
        """Every grant minted from one of `accessors`, at any depth, breadth first."""
        ...

    def revoke(self, accessors: Sequence[str], at: datetime) -> int:
        """Mark `accessors` revoked (those not already); how many changed."""
        ...

    def purge(self, before: datetime) -> list[str]:
        """Delete grants revoked or expired before `before`; their accessors."""
        ...


class SecretTable(Protocol):
    def upsert(self, name: str, sealed: Sealed, at: str) -> bool:
        """Insert or replace `name`; True when it is new."""
        ...

    def get(self, name: str) -> SecretRow | None: ...

    def list_all(self) -> list[SecretRow]: ...

    def names(self) -> list[str]: ...

    def delete(self, name: str) -> bool: ...

    def hold_key(self) -> str | None:
        """Keep a cluster's secrets key from being rotated (on any node) until this transaction
        ends; the id of the key current now (None: no cluster keyring, nothing held)."""
        ...


class LeaseTable(Protocol):
    def read(self, workspace: str) -> tuple[LeaseState, int | None]:
        """The lease state of `workspace` and its row version (None: no row yet)."""
        ...

    def names(self) -> list[str]:
        """The workspace names whose lease row has holders or a terminal's lock."""
        ...

    def write(self, state: LeaseState, version: int | None) -> bool:
        """Store `state` if the row is still at `version` (None: must not exist); False if another won."""
        ...


class RunTable(Protocol):
    """Runs in progress: a run's intent, removed with its outcome."""

    def insert(self, run: RunInProgress) -> None: ...

    def delete(self, run_id: str) -> bool:
        """Remove the row; True when this call removed it (its outcome is then this caller's to record)."""
        ...

    def of_node(self, node: str) -> list[RunInProgress]: ...

    def of_workspace(self, workspace: str) -> list[RunInProgress]: ...

    def of_workspace_or_node(self, workspace: str, node: str) -> list[RunInProgress]:
        """The rows of `workspace` or of `node`, by start time: both of a run's reads in one statement."""
        ...


class SandboxTable(Protocol):
    """Live sandboxes (core/live.py): one row per running one, so any process of its node finds it."""

    def insert(self, sandbox: LiveSandbox) -> bool:
        """Store a sandbox just started; False (nothing stored) when one with its key — node,
        workspace, principal, network — is there already."""
        ...

    def get(self, sandbox_id: str) -> LiveSandbox | None: ...

    def find(self, node: str, workspace: str, principal: str, network: str) -> LiveSandbox | None: ...

    def of_workspace(self, workspace: str) -> list[LiveSandbox]: ...

    def of_node(self, node: str) -> list[LiveSandbox]: ...

    def touch(self, sandbox_id: str, at: str) -> bool:
        """Record a use (its idle time counts from the last one); False when there is no such
        row (a stop claimed it). The row stays locked to the end of the transaction."""
        ...

    def delete(self, sandbox_id: str, *, used_last: str | None = None) -> bool:
        """Remove the row; True when this call removed it (its stop is then this caller's to record).
        `used_last`: only if it was last used then (no use recorded since, as an idle stop wants)."""
        ...


class ProcessTable(Protocol):
    """Background processes of live sandboxes, from their start to their outcome."""

    def insert(self, process: LiveProcess) -> None:
        """Raises Conflict when the id is taken."""
        ...

    def get(self, process_id: str) -> LiveProcess | None: ...

    def of_workspace(self, workspace: str, *, principal: str | None = None) -> list[LiveProcess]:
        """The workspace's processes (of `principal`), oldest first."""
        ...

    def of_sandbox(self, sandbox_id: str) -> list[LiveProcess]: ...

    def count_running(self, *, bot: str | None = None) -> int:
        """Processes starting or running that bots' exec slots hold (of `bot` when given). Called
        before an insert in one transaction, the two are atomic against other writers."""
        ...

    def update(self, process_id: str, changes: Mapping[str, object]) -> bool:
        """Change `status`, `meta` or `sandbox_id` of a process still starting or running; False
        when it has ended (an outcome `finish` recorded stands)."""
        ...

    def finish(self, process_id: str, *, status: str, exit_code: int | None, signal: int | None, timed_out: bool,
               ended_at: str) -> bool:
        """Record the outcome of a process still starting or running; True when this call ended
        it (its outcome is then this caller's to audit), False when it had ended already."""
        ...

    def delete(self, process_id: str) -> None: ...


class InstanceTable(Protocol):
    """Running Warden processes with their heartbeats, and nonces of node-to-node requests."""

    def insert(self, instance: Instance) -> None: ...

    def beat(self, instance_id: str, at: str) -> bool:
        """Renew its heartbeat; False when the row is gone (found dead meanwhile)."""
        ...

    def delete(self, instance_id: str) -> bool: ...

    def list_all(self) -> list[Instance]: ...

    def remember_nonce(self, nonce: str, at: str) -> bool:
        """False when `nonce` was seen before."""
        ...

    def forget_nonces(self, before: str) -> int: ...


class AuditTable(Protocol):
    def append(self, event: AuditEvent) -> AuditEvent:
        """Chain `event` after the newest one (one appender at a time) and store it; the stored event."""
        ...

    def head(self) -> tuple[int, str] | None:
        """The newest event's seq and hash."""
        ...

    def newest(self, *, target: str | None, limit: int) -> list[StoredEvent]:
        """The newest `limit` events (newest first), only those about `target` when given."""
        ...

    def page(self, *, after: int | None, limit: int) -> list[StoredEvent]:
        """Up to `limit` events with seq > `after` (None: from the first stored, whatever its seq),
        oldest first."""
        ...


class ApprovalTable(Protocol):
    """Requests waiting for a person's answer (core/approvals.py)."""

    def insert(self, record: ApprovalRecord, content: bytes | None) -> None: ...

    def get(self, approval_id: str) -> ApprovalRecord | None: ...

    def content(self, approval_id: str) -> bytes | None:
        """The bytes a write asked to write (None for other operations)."""
        ...

    def move(self, approval_id: str, from_status: str, changes: Mapping[str, object], *,
             answered_at: datetime | None = None) -> bool:
        """Compare-and-set: apply `changes` (status, answered_by, …) only if the row is still
        `from_status` (and was answered at `answered_at`, when given); False when another answer
        got there first."""
        ...

    def listed(self, *, workspace: str | None, statuses: Sequence[str] | None, limit: int) -> list[ApprovalRecord]:
        """Newest first."""
        ...

    def count_waiting(self, minter: str, now: str) -> tuple[int, int]:
        """The requests still pending (not past their time) under grants minted by `minter`,
        and the bytes all pending requests of the home hold."""
        ...

    def expire(self, now: str) -> list[str]:
        """Mark pending requests past their time `expired` (content dropped); their ids."""
        ...

    def forget_workspace(self, workspace_id: str) -> int:
        """Drop the requests of a destroyed workspace."""
        ...


class Tx(Protocol):
    """One registry transaction."""

    @property
    def workspaces(self) -> WorkspaceTable: ...

    @property
    def bots(self) -> BotTable: ...

    @property
    def grants(self) -> GrantTable: ...

    @property
    def secrets(self) -> SecretTable: ...

    @property
    def leases(self) -> LeaseTable: ...

    @property
    def runs(self) -> RunTable: ...

    @property
    def sandboxes(self) -> SandboxTable: ...

    @property
    def processes(self) -> ProcessTable: ...

    @property
    def instances(self) -> InstanceTable: ...

    @property
    def audit(self) -> AuditTable: ...

    @property
    def approvals(self) -> ApprovalTable: ...


class Keys(Protocol):
    """The token pepper and the secrets master key (files in $WARDEN_HOME/keys, or the environment)."""

    def pepper(self) -> bytes:
        """The HMAC key new tokens are stored under."""
        ...

    def peppers(self) -> list[bytes]:
        """Every pepper a stored token may be hashed under, the current one first (a cluster keeps
        the old ones after a rotation until they are retired)."""
        ...

    def seal(self, name: str, plaintext: bytes, *, key: tuple[str, bytes] | None = None) -> Sealed:
        """Encrypt `plaintext` bound to `name` (under `key`, a (key id, key) pair, when given)."""
        ...

    def open(self, name: str, sealed: Sealed) -> bytes:
        """Decrypt a value sealed under `name`."""
        ...

    def begin_rotation(self) -> tuple[str, bytes]:
        """Make the next master key (kept beside the current one until `finish_rotation`)."""
        ...

    def sealing(self, *, rotating: bool = False) -> contextlib.AbstractContextManager[None]:
        """Held while a value is sealed and stored (shared: those run side by side), and across a
        rotation from its begin to its finish (`rotating`: alone). A value sealed under the key a
        rotation retires, and stored after its re-seal, was lost with that key."""
        ...

    def finish_rotation(self) -> None: ...


class ClusterKeyring(Protocol):
    """The keys of a cluster, wrapped in its registry under the cluster key each node holds."""

    def state(self) -> KeyringState | None:
        """The keyring's version and cluster-key check value (None: the registry has none)."""
        ...

    def check(self) -> KeyringState:
        """The state, once this node's cluster key unwraps every key (else KeysMismatch)."""
        ...

    def rows(self) -> list[KeyRow]: ...

    def node_kek_id(self) -> str | None:
        """The check value of the cluster key this node holds (None: none)."""
        ...

    def source(self) -> str:
        """Where this node's cluster key comes from (a file or the environment variable)."""
        ...

    def create(self, *, pepper: bytes | None = None,
               secrets_key: bytes | None = None) -> tuple[KeyringState, bool]: ...

    def rotate(self, purpose: Purpose, *, expected: int | None = None) -> dict[str, object]: ...

    def retire_peppers(self, *, expected: int | None = None) -> dict[str, object]: ...

    def rotate_kek(self, *, new_key: bytes | None = None, expected: int | None = None) -> dict[str, object]: ...


class Registry(Protocol):
    """Where workspaces, bots, grants, secrets, leases and the audit log live (SQLite or PostgreSQL)."""

    url: str

    def transaction(self, *, write: bool = True) -> contextlib.AbstractContextManager[Tx]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        ...

    def close(self) -> None: ...
