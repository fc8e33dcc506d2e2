"""Rows of live sandboxes and their background processes (see schema.py and core/live.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from warden.adapters.store.db import Row, Sql

if TYPE_CHECKING:  # imported when a row is read: every run asks whether a live sandbox exists
    from warden.core.live import LiveProcess, LiveSandbox

__all__ = ["SqlProcesses", "SqlSandboxes"]

# Admission of background processes counts, then inserts: on PostgreSQL the two take turns under
# this transaction-scoped advisory lock (SQLite's write transaction already holds its database lock).
_SLOTS_LOCK = 7263902
_SANDBOX_COLUMNS = ("id", "workspace", "workspace_id", "principal", "network", "fingerprint", "fence", "node", "pid",
                    "pid_start", "supervisor_pid", "supervisor_start", "socket", "started_at", "last_used", "meta")
_PROCESS_COLUMNS = ("id", "sandbox_id", "workspace", "principal", "bot", "argv", "status", "exit_code", "signal",
                    "timed_out", "started_at", "ended_at", "node", "meta")
_RUNNING = "('starting', 'running')"


def _meta(text: object) -> dict[str, object]:
    try:
        value = json.loads(str(text or "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _sandbox(row: Row) -> LiveSandbox:
    from warden.core.live import LiveSandbox

    return LiveSandbox(str(row["id"]), str(row["workspace"]), str(row["workspace_id"]), str(row["principal"]),
                       str(row["network"]), str(row["fingerprint"]), int(row["fence"]), str(row["node"]),
                       int(row["pid"]), int(row["pid_start"]), int(row["supervisor_pid"]),
                       int(row["supervisor_start"]), str(row["socket"]), str(row["started_at"]),
                       str(row["last_used"]), _meta(row["meta"]))


def _process(row: Row) -> LiveProcess:
    from warden.core.live import LiveProcess

    try:
        argv = json.loads(row["argv"] or "[]")
    except ValueError:  # cut at 4000 characters when written
        argv = [str(row["argv"])]
    return LiveProcess(str(row["id"]), str(row["sandbox_id"]), str(row["workspace"]), str(row["principal"]),
                       str(row["bot"] or ""),
                       tuple(str(a) for a in argv) if isinstance(argv, list) else (str(argv),),
                       str(row["status"]), _opt_int(row["exit_code"]), _opt_int(row["signal"]),
                       bool(row["timed_out"]), str(row["started_at"]),
                       None if row["ended_at"] is None else str(row["ended_at"]), str(row["node"]),
                       _meta(row["meta"]))


class SqlSandboxes:
    """The `live_sandboxes` table (core.ports.SandboxTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, sandbox: LiveSandbox) -> bool:
        values = {**sandbox._asdict(), "meta": json.dumps(dict(sandbox.meta), sort_keys=True, default=str)}
        # ON CONFLICT, not a caught error: on PostgreSQL a failed statement aborts the transaction.
        made = self._sql.execute(
            f"INSERT INTO live_sandboxes ({', '.join(_SANDBOX_COLUMNS)}) "
            f"VALUES ({', '.join(':' + c for c in _SANDBOX_COLUMNS)}) ON CONFLICT DO NOTHING RETURNING id", values)
        return bool(made)

    def get(self, sandbox_id: str) -> LiveSandbox | None:
        rows = self._sql.execute("SELECT * FROM live_sandboxes WHERE id = :id", {"id": sandbox_id})
        return _sandbox(rows[0]) if rows else None

    def find(self, node: str, workspace: str, principal: str, network: str) -> LiveSandbox | None:
        rows = self._sql.execute(
            "SELECT * FROM live_sandboxes WHERE node = :node AND workspace = :w AND principal = :p AND network = :n",
            {"node": node, "w": workspace, "p": principal, "n": network})
        return _sandbox(rows[0]) if rows else None

    def of_workspace(self, workspace: str) -> list[LiveSandbox]:
        return [_sandbox(r) for r in self._sql.execute(
            "SELECT * FROM live_sandboxes WHERE workspace = :w ORDER BY started_at, id", {"w": workspace})]

    def of_node(self, node: str) -> list[LiveSandbox]:
        return [_sandbox(r) for r in self._sql.execute(
            "SELECT * FROM live_sandboxes WHERE node = :node ORDER BY started_at, id", {"node": node})]

    def touch(self, sandbox_id: str, at: str) -> bool:
        return bool(self._sql.execute("UPDATE live_sandboxes SET last_used = :at WHERE id = :id RETURNING id",
                                      {"id": sandbox_id, "at": at}))

    def delete(self, sandbox_id: str, *, used_last: str | None = None) -> bool:
        if used_last is None:
            return bool(self._sql.execute("DELETE FROM live_sandboxes WHERE id = :id RETURNING id",
                                          {"id": sandbox_id}))
        return bool(self._sql.execute("DELETE FROM live_sandboxes WHERE id = :id AND last_used = :used RETURNING id",
                                      {"id": sandbox_id, "used": used_last}))


