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
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import isolated_environ
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
