"""The SandboxBackend port (core/ports/sandbox.py) and its one runnable backend, bubblewrap, with
real bwrap: the bootstrap wires the backend `sandbox.backend` names; its runner runs a command in
a workspace within the run's limits and without network; its live sandboxes start, run commands
and stop. `kubernetes` is known to the settings but refused (docs/kubernetes.md)."""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime
from pathlib import Path

import pytest

from warden.adapters.sandbox.bubblewrap import BubblewrapBackend, BubblewrapSandbox
from warden.adapters.sandbox.live import HostLiveSandboxes
from warden.bootstrap import App, Home
from warden.core.errors import InvalidInput, Unavailable
from warden.core.limits import Limits
from warden.core.live import LiveSandbox
from warden.core.ports import SandboxBackend
from warden.core.runs import SandboxRequest
from warden.core.settings import resolve


def _app(home: Path, environ: dict[str, str]) -> App:
    return App(Home(home), resolve({}, environ), environ, lambda: datetime.now(UTC))


def test_the_bootstrap_wires_bubblewrap_by_default(tmp_path: Path) -> None:
    app = _app(tmp_path / "home", {"LANG": "C.UTF-8"})
    backend: SandboxBackend = app.sandbox_backend
    assert backend.name == "bubblewrap" and isinstance(backend, BubblewrapBackend)
    assert app.settings.source("sandbox.backend") == "default"
    assert isinstance(backend.runner(), BubblewrapSandbox)
    assert isinstance(backend.live(), HostLiveSandboxes)


def test_kubernetes_is_refused_in_one_line_that_points_at_the_design(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        resolve({}, {"WARDEN_SANDBOX_BACKEND": "kubernetes"})
    assert "not yet runnable; see docs/kubernetes.md" in refused.value.message
    assert "\n" not in refused.value.message
    # A value that got past the settings some other way is refused where the backend is wired.
    app = _app(tmp_path / "home", {})
    app.settings = dataclasses.replace(app.settings, values={**app.settings.values, "sandbox.backend": "kubernetes"})
    with pytest.raises(Unavailable, match=r"not yet runnable; see docs/kubernetes\.md"):
        _ = app.sandbox_backend


def test_its_runner_runs_in_the_workspace_without_network_within_limits(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    backend = BubblewrapBackend({"LANG": "C.UTF-8"}, tmp_path / "run")
    script = ("echo made > out.txt; ulimit -t; "
              "python3 -c 'import socket; print(*sorted(n for _, n in socket.if_nameindex()))'")
    request = SandboxRequest(str(workspace), ("sh", "-c", script), Limits(cpu_seconds=9, timeout_s=30))
    result = backend.runner().run(request)
    assert result.exit_code == 0, result.stderr
    assert (workspace / "out.txt").read_text() == "made\n"
    assert result.stdout.splitlines() == ["9", "lo"]  # a network namespace of its own: loopback only


def test_its_live_sandboxes_start_run_and_stop(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    live = BubblewrapBackend({"LANG": "C.UTF-8"}, tmp_path / "run").live()
    sandbox_id = f"sbx_{secrets.token_hex(8)}"
    started = live.start(sandbox_id, SandboxRequest(str(folder), ("true",), Limits(timeout_s=60)), idle_s=60)
    row = LiveSandbox(sandbox_id, "w", "ws_w", "user", "none", "fp", 0, "node", started.pid, started.pid_start,
                      started.supervisor_pid, started.supervisor_start, started.socket, "t", "t", started.meta)
    try:
        assert live.alive(row)
        ran = live.run(row, "a" * 16, SandboxRequest(str(folder), ("sh", "-c", "echo $((6 * 7))"),
                                                     Limits(timeout_s=30)))
        assert (ran.exit_code, ran.stdout) == (0, "42\n")
    finally:
        live.stop(row)
    assert not live.alive(row)
