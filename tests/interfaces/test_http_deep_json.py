"""A body of deeply nested JSON sent to the routes Warden reads before FastAPI or the MCP SDK does
(the exec fast path, `/mcp`'s choice of answer) is a bad request, as everywhere else (finding: it
was a 500 "internal error (RecursionError)": `json.loads` raises RecursionError, not ValueError)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ

DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("deep-json")
    environ = warden_environ(base / "home")
    cli_out(environ, "init")
    cli_out(environ, "create", "demo", "--template", "minimal")
    cli_out(environ, "bot", "register", "runner")
    token = cli_out(environ, "grant", "demo", "runner", "--permissions", "read,write,execute")
    with ServeProcess(environ, base) as server:
        yield {"url": server.url, "token": token, "server": server}


@pytest.mark.parametrize("path", ["/v1/workspaces/demo/exec", "/mcp"])
def test_deeply_nested_json_is_a_bad_request_not_an_internal_error(served: dict[str, Any], path: str) -> None:
    headers = {"Authorization": f"Bearer {served['token']}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    answer = httpx.post(served["url"] + path, content=DEEP, headers=headers, timeout=60)
    assert answer.status_code == 400, answer.text
    assert "internal" not in answer.text and "RecursionError" not in answer.text
    # The server still answers, and said nothing of an internal error.
    ran = httpx.post(served["url"] + "/v1/workspaces/demo/exec", json={"cmd": ["echo", "ok"]},
                     headers={"Authorization": f"Bearer {served['token']}"}, timeout=60)
    assert ran.status_code == 200 and json.loads(ran.text)["stdout"] == "ok\n"
    assert b"RecursionError" not in Path(served["server"].err_path).read_bytes()
