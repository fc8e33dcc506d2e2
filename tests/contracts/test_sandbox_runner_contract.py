"""The SandboxRunner port (core/ports/sandbox.py) held to the same checks in its fake
(tests/support/fakes.FakeSandboxRunner) and in real bubblewrap (adapters/sandbox/bubblewrap.py).

The fake does not run the command: a test first tells it what the command would do (`expect`,
a no-op for bwrap, which finds out by running it). What the runner itself adds is held to the
same checks: output as text and to the sinks, uncaptured output, the capture cap, the end of
stderr kept, the stop function given at start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes import FakeSandboxRunner
from warden.adapters.sandbox.bubblewrap import BubblewrapSandbox
from warden.adapters.sandbox.host import bwrap_path
from warden.core.limits import Limits
from warden.core.runs import RunResult, SandboxRequest


class Host(BubblewrapSandbox):
    def expect(self, result: RunResult) -> None:
        """Nothing to say: bwrap runs the command."""


class Fake(FakeSandboxRunner):
    def expect(self, result: RunResult) -> None:
        self.result = result


@pytest.fixture(params=["fake", "host"])
def runner(request: pytest.FixtureRequest) -> Host | Fake:
    if request.param == "fake":
        return Fake()
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    return Host(dict(os.environ))


@pytest.fixture
def workspace(tmp_path: Path) -> str:
    ws = tmp_path / "ws"
    ws.mkdir()
    return str(ws)


def _request(workspace: str, argv: list[str], *, timeout: float = 30, **kw: Any) -> SandboxRequest:
    return SandboxRequest(workspace, tuple(argv), Limits(timeout_s=timeout), **kw)


@pytest.mark.parametrize(("argv", "code"), [(["true"], 0), (["sh", "-c", "exit 3"], 3)])
def test_the_exit_status_passes_through(runner: Host | Fake, workspace: str, argv: list[str], code: int) -> None:
    runner.expect(RunResult(code, "", "", 0.01))
    result = runner.run(_request(workspace, argv))
    assert (result.exit_code, result.timed_out, result.signal) == (code, False, None)


def test_output_is_text_and_reaches_the_sinks_as_it_comes(runner: Host | Fake, workspace: str) -> None:
    runner.expect(RunResult(0, "out ü\n", "err\n", 0.01))
    out: list[bytes] = []
    err: list[bytes] = []
    result = runner.run(_request(workspace, ["sh", "-c", "printf 'out \\303\\274\\n'; echo err >&2"],
                                 on_stdout=out.append, on_stderr=err.append))
    assert (result.stdout, result.stderr) == ("out ü\n", "err\n")
    assert (b"".join(out), b"".join(err)) == ("out ü\n".encode(), b"err\n")
    assert result.stderr_tail == "err\n" and not result.truncated


def test_uncaptured_output_goes_only_to_the_sinks_and_the_end_of_stderr_is_kept(
        runner: Host | Fake, workspace: str) -> None:
    runner.expect(RunResult(1, "out\n", "bwrap: execvp nope: No such file or directory\n", 0.01))
    out: list[bytes] = []
    result = runner.run(_request(workspace, ["sh", "-c", "echo out; echo 'bwrap: execvp nope: No such file "
                                             "or directory' >&2; exit 1"], on_stdout=out.append, capture=False))
    assert (result.stdout, result.stderr) == ("", "")
    assert b"".join(out) == b"out\n"
    # What failed, in its own words, is what explain_failure reads: kept whether captured or not.
    assert result.stderr_tail.endswith("No such file or directory\n")


def test_captured_output_is_cut_at_the_cap(runner: Host | Fake, workspace: str) -> None:
    runner.expect(RunResult(0, "x" * 5000, "", 0.01))
    result = runner.run(_request(workspace, ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x"], max_capture=100))
    assert result.stdout == "x" * 100 and result.truncated


def test_a_missing_program_is_127_and_says_which(runner: Host | Fake, workspace: str) -> None:
    runner.expect(RunResult(127, "", "bwrap: execvp no-such-program: No such file or directory\n", 0.01))
    result = runner.run(_request(workspace, ["no-such-program"]))
    assert result.exit_code == 127 and "no-such-program" in result.stderr_tail


def test_a_run_past_its_time_ends_timed_out(runner: Host | Fake, workspace: str) -> None:
    runner.expect(RunResult(124, "", "", 0.3, timed_out=True))
    result = runner.run(_request(workspace, ["sleep", "30"], timeout=0.3))
    assert result.timed_out and result.exit_code == 124


def test_the_stop_given_at_start_kills_the_run(runner: Host | Fake, workspace: str) -> None:
    """The disk quota's watch holds this stop function; calling it ends the whole run, killed."""
    runner.expect(RunResult(0, "", "", 0.01))
    stops: list[Callable[[], None]] = []

    def started(stop: Callable[[], None]) -> None:
        stops.append(stop)
        stop()

    result = runner.run(_request(workspace, ["sleep", "30"], on_started=started))
    assert len(stops) == 1
    assert (result.exit_code, result.signal, result.timed_out) == (137, 9, False)


def test_on_a_terminal_the_output_reaches_the_terminal_alone(runner: Host | Fake, workspace: str) -> None:
    """`warden shell` and the PTY WebSocket: the caller reads the terminal's master."""
    runner.expect(RunResult(0, "out\n", "err\n", 0.01))
    master, slave = os.openpty()
    sinks: list[bytes] = []
    try:
        result = runner.run(_request(workspace, ["sh", "-c", "echo out; echo err >&2"], terminal=slave,
                                     on_stdout=sinks.append, on_stderr=sinks.append))
        os.close(slave)
        seen = b""
        with contextlib.suppress(OSError):  # EIO once the terminal's last writer is gone
            while chunk := os.read(master, 4096):
                seen += chunk
    finally:
        os.close(master)
    assert result.exit_code == 0 and (result.stdout, result.stderr) == ("", "") and sinks == []
    assert seen.replace(b"\r\n", b"\n") == b"out\nerr\n"
