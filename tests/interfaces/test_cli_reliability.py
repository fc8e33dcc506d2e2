"""Errors by cause at the CLI: a locked registry is `locked` (exit 5; `warden run` refuses with
126 and runs nothing), oversized limits are `invalid` in one line (README, INTERFACES.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.support.hangup import hang_up

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.shared_home]

# Holds warden.db the way a backup tool or an open `sqlite3` shell can: an exclusive lock that
# in WAL mode stops readers too (locking_mode=EXCLUSIVE), until stdin closes.
_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("UPDATE audit_events SET seq = seq WHERE seq = 1")
print("held", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@pytest.fixture
def ws(cli: Cli) -> Path:
    if cli("info", "rl").code != 0:
        assert cli("create", "rl").code == 0
    return Path(cli("info", "rl", "--json").json["data"]["path"])


@pytest.fixture
def held(home: Path, ws: Path) -> Iterator[None]:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(home / "warden.db")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


def test_a_locked_registry_refuses_run_with_126_and_runs_nothing(cli: Cli, ws: Path, held: None) -> None:
    marker = ws / "ran-while-locked"
    start = time.monotonic()
    result = cli("run", "rl", "--json", "--", "touch", "ran-while-locked", env={"WARDEN_DB_BUSY_TIMEOUT": "1"})
    assert result.code == 126, result.stdout + result.stderr
    assert result.json["error"]["code"] == "locked"
    assert not marker.exists()
    text = cli("run", "rl", "--", "touch", "ran-while-locked", env={"WARDEN_DB_BUSY_TIMEOUT": "1"})
    assert text.code == 126 and text.stderr.count("\n") == 1 and "locked" in text.stderr
    assert not marker.exists()
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("args", [["list"], ["info", "rl"], ["audit"], ["audit", "verify"]])
def test_a_locked_registry_is_code_locked_exit_5(cli: Cli, held: None, args: list[str]) -> None:
    result = cli(*args, "--json", env={"WARDEN_DB_BUSY_TIMEOUT": "1"})
    assert result.code == 5, result.stdout + result.stderr
    assert result.json["error"]["code"] == "locked"
    text = cli(*args, env={"WARDEN_DB_BUSY_TIMEOUT": "1"})
    assert text.code == 5 and text.stderr.count("\n") == 1 and "Traceback" not in text.stderr


@pytest.mark.parametrize(("args", "names"), [
    (["run", "rl", "--cpu", "1e20", "--", "true"], "--cpu"),
    (["run", "rl", "--cpu", str(10**20), "--", "true"], "CPU limit"),
    (["run", "rl", "--pids", str(10**20), "--", "true"], "process limit"),
    (["run", "rl", "--memory", "99999999999G", "--", "true"], "memory limit"),
    (["audit", "--limit", "1e20"], "--limit"),
    (["audit", "--limit", str(10**20)], "--limit"),
])
def test_huge_limits_are_invalid_in_one_line(cli: Cli, ws: Path, args: list[str], names: str) -> None:
    result = cli(*args)
    assert result.code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and names in result.stderr
    assert "doctor" not in result.stderr and "internal" not in result.stderr
    assert cli(args[0], "--json", *args[1:]).json["error"]["code"] == "invalid"


@pytest.mark.skipif(os.geteuid() != 0, reason="shutting a supervisor's sockets from the host takes root")
def test_a_run_sent_as_its_live_sandbox_ends_runs_in_a_fresh_sandbox(cli: Cli, ws: Path, home: Path) -> None:
    """An idle stop ends a supervisor while a command is sent to it (a connect after its last
    look, or a request on a kept connection): refused or hung up on before any answer, the
    command never ran there. It was a failure ('the live sandbox does not answer (Connection
    refused)', 126, found with 10 threads of HTTP execs and workspace.sandbox_idle 1s) that
    also stopped the sandbox as broken; now that sandbox is stopped and a fresh one runs it."""
    assert cli("run", "rl", "--detach", "--", "true").code == 0  # the person's live sandbox
    assert cli("run", "rl", "--", "echo", "in-live").stdout == "in-live\n"
    rows = _live_rows(home)
    assert len(rows) == 1, rows
    sandbox_id, supervisor = rows[0]
    assert hang_up(supervisor) >= 1
    try:
        result = cli("run", "rl", "--", "sh", "-c", "echo ran-$((6 * 7))")
        assert (result.code, result.stdout) == (0, "ran-42\n"), result.stderr
        assert all(row[0] != sandbox_id for row in _live_rows(home))
        stops = [e for e in cli("audit", "--json", "--workspace", "rl").json["data"]
                 if e["action"] == "sandbox.stop" and e["detail"]["sandbox"] == sandbox_id]
        assert [e["detail"]["reason"] for e in stops] == ["its supervisor hung up before the command started"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGKILL)


def _live_rows(home: Path) -> list[tuple[str, int]]:
    with contextlib.closing(sqlite3.connect(home / "warden.db")) as db:
        return [(str(r[0]), int(r[1])) for r in db.execute("SELECT id, supervisor_pid FROM live_sandboxes "
                                                           "WHERE principal = 'user'")]


@pytest.mark.skipif(os.geteuid() != 0, reason="shutting a supervisor's sockets from the host takes root")
def test_a_detached_start_sent_as_its_live_sandbox_ends_starts_in_a_new_one(cli: Cli, ws: Path, home: Path) -> None:
    """As a foreground run's: a background start refused or hung up on before any answer (an
    idle stop meeting it) failed 'the live sandbox does not answer'; it goes to a new sandbox."""
    assert cli("run", "rl", "--detach", "--", "true").code == 0
    rows = _live_rows(home)
    assert len(rows) == 1, rows
    sandbox_id, supervisor = rows[0]
    assert hang_up(supervisor) >= 1
    try:
        started = cli("run", "rl", "--detach", "--json", "--", "sh", "-c", "echo ran-$((6 * 7)) > detached.txt")
        assert started.code == 0, started.stderr
        waited = cli("wait", "rl", started.json["data"]["id"], "--json")
        assert waited.code == 0, waited.stdout + waited.stderr
        assert (ws / "detached.txt").read_text() == "ran-42\n"
        assert [row for row in _live_rows(home) if row[0] == sandbox_id] == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGKILL)
