"""`POST /v1/workspaces/{name}/install` against a real `warden serve`: a bot adds a package after
creation, from the local index the person configured (no internet), with `write` and `execute`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture
from tests.support.servers import ServeProcess, cli_out
from warden.client import Client

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(scope="module")
def served(envhome: EnvHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:  # noqa: F811
    name, bot = envhome.name("inst"), envhome.name("installer")
    folder = envhome.create(name)
    cli_out(envhome.environ, "bot", "register", bot)

    def grant(permissions: str) -> str:
        out = cli_out(envhome.environ, "grant", name, bot, "--permissions", permissions, "--json")
        token: str = json.loads(out)["data"]["token"]
        return token

    with ServeProcess(envhome.environ, tmp_path_factory.mktemp("install-serve")) as server:
        yield {"url": server.url, "name": name, "folder": folder, "bot": bot, "full": grant("read,write,execute"),
               "read_exec": grant("read,execute"), "read_write": grant("read,write")}


def test_a_bot_installs_a_package_from_the_configured_index(served: dict[str, Any], envhome: EnvHome) -> None:  # noqa: F811
    ws = Client(served["url"], served["full"]).workspace(served["name"])
    assert ws.run(["python", "-c", "import gamma"]).exit_code != 0
    done = ws.install(["gamma"])
    assert done == {"name": served["name"], "packages": ["gamma"], "node": False, "ok": True, "exit_code": 0,
                    "recorded_in": "pyproject.toml"}
    assert '"gamma"' in (served["folder"] / "pyproject.toml").read_text()
    ran = ws.run(["python", "-c", "import gamma; print(gamma.VERSION)"])
    assert (ran.exit_code, ran.stdout) == (0, "0.5\n"), ran.stderr
    audit = json.loads(cli_out(envhome.environ, "audit", "--workspace", served["name"], "--limit", "20",
                               "--json"))["data"]
    installs = [e for e in audit if e["action"] == "workspace.install"]
    assert installs and installs[-1]["actor"].startswith(f"bot:{served['bot']}@acc_")
    assert installs[-1]["detail"]["packages"] == ["gamma"]
    api = [e for e in audit if e["action"] == "api.install"]
    assert api and api[-1]["decision"] == "allow"


@pytest.mark.parametrize("grant", ["read_exec", "read_write"])
def test_install_needs_write_and_execute(served: dict[str, Any], grant: str) -> None:
    response = httpx.post(f"{served['url']}/v1/workspaces/{served['name']}/install", json={"packages": ["beta"]},
                          headers={"Authorization": f"Bearer {served[grant]}"}, timeout=60)
    assert response.status_code == 403
    missing = "write" if grant == "read_exec" else "execute"
    error = response.json()["error"]
    assert error["code"] == "denied" and error["message"].startswith(
        f"permission denied: this token's grant on workspace {served['name']} does not include `{missing}`"), error


@pytest.mark.parametrize(("body", "status"), [
    ({"packages": ["-r/etc/passwd"]}, 400), ({"packages": ["six; import os"]}, 400),
    ({"packages": ["/etc/passwd.tgz"], "node": True}, 400), ({"packages": ["file:/root/x.tgz"], "node": True}, 400),
    ({"packages": []}, 422), ({"packages": ["gamma"], "index_url": "http://evil"}, 422)])
def test_refusals_are_one_line_and_install_nothing(served: dict[str, Any], body: dict[str, Any],
                                                     status: int) -> None:
    before = (Path(served["folder"]) / "pyproject.toml").read_text()
    response = httpx.post(f"{served['url']}/v1/workspaces/{served['name']}/install", json=body,
                          headers={"Authorization": f"Bearer {served['full']}"}, timeout=60)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == "invalid" and "\n" not in response.json()["error"]["message"]
    assert (Path(served["folder"]) / "pyproject.toml").read_text() == before


def test_a_package_the_index_lacks_fails_in_one_line(served: dict[str, Any]) -> None:
    response = httpx.post(f"{served['url']}/v1/workspaces/{served['name']}/install",
                          json={"packages": ["no-such-package-here"]},
                          headers={"Authorization": f"Bearer {served['full']}"}, timeout=300)
    # Not an outage a client should retry: the same request gets the same answer.
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and "no-such-package-here" in error["message"]
    assert "no such package or version" in error["message"] and "\n" not in error["message"]
