"""Rows of runs in progress: a run's intent, removed with its outcome (see schema.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from warden.adapters.store.db import Row, Tx

__all__ = ["delete", "insert", "of_node", "of_workspace"]


def insert(tx: Tx, run_id: str, workspace: str, actor: str, node: str, pid: int, pid_start: int,
           started_at: str, argv: Sequence[str]) -> None:
    tx.execute("INSERT INTO runs_in_progress (run_id, workspace, actor, node, pid, pid_start, started_at, argv) "
               "VALUES (:run_id, :workspace, :actor, :node, :pid, :pid_start, :started_at, :argv)",
               {"run_id": run_id, "workspace": workspace, "actor": actor[:200], "node": node, "pid": pid,
                "pid_start": pid_start, "started_at": started_at, "argv": json.dumps(list(argv))[:4000]})


def delete(tx: Tx, run_id: str) -> None:
    tx.execute("DELETE FROM runs_in_progress WHERE run_id = :run_id", {"run_id": run_id})


def of_node(tx: Tx, node: str) -> list[Row]:
    return tx.execute("SELECT * FROM runs_in_progress WHERE node = :node ORDER BY started_at", {"node": node})


def of_workspace(tx: Tx, workspace: str) -> list[Row]:
    return tx.execute("SELECT * FROM runs_in_progress WHERE workspace = :w", {"w": workspace})
