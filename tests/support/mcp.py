"""MCP test support: one home with workspaces, folders, bots and grants; clients of the `mcp`
SDK over stdio (`python -m warden mcp`) and over streamable HTTP (a real `warden serve`)."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.servers import cli_out, warden_environ

FOLDERS = ("zones:\n"
           "  drafts: {mode: rw, approval: {write: preApproved, delete: preApproved}}\n"
           "  final: {mode: rw, approval: {write: ask, delete: ask}}\n"
           "  input: {mode: ro}\n")
SECRET = "the neighbour's secret"


@dataclass
class World:
    """A home: workspace `paper` (folders drafts, final (ask), input (read-only)) and its prefix
    sibling `paper-evil`, a person's `vault`; bots and their tokens."""

    environ: dict[str, str]
    root: Path  # sandbox.root_dir
    tokens: dict[str, str] = field(default_factory=dict)

    def path(self, workspace: str) -> Path:
        return self.root / workspace

    def cli(self, *args: str) -> str:
        return cli_out(self.environ, *args)


def make_world(base: Path) -> World:
    environ = warden_environ(base / "home")
    cli_out(environ, "init")
    paper = Path(json.loads(cli_out(environ, "create", "paper", "--template", "minimal", "--json"))["data"]["path"])
    world = World(environ, paper.parent)
    (paper / ".warden").mkdir(exist_ok=True)
    (paper / ".warden" / "zones.yaml").write_text(FOLDERS)
    for folder in ("drafts", "final", "input"):
        (paper / folder).mkdir()
    (paper / "input" / "data.csv").write_text("a,b\n1,2\n")
    for name in ("paper-evil", "vault"):
        other = Path(json.loads(cli_out(environ, "create", name, "--template", "minimal", "--json"))["data"]["path"])
        (other / "secret.txt").write_text(SECRET)
    for bot in ("alice", "bob", "carol"):
        world.tokens[bot] = cli_out(environ, "bot", "register", bot)
    world.tokens["alice@paper"] = cli_out(environ, "grant", "paper", "alice", "--permissions", "read,write,execute")
    world.tokens["bob@drafts"] = cli_out(environ, "grant", "paper", "bob", "--permissions", "read,write",
                                         "--zones", "drafts")
    world.tokens["bob@vault"] = cli_out(environ, "grant", "vault", "bob", "--permissions", "read,write,execute")
    return world


def text(result: Any) -> str:
    """The text of a tool result."""
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


@contextlib.asynccontextmanager
async def stdio_session(world: World, token: str, **env: str) -> AsyncIterator[ClientSession]:
    """The SDK's client on `python -m warden mcp` for `token`, initialised."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "warden", "mcp"],
                                   env={**world.environ, "WARDEN_TOKEN": token, **env})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """The SDK's client over streamable HTTP at `url` (…/mcp) with `token` as Bearer, initialised."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        yield session


class Recorder:
    """Progress notifications and the final result of a call, in the order they came, timed."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float, str]] = []

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.events.append(("progress", time.monotonic(), message or ""))

    def ended(self, result: Any) -> None:
        self.events.append(("result", time.monotonic(), text(result)))
