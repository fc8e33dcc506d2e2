"""What a run used (issue #15: runs report memory and CPU), measured on real sandboxes: a run that
burns CPU and touches 200 MiB says so, one that does nothing says far less; in a fresh sandbox
(its cgroup where Warden has one, else the sandbox's pid 1 reaped by `warden run` with wait4) and
in the live sandbox a detached process keeps up (the supervisor's wait4, and the per-command
cgroup where there is one); through `warden run --usage` (a line on stderr, and `data.usage` with
--json), the audit's `run` event, the HTTP exec answer and MCP's exec (a stream's exit line keeps its listed fields).
Without --usage, `warden run --json`'s data keeps its six fields."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from typing import Any

import httpx
import pytest

from tests.support.mcp import http_session
from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.adapters.sandbox import cgroups
from warden.client import Client

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# ~200 MiB written page by page, then a loop that keeps a CPU busy for a good part of a second.
HEAVY = ("x = bytearray(200 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
         "s = 0\nfor i in range(4_000_000): s += i\n")
MIB = 1 << 20
FIELDS = {"cpu_s", "memory_peak_bytes", "memory_measured", "measured_by"}


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
    """`warden run --usage --json`'s data, checked against the audit's `run` event of it."""
    data = dict(json.loads(cli_out(environ, "run", "use", "--usage", "--json", "--", *command))["data"])
    assert set(data) == {"exit_code", "stdout", "stderr", "duration_s", "timed_out", "signal", "usage"}
    event = json.loads(cli_out(environ, "audit", "--workspace", "use", "--limit", "5", "--json"))["data"]
    ran = [e for e in event if e["action"] == "run"][-1]  # oldest first: the newest is last
    assert ran["detail"]["argv"] == list(command)
    assert ran["detail"]["usage"] == data["usage"]
    return data


def _check(heavy: dict[str, Any], light: dict[str, Any]) -> None:
    assert heavy["exit_code"] == 0 and light["exit_code"] == 0
    used, idle = heavy["usage"], light["usage"]
    assert set(used) == FIELDS and set(idle) == FIELDS
    assert used["cpu_s"] >= 0.2 and idle["cpu_s"] < used["cpu_s"] / 2, (used, idle)
    assert used["memory_peak_bytes"] >= 150 * MIB, used
    assert idle["memory_peak_bytes"] < 60 * MIB, idle
    assert used["memory_measured"] in ("cgroup", "process")
    assert used["measured_by"] == ("cgroup" if used["memory_measured"] == "cgroup" else "rusage")


def test_a_fresh_sandbox_reports_what_its_cgroup_or_its_reaped_init_measured(home: dict[str, Any]) -> None:
    heavy = _run_json(home["environ"], "python3", "-c", HEAVY)
    light = _run_json(home["environ"], "true")
    _check(heavy, light)
    # A memory cgroup (root here) measures the whole run; without one (a normal user), the largest process.
    expected = "cgroup" if cgroups.detect().memory is not None else "process"
    assert heavy["usage"]["memory_measured"] == expected


def test_without_usage_the_json_keeps_its_six_fields(home: dict[str, Any]) -> None:
    data = json.loads(cli_out(home["environ"], "run", "use", "--json", "--", "true"))["data"]
    assert set(data) == {"exit_code", "stdout", "stderr", "duration_s", "timed_out", "signal"}


def test_the_usage_line_says_what_and_how(home: dict[str, Any]) -> None:
    said = subprocess.run([sys.executable, "-m", "warden", "run", "use", "--usage", "--", "python3", "-c", HEAVY],
                          env=home["environ"], capture_output=True, text=True, timeout=120, check=True)
    line = said.stderr.strip().splitlines()[-1]
    assert line.startswith("warden: used ") and " s of CPU and " in line and "MiB of memory at its peak" in line
    assert line.endswith(("(the whole run, by cgroup)", "(its largest process, by rusage)")), line
    assert float(line.split()[2]) >= 0.2, line


def test_the_live_sandbox_reports_cpu_and_memory(home: dict[str, Any]) -> None:
    environ = home["environ"]
    server = cli_out(environ, "run", "use", "--detach", "--", "sleep", "300")
    try:
        heavy = _run_json(environ, "python3", "-c", HEAVY)
        light = _run_json(environ, "true")
        _check(heavy, light)
    finally:
        cli_out(environ, "kill", "use", server, "--signal", "KILL")


def test_http_exec_and_mcp_exec_carry_usage_and_the_stream_keeps_its_exit_line(home: dict[str, Any]) -> None:
    bearer = {"Authorization": f"Bearer {home['token']}"}
    with ServeProcess(home["environ"], home["tmp"]) as served, \
            httpx.Client(base_url=served.url, headers=bearer, timeout=120) as client:
        # A bot's execs run in its live sandbox: the supervisor's wait4 (and the command's cgroup).
        heavy = client.post("/v1/workspaces/use/exec", json={"cmd": ["python3", "-c", HEAVY]}).json()
        light = client.post("/v1/workspaces/use/exec", json={"cmd": ["true"]}).json()
        _check(heavy, light)
        # How its limits held and whether the syscall filter was on, as its audited `run` event
        # says (the SDK's RunResult showed its defaults, 'rlimit' and no seccomp, whatever held).
        events = json.loads(cli_out(home["environ"], "audit", "--workspace", "use", "--limit", "10", "--json"))["data"]
        ran = max((e for e in events if e["action"] == "run"), key=lambda e: e["seq"])["detail"]
        assert (light["limits_via"], light["seccomp"]) == (ran["limits_via"], ran["seccomp"]), (light, ran)
        with Client(served.url, token=home["token"]) as sdk_client:
            sdk = sdk_client.workspace("use").run(["true"])
        assert (sdk.limits_via, sdk.seccomp) == (ran["limits_via"], ran["seccomp"])
        # The stream's exit line keeps exactly the fields INTERFACES.md lists.
        with client.stream("POST", "/v1/workspaces/use/exec", json={"cmd": ["true"], "stream": True}) as answer:
            end = json.loads(list(answer.iter_lines())[-1])
        assert set(end) == {"type", "exit_code", "timed_out", "signal", "duration_s"}

        async def mcp() -> list[Any]:
            async with http_session(served.url + "/mcp", home["token"]) as session:
                return [await session.call_tool("exec", {"workspace": "use", "cmd": argv})
                        for argv in (["python3", "-c", HEAVY], ["true"])]

        answers = asyncio.run(mcp())
    assert not any(a.is_error for a in answers)
    _check(*(a.structured_content for a in answers))
    said = answers[0].content[0].text.splitlines()[0]
    assert "s CPU, " in said and "MiB peak" in said, said
