"""What a run used (issue #15: runs report memory and CPU), measured on real sandboxes: a run that
burns CPU and touches 200 MiB says so, one that does nothing says far less; in a fresh sandbox
(its cgroup, where Warden has one) and in the live sandbox a detached process keeps up (the
supervisor's wait4, and the per-command cgroup where there is one); through the audit's `run`
event, `warden run --usage` and the HTTP exec answer (`warden run --json`'s data keeps its six
fields: INTERFACES.md)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.adapters.sandbox import cgroups

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# ~200 MiB written page by page, then a loop that keeps a CPU busy for a good part of a second.
HEAVY = ("x = bytearray(200 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
         "s = 0\nfor i in range(4_000_000): s += i\n")
MIB = 1 << 20


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("usage")
    environ = {**warden_environ(tmp / "home"), "WARDEN_SANDBOX_MEMORY": "1G"}
    cli_out(environ, "init")
    cli_out(environ, "create", "use", "--template", "minimal")
    cli_out(environ, "bot", "register", "meter")
    token = cli_out(environ, "grant", "use", "meter", "--permissions", "execute")
    return {"environ": environ, "tmp": tmp, "token": token}


def _run_json(environ: dict[str, str], *command: str) -> dict[str, Any]:
    """The run's `--json` data with `usage` as its audit event recorded it (absent: not measured)."""
    data = dict(json.loads(cli_out(environ, "run", "use", "--json", "--", *command))["data"])
    assert set(data) == {"exit_code", "stdout", "stderr", "duration_s", "timed_out", "signal"}
    event = json.loads(cli_out(environ, "audit", "--workspace", "use", "--limit", "5", "--json"))["data"]
    ran = [e for e in event if e["action"] == "run"][-1]  # oldest first: the newest is last
    assert ran["detail"]["argv"] == list(command)
    if "usage" in ran["detail"]:
        data["usage"] = ran["detail"]["usage"]
    return data


def _check(heavy: dict[str, Any], light: dict[str, Any], *, cpu: bool) -> None:
    assert heavy["exit_code"] == 0 and light["exit_code"] == 0
    used, idle = heavy["usage"], light["usage"]
    if cpu:
        assert used["cpu_s"] >= 0.15 and idle["cpu_s"] < used["cpu_s"] / 2, (used, idle)
    assert used["memory_peak_bytes"] >= 150 * MIB, used
    assert idle["memory_peak_bytes"] < 60 * MIB, idle
    assert used["memory_measured"] in ("cgroup", "process")


def test_a_fresh_sandbox_reports_what_its_cgroup_measured(home: dict[str, Any]) -> None:
    support = cgroups.detect()
    heavy = _run_json(home["environ"], "python3", "-c", HEAVY)
    light = _run_json(home["environ"], "true")
    if support.memory is None:  # a normal user here: bwrap does not wait for its pid 1, so no rusage tells
        assert "usage" not in heavy
        return
    _check(heavy, light, cpu=support.memory[0] == "v2")
    assert heavy["usage"]["memory_measured"] == "cgroup"


def test_the_live_sandbox_reports_cpu_and_memory_and_the_audit_and_usage_line_say_it(home: dict[str, Any]) -> None:
    environ = home["environ"]
    server = cli_out(environ, "run", "use", "--detach", "--", "sleep", "300")
    try:
        heavy = _run_json(environ, "python3", "-c", HEAVY)
        light = _run_json(environ, "true")
        _check(heavy, light, cpu=True)
        import subprocess
        import sys

        said = subprocess.run([sys.executable, "-m", "warden", "run", "use", "--usage", "--", "python3", "-c", HEAVY],
                              env=environ, capture_output=True, text=True, timeout=120, check=True)
        line = said.stderr.strip().splitlines()[-1]
        assert line.startswith("warden: used ") and " s of CPU and " in line and "MiB of memory at its peak" in line
    finally:
        cli_out(environ, "kill", "use", server, "--signal", "KILL")


def test_an_http_exec_answer_carries_usage(home: dict[str, Any]) -> None:
    bearer = {"Authorization": f"Bearer {home['token']}"}
    with ServeProcess(home["environ"], home["tmp"]) as served, \
            httpx.Client(base_url=served.url, headers=bearer, timeout=120) as client:
        heavy = client.post("/v1/workspaces/use/exec", json={"cmd": ["python3", "-c", HEAVY]}).json()
        light = client.post("/v1/workspaces/use/exec", json={"cmd": ["true"]}).json()
    _check(heavy, light, cpu=True)  # a bot's execs run in its live sandbox: the supervisor's wait4
