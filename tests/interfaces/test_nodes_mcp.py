"""MCP tool calls sent to node B for node A's workspace: carried out on A (two homes with two
WARDEN_NODE names, two real `warden serve` processes on 127.0.0.1, one throwaway PostgreSQL).

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from typing import Any

import httpx

from tests.support.mcp import Recorder, http_session
from tests.support.nodes import Node, needs_postgres, node_fixtures

pytestmark = needs_postgres

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-protocol-version": "2025-06-18"}


database, pair, token = node_fixtures("warden_nodes_mcp_", window_s=3)


def _call(url: str, token: str, name: str, arguments: dict[str, Any],
          headers: dict[str, str] | None = None) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()
    answer = httpx.post(f"{url}/mcp", content=body, timeout=60,
                        headers={**HEADERS, "authorization": f"Bearer {token}", **(headers or {})})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert isinstance(result, dict)
    return result


def _audit(node: Node) -> list[dict[str, Any]]:
    return list(json.loads(node.cli("audit", "--limit", "300", "--json").stdout)["data"])


def test_tool_calls_through_b_act_on_a(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    marker = "mcp-" + secrets.token_hex(4)
    with b.serve() as server_b, a.serve() as server_a:
        ran = _call(server_b.url, token, "exec", {"workspace": "wsa", "cmd": ["sh", "-c", f"echo {marker}; pwd"]})
        assert not ran.get("isError"), ran
        assert ran["structuredContent"]["stdout"].startswith(marker) and ran["structuredContent"]["exit_code"] == 0
        wrote = _call(server_b.url, token, "write_file", {"workspace": "wsa", "path": f"/{marker}.txt",
                                                          "content": "via b"})
        assert not wrote.get("isError"), wrote
        read = _call(server_b.url, token, "read_file", {"workspace": "wsa", "path": f"/{marker}.txt"})
        assert read["content"][0]["text"].endswith("via b"), read
        listed = _call(server_b.url, token, "list_directory", {"workspace": "wsa", "path": "/"})
        assert f"{marker}.txt" in json.dumps(listed)
        # The same answer as A gives itself (the very tool, run there).
        assert listed == _call(server_a.url, token, "list_directory", {"workspace": "wsa", "path": "/"})
        edited = _call(server_b.url, token, "edit_file", {"workspace": "wsa", "path": f"/{marker}.txt",
                                                          "old": "via b", "new": "edited"})
        assert not edited.get("isError"), edited
        started = _call(server_b.url, token, "exec", {"workspace": "wsa", "cmd": ["sleep", "30"], "background": True})
        pid = started["structuredContent"]["id"]
        killed = _call(server_b.url, token, "process_kill", {"workspace": "wsa", "id": pid})
        assert not killed.get("isError"), killed
        # A resource read of A's file through B.
        resource = httpx.post(f"{server_b.url}/mcp", timeout=60,
                              headers={**HEADERS, "authorization": f"Bearer {token}"},
                              json={"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                                    "params": {"uri": f"warden://wsa/{marker}.txt"}})
        assert "edited" in resource.text, resource.text
    # On A's folder (B has none), audited once (the registry, and so the audit log, is the cluster's:
    # one event per call says B added none of its own).
    assert (a.folder() / f"{marker}.txt").read_text() == "edited"
    assert not (b.folder() / f"{marker}.txt").exists()
    on_a = [e for e in _audit(a) if marker in json.dumps(e)]
    assert {e["action"] for e in on_a} >= {"run.start", "fs.write"}, on_a
    assert len([e for e in on_a if e["action"] == "fs.write"]) == 2  # write_file, edit_file


def test_an_exec_through_b_streams_its_output_as_progress(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    recorder = Recorder()

    async def go(url: str) -> None:
        async with http_session(url, token) as session:
            result = await session.call_tool(
                "exec", {"workspace": "wsa", "cmd": ["sh", "-c", "echo started; sleep 2; echo finished"]},
                progress_callback=recorder.progress)
            recorder.ended(result)

    with b.serve() as server_b, a.serve():
        asyncio.run(go(server_b.url + "/mcp"))
    first = next(e for e in recorder.events if e[0] == "progress" and "started" in e[2])
    end = recorder.events[-1]
    assert end[0] == "result" and "exit code 0" in end[2] and "started\nfinished" in end[2]
    assert end[1] - first[1] >= 1.5, recorder.events  # "started" came while the command still slept


def test_a_down_answers_unavailable_naming_it_and_nothing_runs(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    marker = "down-" + secrets.token_hex(4)
    with b.serve() as server_b:
        for name, arguments in (("exec", {"workspace": "wsa", "cmd": ["touch", marker]}),
                                ("write_file", {"workspace": "wsa", "path": f"/{marker}", "content": "x"})):
            refused = _call(server_b.url, token, name, arguments)
            assert refused["isError"] is True
            assert "unavailable" in refused["content"][0]["text"] and "node-a" in refused["content"][0]["text"]
            assert "try again" in refused["content"][0]["text"]  # nothing reached A: safe to ask again
    assert not (a.folder() / marker).exists() and not (b.folder() / marker).exists()


def test_an_exec_whose_node_dies_while_it_runs_is_not_said_safe_to_send_again(pair: tuple[Node, Node],
                                                                               token: str) -> None:
    """A is killed -9 while an exec sent through B runs there. B's answer said "try again when it
    is back", though the command had run (its first line written): a bot doing so runs it twice."""
    a, b = pair
    marker = "lost-" + secrets.token_hex(4)
    with b.serve() as server_b, a.killed_once(marker):
        answer = _call(server_b.url, token, "exec",
                       {"workspace": "wsa", "cmd": ["sh", "-c", f"touch {marker}; sleep 20"]})
    text = answer["content"][0]["text"]
    assert answer["isError"] is True and "unavailable" in text and "node-a" in text, text
    assert "try again" not in text and "may have been done" in text, text


