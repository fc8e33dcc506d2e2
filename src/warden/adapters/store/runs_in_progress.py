"""Rows of runs in progress: a run's intent, removed with its outcome (see schema.py)."""

from __future__ import annotations

import json

from warden.adapters.store.db import Row, Sql
from warden.core.runs import RunInProgress

__all__ = ["SqlRuns"]


def _run(row: Row) -> RunInProgress:
    try:
        argv = json.loads(row["argv"] or "[]")
    except ValueError:  # cut at 4000 characters when written
        argv = [str(row["argv"])]
    return RunInProgress(str(row["run_id"]), str(row["workspace"]), str(row["actor"]), str(row["node"]),
                         int(row["pid"]), int(row["pid_start"]), str(row["started_at"]),
                         tuple(str(a) for a in argv) if isinstance(argv, list) else (str(argv),))


class SqlRuns:
    """The `runs_in_progress` table (core.ports.RunTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, run: RunInProgress) -> None:
        self._sql.execute(
            "INSERT INTO runs_in_progress (run_id, workspace, actor, node, pid, pid_start, started_at, argv) "
            "VALUES (:run_id, :workspace, :actor, :node, :pid, :pid_start, :started_at, :argv)",
            {"run_id": run.run_id, "workspace": run.workspace, "actor": run.actor[:200], "node": run.node,
             "pid": run.pid, "pid_start": run.pid_start, "started_at": run.started_at,
             "argv": json.dumps(list(run.argv))[:4000]})

    def delete(self, run_id: str) -> bool:
        return bool(self._sql.execute("DELETE FROM runs_in_progress WHERE run_id = :run_id RETURNING run_id",
                                      {"run_id": run_id}))

    def of_node(self, node: str) -> list[RunInProgress]:
        return [_run(r) for r in self._sql.execute(
            "SELECT * FROM runs_in_progress WHERE node = :node ORDER BY started_at", {"node": node})]

    def of_workspace(self, workspace: str) -> list[RunInProgress]:
        return [_run(r) for r in self._sql.execute(
            "SELECT * FROM runs_in_progress WHERE workspace = :w", {"w": workspace})]

    def of_workspace_or_node(self, workspace: str, node: str) -> list[RunInProgress]:
        return [_run(r) for r in self._sql.execute(
            "SELECT * FROM runs_in_progress WHERE workspace = :w OR node = :node ORDER BY started_at",
            {"w": workspace, "node": node})]
