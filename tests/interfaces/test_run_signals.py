"""A command starts with every signal at its default and none blocked, whatever the process that
ran `warden` ignored or blocked: a shell starts a background job (`warden serve &`, a script's
`warden run … &`) with SIGINT and SIGQUIT ignored, nohup ignores SIGHUP, and an ignored signal
stays ignored across exec. Before, such a command could not be interrupted (Ctrl-C in `warden
shell`, `kill -INT` of a dev server), in a fresh sandbox and in a live one alike."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import at_a_terminal, isolated_environ
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

SHOW = ("grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status")
CLEAN = "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"


def _as_a_background_job() -> None:
    """In the child before exec: what a shell's background job under nohup inherits, and a
    blocked signal besides."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def _warden(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden", *args], env=environ, capture_output=True, text=True,
                          timeout=120, check=False, preexec_fn=_as_a_background_job)


@pytest.fixture(scope="module")
def environ(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("signals") / "warden-home"
    home.mkdir()
    environ = isolated_environ(home)
    made = _warden(environ, "create", "sig", "--template", "minimal")
    assert made.returncode == 0, made.stderr
    yield environ
    _warden(environ, "destroy", "sig", "--yes", "--no-archive")


def test_the_launcher_s_ignored_and_blocked_signals_are_not_the_commands(environ: dict[str, str]) -> None:
    # The set-up holds: a program started so on the host ignores and blocks them.
    assert CLEAN not in subprocess.run(SHOW, capture_output=True, text=True, check=True,
                                       preexec_fn=_as_a_background_job).stdout
    ran = _warden(environ, "run", "sig", "--", *SHOW)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == CLEAN


def test_a_live_sandbox_started_by_such_a_process_gives_its_commands_the_defaults(environ: dict[str, str]) -> None:
    # The detached command starts the person's live sandbox: its supervisor inherits what the
    # CLI ignored; the command and the next foreground one (run in that sandbox) must not.
    started = _warden(environ, "run", "sig", "--detach", "--json", "--", "sh", "-c", shlex.join(SHOW) + "; sleep 60")
    assert started.returncode == 0, started.stderr
    process_id = json.loads(started.stdout)["data"]["id"]
    try:
        logs = wait_until(lambda: (out := _warden(environ, "logs", "sig", process_id)).returncode == 0
                          and "SigIgn" in out.stdout and out.stdout, message="the detached command's output")
        assert logs == CLEAN
        # In the same sandbox: the detached command's sleep is one of its processes.
        ran = _warden(environ, "run", "sig", "--", "sh", "-c", shlex.join(SHOW) + "; grep -l 'sleep' /proc/[0-9]*/comm")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.startswith(CLEAN) and "/comm" in ran.stdout, ran.stdout
    finally:
        _warden(environ, "kill", "sig", process_id)


def _asleep(pid: int) -> bool:
    """Whether `pid` sleeps in clock_nanosleep (230 on x86-64): SQLite's busy handler between its
    looks at a lock another connection holds."""
    try:
        with open(f"/proc/{pid}/syscall") as handle:
            return handle.read().split()[0] == "230"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/syscall").exists() or not sys.platform.startswith("linux")
                    or __import__("platform").machine() != "x86_64", reason="reads x86-64 syscall numbers")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_run_stopped_as_its_lease_is_taken_has_its_outcome_audited(environ: dict[str, str],
                                                                      sig: signal.Signals) -> None:
    # The stop comes while the run's intent is being written (the registry's write lock is held
    # here, so the take waits for it): held back until the take is whole, then raised. Before, the
    # lease was given back with the intent's row removed and no outcome: a `run.start` the audit
    # never closed (neither its `run` nor a `run.lost`), 1 run in about 150 of a fuzz of signals.
    registry = sqlite3.connect(Path(environ["WARDEN_HOME"]) / "warden.db", isolation_level=None, timeout=30)
    registry.execute("BEGIN IMMEDIATE")
    try:
        run = subprocess.Popen([sys.executable, "-m", "warden", "run", "sig", "--", "echo", "ran"], env=environ,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=at_a_terminal)
        wait_until(lambda: _asleep(run.pid), timeout=30, message="the run never waited for the registry")
        run.send_signal(sig)  # its handler runs once SQLite gives the lock to it, the take under way
    finally:
        registry.execute("COMMIT")
        registry.close()
    out, err = run.communicate(timeout=60)
    assert "Traceback" not in err
    assert out == ""  # the command never started
    assert run.returncode in (130, -sig)
    listed = _warden(environ, "audit", "--workspace", "sig", "--limit", "2", "--json")
    started, ended = json.loads(listed.stdout)["data"]
    assert (started["action"], ended["action"]) == ("run.start", "run")
    assert ended["detail"]["run_id"] == started["detail"]["run_id"]
    assert ended["result"] == "interrupted"
    assert ended["detail"]["interrupted_by"] == sig.name


@pytest.mark.skipif(not Path("/proc/self/syscall").exists() or not sys.platform.startswith("linux")
                    or __import__("platform").machine() != "x86_64", reason="reads x86-64 syscall numbers")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_run_stopped_while_another_holds_the_registry_ends_at_once(environ: dict[str, str],
                                                                     sig: signal.Signals) -> None:
    # Another process holds the registry's write lock and does not let go (a `warden` suspended
    # by Ctrl-Z as it wrote, a long backup). The person's Ctrl-C waited for it, up to SQLite's
    # busy timeout (30 s): SQLite sleeps in C, and the take of the run's lease held the stop back.
    # Nothing is written until the take: the run ends at once, as if stopped a moment before it.
    import time

    registry = sqlite3.connect(Path(environ["WARDEN_HOME"]) / "warden.db", isolation_level=None, timeout=30)
    registry.execute("BEGIN IMMEDIATE")
    try:
        run = subprocess.Popen([sys.executable, "-m", "warden", "run", "sig", "--", "echo", "never"], env=environ,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=at_a_terminal)
        wait_until(lambda: _asleep(run.pid), timeout=30, message="the run never waited for the registry")
        stopped = time.monotonic()
        run.send_signal(sig)
        try:
            out, err = run.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            run.kill()
            run.communicate()
            pytest.fail("the stop waited for the registry's lock")
        took = time.monotonic() - stopped
    finally:
        registry.execute("COMMIT")
        registry.close()
    assert took < 2.0, took
    assert "Traceback" not in err and out == ""
    assert run.returncode in (130, -sig)
    # Nothing left half-written: no intent of it to close, the chain whole, the next run at once.
    events = json.loads(_warden(environ, "audit", "--workspace", "sig", "--json").stdout)["data"]
    assert not [e for e in events if e["detail"].get("argv") == ["echo", "never"]], events[-2:]
    assert _warden(environ, "audit", "verify").returncode == 0
    assert _warden(environ, "run", "sig", "--", "true").returncode == 0
