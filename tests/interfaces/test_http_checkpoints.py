"""`POST|GET /v1/workspaces/{name}/checkpoints` against a real `warden serve`: a bot with `write`
makes a checkpoint, one with `read` lists them, and the person rolls back to it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("checkpoints-http")
    environ = warden_environ(base / "home")
    cli_out(environ, "init")
    folder = Path(json.loads(cli_out(environ, "create", "ck", "--json"))["data"]["path"])
    cli_out(environ, "bot", "register", "saver")

    def grant(permissions: str) -> str:
        token: str = json.loads(cli_out(environ, "grant", "ck", "saver", "--permissions", permissions,
                                        "--json"))["data"]["token"]
        return token

    with ServeProcess(environ, base) as server:
        yield {"url": server.url, "environ": environ, "folder": folder, "rw": grant("read,write"),
               "ro": grant("read")}


def _call(served: dict[str, Any], method: str, token: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, f"{served['url']}/v1/workspaces/ck/checkpoints", timeout=60,
                         headers={"Authorization": f"Bearer {token}"}, **kw)


def test_a_bot_checkpoints_and_the_person_rolls_back(served: dict[str, Any]) -> None:
    (served["folder"] / "work.txt").write_text("good\n")
    made = _call(served, "POST", served["rw"], json={"message": "before my refactor"})
    assert made.status_code == 201, made.text
    data = made.json()
    assert data["message"] == "before my refactor" and data["files"] >= 1 and "saver" in data["actor"]
    listed = _call(served, "GET", served["ro"])
    assert listed.status_code == 200 and listed.json()[0]["id"] == data["id"]
    (served["folder"] / "work.txt").write_text("broken\n")
    cli_out(served["environ"], "rollback", "ck", data["id"])
    assert (served["folder"] / "work.txt").read_text() == "good\n"
    events = json.loads(cli_out(served["environ"], "audit", "--workspace", "ck", "--json"))["data"]
    created = [e for e in events if e["action"] == "checkpoint.create"]
    assert created and "saver" in created[0]["actor"]


def test_through_the_sdk(served: dict[str, Any]) -> None:
    from warden.client import Client

    ws = Client(served["url"], served["rw"]).workspace("ck")
    made = ws.checkpoint("sdk")
    assert made["message"] == "sdk" and ws.checkpoints()[0]["id"] == made["id"]


def test_python_api(served: dict[str, Any]) -> None:
    from warden import Warden

    with Warden.open(served["environ"]["WARDEN_HOME"], environ=served["environ"]) as w:
        ws = w.get("ck")
        (served["folder"] / "api.txt").write_text("kept")
        made = ws.checkpoint("from python")
        (served["folder"] / "api.txt").write_text("lost")
        assert ws.rollback(made.id, path="/api.txt")["checkpoint"] == made.id
        assert (served["folder"] / "api.txt").read_text() == "kept"
        assert ws.checkpoints()[-1].id != made.id  # the rollback saved what was there first


def test_refusals(served: dict[str, Any]) -> None:
    assert _call(served, "POST", served["ro"], json={}).status_code == 403
    assert _call(served, "GET", "wdn_not-a-token").status_code in (401, 403)
    too_long = _call(served, "POST", served["rw"], json={"message": "x" * 1001})
    assert too_long.status_code in (400, 422)