class SqlProcesses:
    """The `live_processes` table (core.ports.ProcessTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, process: LiveProcess) -> None:
        values = {**process._asdict(), "argv": json.dumps(list(process.argv))[:4000],
                  "principal": process.principal[:200], "timed_out": int(process.timed_out),
                  "meta": json.dumps(dict(process.meta), sort_keys=True, default=str)}
        self._sql.execute(f"INSERT INTO live_processes ({', '.join(_PROCESS_COLUMNS)}) "
                          f"VALUES ({', '.join(':' + c for c in _PROCESS_COLUMNS)})", values)

    def get(self, process_id: str) -> LiveProcess | None:
        rows = self._sql.execute("SELECT * FROM live_processes WHERE id = :id", {"id": process_id})
        return _process(rows[0]) if rows else None

    def of_workspace(self, workspace: str, *, principal: str | None = None) -> list[LiveProcess]:
        if principal is None:
            rows = self._sql.execute("SELECT * FROM live_processes WHERE workspace = :w ORDER BY started_at, id",
                                     {"w": workspace})
        else:
            rows = self._sql.execute("SELECT * FROM live_processes WHERE workspace = :w AND principal = :p "
                                     "ORDER BY started_at, id", {"w": workspace, "p": principal})
        return [_process(r) for r in rows]

    def of_sandbox(self, sandbox_id: str) -> list[LiveProcess]:
        return [_process(r) for r in self._sql.execute(
            "SELECT * FROM live_processes WHERE sandbox_id = :s ORDER BY started_at, id", {"s": sandbox_id})]

    def count_running(self, *, bot: str | None = None) -> int:
        if self._sql.dialect == "postgresql":
            self._sql.execute("SELECT pg_advisory_xact_lock(:lock)", {"lock": _SLOTS_LOCK})
        if bot is None:
            rows = self._sql.execute(f"SELECT COUNT(*) AS n FROM live_processes WHERE status IN {_RUNNING} "
                                     "AND bot <> ''")
        else:
            rows = self._sql.execute(f"SELECT COUNT(*) AS n FROM live_processes WHERE status IN {_RUNNING} "
                                     "AND bot = :bot", {"bot": bot})
        return int(rows[0]["n"])

    def update(self, process_id: str, changes: Mapping[str, object]) -> bool:
        allowed = {"status", "meta", "sandbox_id"}
        values = {k: v for k, v in changes.items() if k in allowed}
        if "meta" in values:
            values["meta"] = json.dumps(dict(values["meta"]), sort_keys=True, default=str)  # type: ignore[call-overload]
        if not values:
            return False
        sets = ", ".join(f"{k} = :{k}" for k in sorted(values))
        return bool(self._sql.execute(f"UPDATE live_processes SET {sets} WHERE id = :id AND status IN {_RUNNING} "
                                      "RETURNING id", {**values, "id": process_id}))

    def finish(self, process_id: str, *, status: str, exit_code: int | None, signal: int | None, timed_out: bool,
               ended_at: str) -> bool:
        done = self._sql.execute(
            "UPDATE live_processes SET status = :status, exit_code = :code, signal = :sig, timed_out = :t, "
            f"ended_at = :at WHERE id = :id AND status IN {_RUNNING} RETURNING id",
            {"id": process_id, "status": status, "code": exit_code, "sig": signal, "t": int(timed_out),
             "at": ended_at})
        return bool(done)

    def delete(self, process_id: str) -> None:
        self._sql.execute("DELETE FROM live_processes WHERE id = :id", {"id": process_id})
