"""The plain lane of `/mcp`: a tool call in the common form is answered without the SDK's
per-request session, and its answer is the SDK's answer, byte for byte once parsed; any other
form (a batch, a progress token, `exec`, another protocol version, an Origin, …) takes the SDK's
path, so its checks and errors stay the only ones."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.mcp import World, make_world
from warden.interfaces.mcp import server as mcp_server


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield make_world(tmp_path_factory.mktemp("mcp-plain"))


def _call(name: str, arguments: dict[str, Any], request_id: int | str = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


def _headers(token: str, version: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "MCP-Protocol-Version": version}


def _answers(world: World, token: str, version: str, bodies: list[bytes],
             lane: bool) -> tuple[list[tuple[int, str, Any]], int]:
    """(status, content type, parsed body) of each POST to an in-process /mcp, and how many the
    plain lane answered; with `lane` False every call takes the SDK's path."""
    from warden import Warden
    from warden.interfaces.http.app import create_app

    taken = 0
    original = mcp_server.McpHttp._answer_plain_call

    async def counted(self: Any, *args: Any) -> None:
        nonlocal taken
        taken += 1
        await original(self, *args)

    async def go() -> list[tuple[int, str, Any]]:
        with Warden.open(Path(world.environ["WARDEN_HOME"]), environ=world.environ) as warden:
            api = create_app(warden.app)
            transport = httpx.ASGITransport(api)
            async with httpx.AsyncClient(transport=transport, base_url="http://warden") as client:
                out = []
                for body in bodies:
                    answer = await client.post("/mcp", content=body, headers=_headers(token, version))
                    out.append((answer.status_code, answer.headers["content-type"], answer.json()))
                return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mcp_server.McpHttp, "_answer_plain_call", counted)
        if not lane:
            patch.setattr(mcp_server, "_plain_tool_call", lambda scope, body: None)
        return asyncio.run(go()), taken


@pytest.mark.parametrize("version", sorted(mcp_server.PLAIN_VERSIONS))
def test_a_plain_call_is_answered_as_the_sdk_answers_it(world: World, version: str) -> None:
    calls = [_call("read_file", {"workspace": "paper", "path": "/input/data.csv"}),
             _call("read_file", {"workspace": "paper", "path": "/input/data.csv", "offset": 2}, "str-id"),
             _call("list_directory", {"workspace": "paper", "path": "/"}),
             _call("file_info", {"workspace": "paper", "path": "/input/data.csv"}),
             _call("list_workspaces", {}),
             _call("read_file", {"workspace": "paper", "path": "/../paper-evil/secret.txt"}),  # refused
             _call("read_file", {"workspace": "vault", "path": "/secret.txt"}),  # another's workspace
             _call("read_file", {"workspace": "paper"}),  # no path: invalid
             _call("no_such_tool", {})]
    bodies = [json.dumps(call).encode() for call in calls]
    token = world.tokens["alice@paper"]
    fast, taken = _answers(world, token, version, bodies, lane=True)
    slow, untaken = _answers(world, token, version, bodies, lane=False)
    assert (taken, untaken) == (len(calls), 0)  # the comparison is between the two paths
    assert fast == slow
    assert fast[0][2]["result"]["content"][0]["text"] == "a,b\n1,2\n"
    assert [answer[2]["result"].get("isError", False) for answer in fast] == [
        False, False, False, False, False, True, True, True, True]
    assert "secret" not in json.dumps(fast[5:7]).replace("secret.txt", "")


def _scope(headers: dict[str, str]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/mcp",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}


def test_only_the_clean_common_form_takes_the_plain_lane() -> None:
    plain = _headers("t", "2025-11-25")
    read = _call("read_file", {"workspace": "paper", "path": "/a"})
    assert mcp_server._plain_tool_call(_scope(plain), json.dumps(read).encode()) == mcp_server.PlainCall(
        7, "read_file", {"workspace": "paper", "path": "/a"}, "2025-11-25")
    with_meta = {**read, "params": {**read["params"], "_meta": {"progressToken": 1}}}
    odd_bodies = [
        json.dumps([read]),  # a batch
        json.dumps(with_meta),  # a progress token (or any _meta)
        json.dumps(_call("exec", {"workspace": "paper", "cmd": ["true"]})),  # follows its connection
        json.dumps({**read, "id": True}), json.dumps({**read, "id": None}),
        json.dumps({**read, "extra": 1}), json.dumps({**read, "jsonrpc": "1.0"}),
        json.dumps({**read, "method": "tools/list"}),
        json.dumps({**read, "params": {"name": "read_file", "arguments": [1]}}),
        json.dumps({**read, "params": {"name": 3}}), "{not json", '{"a": ' * 100_000]
    for body in odd_bodies:
        assert mcp_server._plain_tool_call(_scope(plain), body.encode()) is None, body[:80]
    odd_headers = [
        {**plain, "MCP-Protocol-Version": "2025-03-26"}, {**plain, "MCP-Protocol-Version": "2026-07-28"},
        {k: v for k, v in plain.items() if k != "MCP-Protocol-Version"},
        {**plain, "Origin": "http://evil.example"}, {**plain, "Mcp-Session-Id": "abc"},
        {**plain, "Content-Type": "text/plain"}, {**plain, "Accept": "text/event-stream"},
        {k: v for k, v in plain.items() if k != "Accept"}]
    for headers in odd_headers:
        assert mcp_server._plain_tool_call(_scope(headers), json.dumps(read).encode()) is None, headers


def test_an_odd_form_gets_the_sdks_own_answer(world: World) -> None:
    """Through the whole app: an Accept the SDK refuses is refused by the SDK (406), not answered."""
    from warden import Warden
    from warden.interfaces.http.app import create_app

    async def go() -> httpx.Response:
        with Warden.open(Path(world.environ["WARDEN_HOME"]), environ=world.environ) as warden:
            transport = httpx.ASGITransport(create_app(warden.app))
            async with httpx.AsyncClient(transport=transport, base_url="http://warden") as client:
                headers = {**_headers(world.tokens["alice@paper"], "2025-11-25"), "Accept": "text/html"}
                return await client.post("/mcp", json=_call("read_file", {"workspace": "paper", "path": "/x"}),
                                         headers=headers)

    answer = asyncio.run(go())
    assert answer.status_code == 406, answer.text
