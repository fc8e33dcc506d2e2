"""A run's records in the registry, from its start to its outcome, and the runs a dead process left.

A run writes its intent (an in-progress row and a `run.start` event) in the transaction that
takes its lease, before anything starts, and its outcome (the `run` event) with the row's
removal in the one that gives the lease back. A row whose process died is a lost run: the next
run on this node, or the crash sweeper, audits it as `run.lost`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from warden.core.errors import Conflict, Denied
from warden.core.runs import RunInProgress, RunResult
from warden.core.workspaces import WorkspaceRecord

if TYPE_CHECKING:
    from warden.core.grants import Grant
    from warden.core.live import LiveSandbox
    from warden.core.ports import Clock, Processes, Tx
    from warden.services.audit import AuditLog

__all__ = ["RunIntent", "RunsInProgress"]

PERSON = "user"  # the actor of the person's own commands


@dataclass
class RunIntent:
    """One run between its lease's take and release: what both transactions write."""

    run_id: str
    record: WorkspaceRecord
    actor: str
    argv: list[str]
    detail: dict[str, Any]  # the audit detail of its events
    others: bool = False  # another run in progress (or one that died unswept) when it started
    outcome: RunResult | None = None  # set once the command ran
    interrupted: str | None = None  # the signal its person stopped it with (SIGINT, SIGTERM, SIGHUP)
    # A background process recorded running: its outcome is written as it ends (services/live.py),
    # whatever ends the start's lease.
    handed_over: bool = False
    # The workspace's live sandboxes and its lease's fencing number as the lease's take read them:
    # the run looks for its live sandbox in these rather than in a read of its own.
    sandboxes: tuple[LiveSandbox, ...] | None = None
    fence: int | None = None
    chain: tuple[Grant, ...] | None = None  # a bot's grant chain, read there too (services/live.Seen)
    # The caller's own writes once the outcome is recorded, in that transaction (the API's event
    # of the call: one commit fewer a command).
    ended: Callable[[Tx, RunResult], None] | None = None


# A workspace's last use is written at a run's end unless the row read for the run was marked
# under this many seconds ago: an agent's commands in a row then cost no write to the workspace's
# row each (its page in every commit), and what reads it (the janitor's idle archive, counted in
# days; `warden list`) cannot tell a second apart. The live sandboxes' `last_used` does the same.
ACCESS_GRAIN_S = 1.0


def _marked_within(stamp: str, now: datetime, seconds: float) -> bool:
    """Whether `stamp` (ISO 8601) lies in the `seconds` before `now` (a clock set back: no)."""
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return False
    try:
        return 0 <= (now - then).total_seconds() < seconds
    except TypeError:  # a stamp without its zone
        return False


