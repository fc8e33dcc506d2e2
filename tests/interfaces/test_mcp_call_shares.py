"""One bot's tool calls cannot take every thread of `warden serve`.

The calls that hold a server thread (every tool but a foreground exec's wait, which an exec slot
bounds) were unbounded: one bot's few dozen calls on a file slow to answer held all of
Starlette's 40 threads, shared with the HTTP API, and every other bot's request waited. Here a
tool of our own is held open (its handler waits for the test), so the bound is seen without a
clock: the bot's next call is refused at once, another bot's is answered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mcp import World, make_world
from warden.bootstrap import App, bootstrap
from warden.interfaces.mcp import calls as calls_module
from warden.interfaces.mcp.calls import MCP_CALLS_PER_BOT, ToolCalls


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("mcp-shares"))


@pytest.fixture
def app(world: World) -> Iterator[App]:
    application = bootstrap(Path(world.environ["WARDEN_HOME"]), environ=world.environ)
    yield application
    application.close()


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def test_a_bots_calls_past_its_share_are_refused_at_once_and_another_bots_answered(
        world: World, app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = ToolCalls(app)
    release, entered = threading.Event(), threading.Semaphore(0)
    real = ToolCalls._list_workspaces

    def held_open(self: ToolCalls, call: Any, args: dict[str, Any]) -> Any:
        if call.principal.bot == "alice":
            entered.release()
            assert release.wait(60), "never released"
        return real(self, call, args)

    monkeypatch.setattr(calls_module.ToolCalls, "_list_workspaces", held_open)
    alice = world.tokens["alice@paper"]
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(tools._blocking("list_workspaces", alice, {})))
               for _ in range(MCP_CALLS_PER_BOT)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert entered.acquire(timeout=30), "a call did not begin"
    try:
        over = tools._blocking("list_workspaces", alice, {})
        assert over.is_error and f"already has {MCP_CALLS_PER_BOT} tool calls in progress" in _text(over)
        other = tools._blocking("list_workspaces", world.tokens["bob@vault"], {})
        assert not other.is_error and "vault" in _text(other)
    finally:
        release.set()
        for thread in threads:
            thread.join(30)
    assert len(results) == MCP_CALLS_PER_BOT and not any(r.is_error for r in results)
    again = tools._blocking("list_workspaces", alice, {})  # given back as each answered
    assert not again.is_error, _text(again)
    refused = [e for e in app.audit.list(limit=50) if e.action == "mcp.list_workspaces" and e.result != "ok"]
    assert len(refused) == 1 and refused[0].actor.startswith("bot:alice"), refused