def _signed(a: Node, body: bytes, *, target: str, pepper: bytes | None = None) -> dict[str, str]:
    from warden.core import nodes

    key = nodes.node_key(pepper or base64.urlsafe_b64decode(a.environ["WARDEN_TOKEN_PEPPER"] + "=="))
    return nodes.sign(key, method="POST", path="/mcp", query="", body=body, origin="node-b", target=target,
                      timestamp=int(time.time()), nonce=secrets.token_hex(16)).headers()


def test_signed_mcp_requests_are_checked_and_never_forwarded_again(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    marker = "sig-" + secrets.token_hex(4)
    arguments = {"workspace": "wsa", "cmd": ["touch", marker]}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "exec", "arguments": arguments}}).encode()
    with a.serve() as server_a, b.serve() as server_b:
        auth = {**HEADERS, "authorization": f"Bearer {token}"}
        forged = httpx.post(f"{server_a.url}/mcp", content=body, timeout=60,
                            headers={**auth, **_signed(a, body, target="node-a", pepper=b"another pepper")})
        assert forged.status_code == 403 and forged.json()["error"]["code"] == "denied"
        headers = {**auth, **_signed(a, body, target="node-a")}
        assert httpx.post(f"{server_a.url}/mcp", content=body, headers=headers, timeout=60).status_code == 200
        replayed = httpx.post(f"{server_a.url}/mcp", content=body, headers=headers, timeout=60)
        assert replayed.status_code == 403 and "replayed" in replayed.text
        # B, asked by a (signed) node for A's workspace, does not send it on: unavailable, run nowhere else.
        again = httpx.post(f"{server_b.url}/mcp", content=body, timeout=60,
                           headers={**auth, **_signed(a, body, target="node-b")})
        assert again.status_code == 200 and again.json()["result"]["isError"] is True
        assert "unavailable" in again.text
    (a.folder() / marker).unlink()  # the one signed call that was taken