class RunsInProgress:
    """The runs of this node (`node`) in the registry, written in the caller's transactions."""

    def __init__(self, audit: AuditLog, processes: Processes, clock: Clock, node: str) -> None:
        self._audit = audit
        self._processes = processes
        self._clock = clock
        self.node = node

    def begin(self, tx: Tx, intent: RunIntent) -> None:
        """Before anything starts: the workspace checked (still this one, still ready), the runs
        of this node whose process died marked lost, and the run's in-progress row and intent."""
        name = intent.record.name
        current = tx.workspaces.get(name)
        if current is None or current.id != intent.record.id or current.status != "ready":
            now = current.status if current is not None else "gone"
            raise Conflict(f"workspace {name!r} changed ({now}) while the run was being prepared; run it again")
        _, at, accessor = intent.actor.partition("@")
        if at and intent.actor.startswith("bot:"):
            # The bot's grant was checked as its request came, a moment (or a wait for the lease)
            # ago: one revoked or expired since ran the command all the same, in a live sandbox
            # started for it after its revocation had stopped those it had (a background
            # process then ran for as long as it liked). Read here, its live sandbox uses it too.
            from warden.core.grants import alive
            from warden.services.grants import chain_of

            intent.chain = tuple(chain_of(tx, accessor))
            life = alive(intent.chain, self._clock())
            if not life.allowed:
                raise Denied(f"{life.reason} while the command was being prepared; nothing ran (ask the "
                             "workspace's owner for a new grant)", rule=life.rule)
        # A bot's run in progress here, or one that died unswept, or a bot's live sandbox (whose
        # background processes run at any time): what git files appeared since may be a bot's
        # (core/gitcontrol). The person's own runs and live sandbox are the person's: a `git
        # init` of theirs is not moved aside because they keep a server running.
        intent.sandboxes = tuple(tx.sandboxes.of_workspace(name))
        runs = tx.runs.of_workspace_or_node(name, self.node)  # one statement for the two reads below
        intent.others = (any(run.actor != PERSON for run in runs if run.workspace == name)
                         or any(sandbox.principal != PERSON for sandbox in intent.sandboxes))
        self.mark_lost(tx, [run for run in runs if run.node == self.node])
        pid = os.getpid()
        tx.runs.insert(RunInProgress(intent.run_id, name, intent.actor, self.node, pid,
                                     self._processes.start_time(pid) or 0, self._clock().isoformat(),
                                     tuple(intent.argv)))
        self._audit.record(actor=intent.actor, action="run.start", target=name, decision="allow",
                           rule="sandbox", result="started", detail=dict(intent.detail), tx=tx)

    def end(self, tx: Tx, intent: RunIntent) -> None:
        """The outcome (when the command ran, or was stopped by its person) and the end of the
        in-progress row, together."""
        # The rows first, the audit last (see mark_lost).
        tx.runs.delete(intent.run_id)
        if intent.outcome is not None or intent.interrupted is not None:
            now = self._clock()
            if not _marked_within(intent.record.last_accessed, now, ACCESS_GRAIN_S):
                tx.workspaces.update(intent.record.name, {"last_accessed": now.isoformat()})
        if intent.outcome is not None:
            self._audit_outcome(tx, intent, intent.outcome)
            if intent.ended is not None:
                intent.ended(tx, intent.outcome)
        elif intent.interrupted is not None:
            self._audit.record(actor=intent.actor, action="run", target=intent.record.name, decision="allow",
                               rule="sandbox", result="interrupted",
                               detail={**intent.detail, "interrupted_by": intent.interrupted}, tx=tx)

    def mark_lost(self, tx: Tx, of_node: Sequence[RunInProgress] | None = None) -> list[RunInProgress]:
        """Audit as `run.lost` the runs of this node whose process died before their outcome was
        written (a killed `warden run` or `serve`); the runs found so. `of_node`: this node's rows
        as the caller read them in `tx` (by start time), else read here."""
        # Each row removed before any is audited, and audited only by the transaction that removed
        # it: on PostgreSQL two runs starting at once both read the dead run (neither had
        # committed), and both recorded it lost; and the audit's append locks the whole chain, so
        # a row written after it could deadlock with a transaction that holds that row and waits.
        lost = [run for run in (tx.runs.of_node(self.node) if of_node is None else of_node)
                if not self._processes.alive(run.pid, run.pid_start or None) and tx.runs.delete(run.run_id)]
        for run in lost:
            # argv as the registry keeps it (JSON text), as in every run.lost event before.
            self._audit.record(actor=run.actor, action="run.lost", target=run.workspace, decision="allow",
                               rule="sandbox", result="lost",
                               detail={"run_id": run.run_id, "started_at": run.started_at, "pid": run.pid,
                                       "argv": json.dumps(list(run.argv))}, tx=tx)
        return lost

    def _audit_outcome(self, tx: Tx, intent: RunIntent, outcome: RunResult) -> None:
        actor, name = intent.actor, intent.record.name
        events = [e.to_json() for e in outcome.net_events]
        detail = {**intent.detail, "exit_code": outcome.exit_code, "duration_s": round(outcome.duration_s, 4),
                  "timed_out": outcome.timed_out, "signal": outcome.signal,
                  "oom_killed": outcome.oom_killed, "limits_via": outcome.limits_via,
                  "seccomp": outcome.seccomp, "truncated": outcome.truncated}
        if outcome.usage is not None:
            detail["usage"] = outcome.usage.to_json()
        if events:
            detail["network_events"] = events[:100]
        if outcome.net_events_dropped:
            detail["network_events_dropped"] = outcome.net_events_dropped
        for event in events:
            if not event["allowed"]:
                self._audit.record(actor=actor, action="network.refused", target=name, decision="deny",
                                   rule=str(event["rule"]), result="refused", detail=event, tx=tx)
        self._audit.record(actor=actor, action="run", target=name, decision="allow", rule="sandbox",
                           result=str(outcome.exit_code), detail=detail, tx=tx)
