"""What background processes use (issue #15), on real sandboxes: `warden ps` shows a running
process's CPU so far (its cgroup's count where it has one, else the host's count of its leader),
and the audit's `run` event of one that ended says what it used (its cgroup's figures, read
before the cgroup goes, else its supervisor's wait4), as a foreground run's does."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from typing import Any

import httpx
import pytest

from tests.support.mcp import http_session
from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.adapters.sandbox import cgroups

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

BUSY = "import time\ns = 0\nfor i in range(8_000_000): s += i\ntime.sleep(300)"
HEAVY = ("x = bytearray(200 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
         "s = 0\nfor i in range(4_000_000): s += i\n")
MIB = 1 << 20


@pytest.fixture(scope="module")
def environ(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    environ = {**warden_environ(tmp_path_factory.mktemp("ps-usage") / "home"), "WARDEN_SANDBOX_MEMORY": "1G"}
    cli_out(environ, "init")
    cli_out(environ, "create", "use", "--template", "minimal")
    return environ


def _ps(environ: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {p["id"]: p for p in json.loads(cli_out(environ, "ps", "use", "--json"))["data"]}


def _ended_with(environ: dict[str, str], *command: str) -> dict[str, Any]:
    """The usage in the audit's `run` event of a background process that ran `command` to its end."""
    process = cli_out(environ, "run", "use", "--detach", "--", *command).strip()
    assert json.loads(cli_out(environ, "wait", "use", process, "--json"))["data"]["exit_code"] == 0
    events = json.loads(cli_out(environ, "audit", "--workspace", "use", "--limit", "20", "--json"))["data"]
    [ran] = [e for e in events if e["action"] == "run" and e["detail"].get("run_id") == process]
    assert ran["detail"]["background"] is True
    return dict(ran["detail"]["usage"])


def test_ps_shows_the_cpu_a_running_process_has_used(environ: dict[str, str]) -> None:
    busy = cli_out(environ, "run", "use", "--detach", "--", "python3", "-c",
                   BUSY).strip()
    idle = cli_out(environ, "run", "use", "--detach", "--", "sleep", "300").strip()
    try:
        deadline = time.monotonic() + 60
        while True:
            listed = _ps(environ)
            used = listed[busy]["usage"]
            if used is not None and used["cpu_s"] is not None and used["cpu_s"] >= 0.2:
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.5)
        expected = "cgroup" if cgroups.detect().memory is not None else "rusage"
        assert used["measured_by"] == expected, used
        assert listed[idle]["usage"]["cpu_s"] < 0.1, listed[idle]
        table = cli_out(environ, "ps", "use")
        assert "CPU" in table.splitlines()[0]
        row = next(line for line in table.splitlines() if line.startswith(busy))
        assert any(cell.endswith("s") and float(cell[:-1]) >= 0.2 for cell in row.split()
                   if cell[:-1].replace(".", "").isdigit()), row
    finally:
        for process in (busy, idle):
            cli_out(environ, "kill", "use", process, "--signal", "KILL")
    ended = _ps(environ)
    assert ended[busy]["status"] == "killed" and ended[busy]["usage"] is None


def test_an_ended_background_process_s_run_event_says_what_it_used(environ: dict[str, str]) -> None:
    heavy = _ended_with(environ, "python3", "-c", HEAVY)
    light = _ended_with(environ, "true")
    assert heavy["cpu_s"] >= 0.2 and light["cpu_s"] < heavy["cpu_s"] / 2, (heavy, light)
    assert heavy["memory_peak_bytes"] >= 150 * MIB, heavy
    assert light["memory_peak_bytes"] < 60 * MIB, light
    expected = "cgroup" if cgroups.detect().memory is not None else "process"
    assert heavy["memory_measured"] == expected, heavy


def test_the_process_api_and_mcp_show_a_bots_running_process_s_cpu(environ: dict[str, str],
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    cli_out(environ, "bot", "register", "meter")
    token = cli_out(environ, "grant", "use", "meter", "--permissions", "execute")
    with ServeProcess(environ, tmp_path_factory.mktemp("serve")) as served, \
            httpx.Client(base_url=f"{served.url}/v1/workspaces/use", timeout=60,
                         headers={"Authorization": f"Bearer {token}"}) as client:
        started = client.post("/exec", json={"cmd": ["python3", "-c", BUSY], "background": True})
        assert started.status_code == 202, started.text
        process = started.json()["id"]
        try:
            deadline = time.monotonic() + 60
            while True:
                [listed] = [p for p in client.get("/processes").json() if p["id"] == process]
                used = listed["usage"]
                if used is not None and used["cpu_s"] is not None and used["cpu_s"] >= 0.2:
                    break
                assert time.monotonic() < deadline, listed
                time.sleep(0.5)
            assert set(used) == {"cpu_s", "memory_peak_bytes", "memory_measured", "measured_by"}
            shown = client.get(f"/processes/{process}").json()
            assert shown["usage"]["cpu_s"] >= used["cpu_s"], shown

            async def logs() -> Any:
                async with http_session(served.url + "/mcp", token) as session:
                    return await session.call_tool("process_logs", {"workspace": "use", "id": process})

            answer = asyncio.run(logs())
            assert not answer.is_error and answer.structured_content["usage"]["cpu_s"] >= used["cpu_s"]
            assert "): running, " in answer.content[0].text and " s CPU so far" in answer.content[0].text
        finally:
            client.delete(f"/processes/{process}", params={"signal": "KILL"})
