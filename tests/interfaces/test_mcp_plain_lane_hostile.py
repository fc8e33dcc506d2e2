"""Hostile bodies against the plain lane of `/mcp`: whatever a bot sends, the lane answers it as
the SDK's path does, or leaves it to that path (finding: a UTF-16 or BOM-led body and a lone
surrogate were parsed by `json.loads`, so the lane carried out calls the SDK refuses as parse
errors, the surrogate one failing inside the tool as an internal error)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.interfaces.test_mcp_plain_lane import _answers
from tests.support.mcp import World, make_world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield make_world(tmp_path_factory.mktemp("mcp-plain-hostile"))


READ = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"workspace": "paper", "path": "/input/data.csv"}}}
SURROGATE = (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file",'
             b'"arguments":{"workspace":"paper","path":"/input/\\ud800"}}}')
DUPLICATE = (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":'
             b'{"workspace":"vault","path":"/secret.txt"}},"params":{"name":"read_file","arguments":'
             b'{"workspace":"paper","path":"/input/data.csv"}}}')


@pytest.mark.parametrize(("body", "parsed"), [
    (json.dumps(READ).encode("utf-16"), False),
    (b"\xef\xbb\xbf" + json.dumps(READ).encode(), False),
    (SURROGATE, False),
    (DUPLICATE, True),
    (json.dumps({**READ, "id": 10**30}).encode(), True),
    (json.dumps({**READ, "params": {"name": "read_file", "arguments": {
        "workspace": "paper", "path": "/input/data.csv", "offset": float("nan")}}}).encode(), True),
], ids=["utf-16", "bom", "lone-surrogate", "duplicate-keys", "huge-id", "nan"])
def test_a_hostile_body_gets_the_sdks_answer(world: World, body: bytes, parsed: bool) -> None:
    token = world.tokens["alice@paper"]
    fast, taken = _answers(world, token, "2025-11-25", [body], lane=True)
    slow, _ = _answers(world, token, "2025-11-25", [body], lane=False)
    assert fast == slow
    assert taken == (1 if parsed else 0)
    if not parsed:  # a parse error, as JSON-RPC says, and no tool ran
        assert fast[0][0] == 400 and fast[0][2]["error"]["code"] == -32700
