"""`warden serve` logs one line per API call naming the bot, the call, its target and how it
ended (a command's exit status too), which uvicorn's access line cannot say."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import poll

pytestmark = pytest.mark.used_home


def test_serve_logs_the_bot_the_call_and_the_exit_status(home: Path, tmp_path: Path) -> None:
    environ = warden_environ(home)
    folder = tmp_path / "notes"
    folder.mkdir()
    cli_out(environ, "ws", "set", str(folder))
    cli_out(environ, "bot", "register", "helper")
    token = cli_out(environ, "grant", "notes", "helper", "--permissions", "read,execute").splitlines()[-1]
    with ServeProcess(environ, tmp_path) as server:
        headers = {"Authorization": f"Bearer {token}"}
        ran = httpx.post(f"{server.url}/v1/workspaces/notes/exec", headers=headers,
                         json={"cmd": ["sh", "-c", "exit 3"]}, timeout=60)
        assert ran.status_code == 200 and ran.json()["exit_code"] == 3
        refused = httpx.get(f"{server.url}/v1/workspaces/other", headers=headers, timeout=30)
        assert refused.status_code in (403, 404)

        def logged() -> bool:
            return b"bot helper: api.exec 'notes': ok, exit 3" in server.output() and b"'other'" in server.output()

        poll(logged, timeout=10, interval=0.1)
        out = server.output().decode()
    assert "bot helper: api.exec 'notes': ok, exit 3" in out, out
    refusals = [line for line in out.splitlines() if "bot helper: api." in line and "'other'" in line]
    assert refusals and ("denied" in refusals[0] or "not_found" in refusals[0]), out
    assert token not in out  # a token never reaches the log
