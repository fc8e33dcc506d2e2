"""Warden's MCP server with clients that are not ours: the TypeScript SDK's client (npm
@modelcontextprotocol/sdk) over stdio and streamable HTTP, and the MCP Inspector's command-line
mode. Both are installed with npm into a temporary folder once per session; without node, npm or
the registry the tests skip and say why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mcp import SECRET, World, make_world
from tests.support.servers import ServeProcess

SDK = "@modelcontextprotocol/sdk@1.32.2"
# The Inspector's later releases declare node >= 22.7.5 (2.x: >= 22.19); 0.15.0 declares no engine
# and its CLI mode runs on the Node 20 of this machine.
INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"

if os.environ.get("WARDEN_NO_NPM"):  # a machine that must not reach the npm registry
    pytestmark = pytest.mark.skip(reason="WARDEN_NO_NPM is set: the npm clients are not installed")


def _node_major() -> int | None:
    node = shutil.which("node")
    if node is None:
        return None
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    try:
        return int(out.lstrip("v").split(".")[0])
    except ValueError:
        return None


def _npm_install(folder: Path, package: str) -> str | None:
    """Install `package` into `folder`; None when done, else why not."""
    if shutil.which("npm") is None:
        return "npm is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text('{"name": "warden-mcp-clients", "private": true, "type": "module"}')
    try:
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", package],
                              cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return f"npm install {package} took over 300 s"
    if done.returncode != 0:
        return f"npm could not install {package}: {done.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="session")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    major = _node_major()
    if major is None or major < 18:
        pytest.skip(f"the TypeScript SDK needs node >= 18 (found: {major})")
    folder = tmp_path_factory.mktemp("npm-sdk")
    why = _npm_install(folder, SDK)
    if why:
        pytest.skip(why)
    script = folder / "mcp_client.mjs"
    shutil.copy(Path(__file__).parent.parent / "support" / "mcp_client.mjs", script)
    return script


@pytest.fixture(scope="session")
def inspector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    major = _node_major()
    if major is None or major < 18:
        pytest.skip(f"the MCP Inspector {INSPECTOR} needs node >= 18 (found: {major})")
    folder = tmp_path_factory.mktemp("npm-inspector")
    why = _npm_install(folder, INSPECTOR)
    if why:
        pytest.skip(why)
    return folder / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield make_world(tmp_path_factory.mktemp("mcp-node"))


def _node(script: Path, world: World, token: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(["node", str(script), *args], capture_output=True, text=True, timeout=180, check=False,
                          env={**world.environ, "WARDEN_TOKEN": token})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_session(seen: dict[str, Any], world: World) -> None:
    assert len(seen["tools"]) == 14 and "move_file" in seen["tools"]
    assert seen["schema"]["required"] == ["workspace", "cmd"]
    assert not seen["wrote"]["isError"] and seen["read"]["text"] == "from typescript\n"
    assert (world.path("paper") / "drafts" / "ts.txt").read_text() == "from typescript\n"
    assert seen["exec"]["structured"]["exit_code"] == 0
    # Progress before the end, by order and by time.
    kinds = [event["kind"] for event in seen["events"]]
    first = next(e for e in seen["events"] if e["kind"] == "progress" and "first" in e["message"])
    assert kinds[-1] == "result" and seen["events"][-1]["at"] - first["at"] >= 1000, seen["events"]
    assert seen["refused"]["isError"] and "permission denied" in seen["refused"]["text"]
    assert SECRET not in seen["refused"]["text"]
    assert seen["invalid"]["isError"] and "exec needs cmd" in seen["invalid"]["text"]


def test_the_typescript_sdk_over_stdio(ts_client: Path, world: World) -> None:
    _check_session(_node(ts_client, world, world.tokens["alice@paper"], "stdio", sys.executable, "paper"), world)


def test_the_typescript_sdk_over_streamable_http(ts_client: Path, world: World,
                                                 tmp_path: Path) -> None:
    with ServeProcess(world.environ, tmp_path) as server:
        # alice's identity token: the SDK's client acts through her grant on paper.
        _check_session(_node(ts_client, world, world.tokens["alice"], "http", server.url + "/mcp", "paper"), world)


def _inspect(inspector: Path, world: World, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**world.environ, "WARDEN_TOKEN": token}
    passed = [arg for key in ("WARDEN_TOKEN", "WARDEN_HOME", "HOME", "PATH", "WARDEN_DAEMON") if key in env
              for arg in ("-e", f"{key}={env[key]}")]
    return subprocess.run([str(inspector), "--cli", *passed, sys.executable, "-m", "warden", "mcp", *args],
                          capture_output=True, text=True, timeout=180, check=False, env=env)


def test_the_mcp_inspector_cli_lists_and_calls_tools(inspector: Path, world: World) -> None:
    token = world.tokens["alice@paper"]
    listed = _inspect(inspector, world, token, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    names = [tool["name"] for tool in json.loads(listed.stdout)["tools"]]
    assert names[:3] == ["list_workspaces", "create_workspace", "exec"] and len(names) == 14
    (world.path("paper") / "drafts" / "inspected.txt").write_text("seen by the inspector")
    called = _inspect(inspector, world, token, "--method", "tools/call", "--tool-name", "read_file",
                      "--tool-arg", "workspace=paper", "--tool-arg", "path=/drafts/inspected.txt")
    assert called.returncode == 0, called.stderr[-2000:]
    assert json.loads(called.stdout)["content"][0]["text"] == "seen by the inspector"
    templates = _inspect(inspector, world, token, "--method", "resources/templates/list")
    assert templates.returncode == 0 and "warden://{workspace}/{+path}" in templates.stdout

