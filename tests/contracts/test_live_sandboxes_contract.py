"""The LiveSandboxes port (core/ports/live.py) held to the same checks in its fake
(tests/support/fakes.FakeLiveSandboxes) and on this host (adapters/sandbox/live.HostLiveSandboxes,
real bubblewrap): what the service relies on — a sandbox lives until stopped, background
processes are listed, end with their status, keep their output, and are forgotten on request."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import FakeLiveSandboxes
from warden.adapters.sandbox.live import HostLiveSandboxes
from warden.core.errors import Unavailable
from warden.core.limits import Limits
from warden.core.live import Exited, LiveProcess, LiveSandbox, Logs
from warden.core.ports import LiveSandboxes
from warden.core.runs import SandboxRequest

# Its own per test process: a live sandbox's cgroup is named after its id, machine-wide.
SBX = f"sbx_{secrets.token_hex(8)}"


@pytest.fixture(params=["fake", "host"])
def sandboxes(request: pytest.FixtureRequest, tmp_path: Path) -> LiveSandboxes:
    if request.param == "fake":
        return FakeLiveSandboxes()
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    return HostLiveSandboxes(tmp_path / "run", {})


@pytest.fixture
def folder(tmp_path: Path) -> str:
    (tmp_path / "ws").mkdir()
    return str(tmp_path / "ws")


@pytest.fixture
def sandbox(sandboxes: LiveSandboxes, folder: str) -> Iterator[LiveSandbox]:
    started = sandboxes.start(SBX, SandboxRequest(folder, ("true",), Limits(timeout_s=60)), idle_s=60)
    row = LiveSandbox(SBX, "w", "ws_w", "user", "none", "fp", 0, "node", started.pid, started.pid_start,
                      started.supervisor_pid, started.supervisor_start, started.socket, "t", "t", started.meta)
    yield row
    sandboxes.stop(row)


def _req(folder: str, *argv: str) -> SandboxRequest:
    return SandboxRequest(folder, argv, Limits(timeout_s=60))


def test_processes_are_listed_end_with_their_status_and_keep_their_output(sandboxes: LiveSandboxes,
                                                                         sandbox: LiveSandbox, folder: str) -> None:
    assert sandboxes.alive(sandbox) and sandboxes.listing(sandbox) == []
    meta = sandboxes.spawn(sandbox, "a" * 16, _req(folder, "sh", "-c", "echo hi; exit 3"))
    assert isinstance(meta["host_pid"], int)
    ended = sandboxes.wait(sandbox, "a" * 16, 30)
    assert (ended.id, ended.status, ended.exited) == ("a" * 16, "exited", Exited(3, None))
    logs, exited = sandboxes.logs(sandbox, "a" * 16)
    assert (logs.stdout, exited) == (b"hi\n", Exited(3, None))
    sleeper_meta = sandboxes.spawn(sandbox, "b" * 16, _req(folder, "sleep", "300"))
    listed = {p.id: p.status for p in sandboxes.listing(sandbox)}
    assert listed == {"a" * 16: "exited", "b" * 16: "running"}
    sleeper = LiveProcess("b" * 16, SBX, "w", "user", "", ("sleep", "300"), "running", None, None, False, "t", None,
                          "node", sleeper_meta)
    sandboxes.signal(sandbox, sleeper, 15)
    assert sandboxes.wait(sandbox, "b" * 16, 30).exited == Exited(143, 15)
    assert sandboxes.release(sleeper) is False
    sandboxes.forget(sandbox, "a" * 16)
    assert [p.id for p in sandboxes.listing(sandbox)] == ["b" * 16]


def test_a_foreground_command_runs_to_its_end(sandboxes: LiveSandboxes, sandbox: LiveSandbox, folder: str) -> None:
    result = sandboxes.run(sandbox, "c" * 16, _req(folder, "sh", "-c", "echo hi; exit 3"))
    assert (result.exit_code, result.stdout, result.seccomp) == (3, "hi\n", True)
    assert sandboxes.listing(sandbox) == []  # a foreground command is not kept


def test_kept_output_outlives_the_sandbox(sandboxes: LiveSandboxes, sandbox: LiveSandbox) -> None:
    sandboxes.keep_logs("d" * 16, Logs(b"out", b"err"))
    sandboxes.stop(sandbox)
    assert not sandboxes.alive(sandbox)
    with pytest.raises(Unavailable):
        sandboxes.listing(sandbox)
    assert sandboxes.kept_logs("d" * 16) == Logs(b"out", b"err")
    sandboxes.drop_logs("d" * 16)
    assert sandboxes.kept_logs("d" * 16) is None
    # What the rings had dropped is kept with it.
    sandboxes.keep_logs("e" * 16, Logs(b"out", b"", 5, 7))
    assert sandboxes.kept_logs("e" * 16) == Logs(b"out", b"", 5, 7)
    sandboxes.drop_logs("e" * 16)
    assert sandboxes.kept_logs("e" * 16) is None
