"""MCP over streamable HTTP at /mcp of a real `warden serve`, driven by the `mcp` SDK's client:
the Bearer door, progress notifications arriving before a long command ends, an ask folder's
write answered with its approval id (a person approves with the CLI), one bot's token never
reaching another's workspace, a grant revoked mid-session, background processes, moves."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.mcp import SECRET, Recorder, World, http_session, make_world, text
from tests.support.servers import ServeProcess


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    base = tmp_path_factory.mktemp("mcp-http")
    world = make_world(base)
    with ServeProcess(world.environ, base) as server:
        yield world, server.url + "/mcp"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def _initialize() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}}


def test_no_token_or_a_bad_one_is_refused_before_the_mcp_layer(served: tuple[World, str]) -> None:
    _, url = served
    headers = {"Accept": "application/json, text/event-stream"}
    for extra in ({}, {"Authorization": "Bearer wdn_" + "x" * 43}, {"Authorization": "Basic abc"}):
        answer = httpx.post(url, json=_initialize(), headers={**headers, **extra}, timeout=30)
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "denied"


def test_the_sdk_client_lists_and_calls_tools_with_a_grant_token(served: tuple[World, str]) -> None:
    world, url = served

    async def go() -> list[Any]:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            tools = await session.list_tools()
            listed = await session.call_tool("list_workspaces", {})
            wrote = await session.call_tool("write_file", {"workspace": "paper", "path": "/drafts/h.txt",
                                                           "content": "over http"})
            resource = await session.read_resource("warden://paper/drafts/h.txt")
            return [tools, listed, wrote, resource]

    tools, listed, wrote, resource = run(go())
    assert len(tools.tools) == 14
    assert listed.structured_content["workspaces"] == [
        {"name": "paper", "status": "ready", "template": "minimal", "permissions": ["read", "write", "execute"]}]
    assert not wrote.is_error and (world.path("paper") / "drafts" / "h.txt").read_text() == "over http"
    assert resource.contents[0].text == "over http"


def test_progress_notifications_arrive_before_a_long_command_ends(served: tuple[World, str]) -> None:
    world, url = served
    recorder = Recorder()

    async def go() -> None:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            result = await session.call_tool(
                "exec", {"workspace": "paper", "cmd": ["sh", "-c", "echo started; sleep 2; echo finished"]},
                progress_callback=recorder.progress)
            recorder.ended(result)

    run(go())
    kinds = [kind for kind, _, _ in recorder.events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    first = next(event for event in recorder.events if event[0] == "progress" and "started" in event[2])
    finished = next(event for event in recorder.events if event[0] == "progress" and "finished" in event[2])
    end = recorder.events[-1]
    # By order: "started" came as a notification, then "finished", then the result; by time: the
    # first notification came while the command was still sleeping.
    assert recorder.events.index(first) < recorder.events.index(finished) < len(recorder.events) - 1
    assert end[1] - first[1] >= 1.5, recorder.events
    assert "exit code 0" in end[2] and "started\nfinished" in end[2]


def test_an_ask_folder_write_answers_with_the_approval_id_and_lands_once_approved(
        served: tuple[World, str]) -> None:
    world, url = served

    async def go() -> Any:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            return await session.call_tool("write_file", {"workspace": "paper", "path": "/final/report.md",
                                                          "content": "# final\n"})

    result = run(go())
    approval = result.structured_content["approval"]
    assert result.structured_content["status"] == "pending" and not result.is_error
    assert approval["id"].startswith("apr_") and approval["status"] == "pending"
    assert f"warden approve {approval['id']}" in text(result) and "NOT been done" in text(result)
    assert "zone" not in text(result).lower() and "zone" not in json.dumps(result.structured_content)
    target = world.path("paper") / "final" / "report.md"
    assert not target.exists()
    world.cli("approve", approval["id"])
    assert target.read_text() == "# final\n"


def test_an_ask_folder_move_is_one_approval(served: tuple[World, str]) -> None:
    world, url = served
    (world.path("paper") / "drafts" / "chapter.md").write_text("chapter")

    async def go() -> Any:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            return await session.call_tool("move_file", {"workspace": "paper", "source": "/drafts/chapter.md",
                                                         "destination": "/final/chapter.md"})

    result = run(go())
    approval = result.structured_content["approval"]
    assert approval["operation"] == "move" and approval["destination"] == "/final/chapter.md"
    world.cli("approve", approval["id"])
    assert (world.path("paper") / "final" / "chapter.md").read_text() == "chapter"
    assert not (world.path("paper") / "drafts" / "chapter.md").exists()


def test_one_bots_token_never_reaches_another_bots_workspace(served: tuple[World, str]) -> None:
    """alice holds paper; bob holds vault. Neither alice's identity token nor her grant reaches
    the vault, by any tool or resource; the answers do not even say whether it exists."""
    world, url = served

    async def go(token: str) -> list[Any]:
        async with http_session(url, token) as session:
            answers = [await session.call_tool("list_workspaces", {})]
            for name, args in (("read_file", {"path": "/secret.txt"}), ("list_directory", {"path": "/"}),
                               ("exec", {"cmd": ["cat", "secret.txt"]}), ("file_info", {"path": "/secret.txt"}),
                               ("search_files", {"pattern": "*"}), ("write_file", {"path": "/x", "content": "x"}),
                               ("delete_file", {"path": "/secret.txt"})):
                answers.append(await session.call_tool(name, {"workspace": "vault", **args}))
            try:
                await session.read_resource("warden://vault/secret.txt")
                answers.append("resource read")
            except Exception as exc:  # the SDK raises the JSON-RPC error
                answers.append(str(exc))
            return answers

    for token in (world.tokens["alice"], world.tokens["alice@paper"]):
        listed, *refused, resource = run(go(token))
        assert "vault" not in text(listed)
        for answer in refused:
            assert answer.is_error and "permission denied" in text(answer), text(answer)
            assert SECRET not in text(answer)
        assert "permission denied" in resource
    assert (world.path("vault") / "secret.txt").read_text() == SECRET
    # bob, who holds it, does reach it: the refusals above were about alice.
    bob = run(go(world.tokens["bob"]))
    assert "vault" in text(bob[0]) and SECRET in text(bob[1])


def test_a_grant_revoked_mid_session_stops_at_the_next_call(served: tuple[World, str]) -> None:
    """An identity token acting through a grant: the next tool call after the revocation is an
    error result saying so. A grant token itself: its next request is refused at the door (401)."""
    world, url = served
    identity = world.cli("bot", "register", "dave")
    grant = world.cli("grant", "paper", "dave", "--permissions", "read")
    accessor = next(row["accessor"] for row in json.loads(world.cli("grants", "paper", "--json"))["data"]
                    if row["bot"] == "dave")

    async def go() -> tuple[Any, Any]:
        async with http_session(url, identity) as session:
            before = await session.call_tool("list_directory", {"workspace": "paper", "path": "/drafts"})
            world.cli("revoke", "paper", "--accessor", accessor)
            after = await session.call_tool("list_directory", {"workspace": "paper", "path": "/drafts"})
            return before, after

    before, after = run(go())
    assert not before.is_error, text(before)
    assert after.is_error and "permission denied (grant.none)" in text(after)
    refused = httpx.post(url, json=_initialize(), timeout=30, headers={
        "Authorization": f"Bearer {grant}", "Accept": "application/json, text/event-stream"})
    assert refused.status_code == 401


def test_an_identity_token_acts_through_its_grants_and_runs_in_the_background(served: tuple[World, str]) -> None:
    world, url = served

    async def go() -> list[Any]:
        async with http_session(url, world.tokens["alice"]) as session:
            started = await session.call_tool("exec", {"workspace": "paper", "background": True,
                                                       "cmd": ["sh", "-c", "echo ready; sleep 60"]})
            pid = started.structured_content["id"]
            for _ in range(300):  # up to ~30 s on a loaded machine: its first line, once the sandbox is up
                logs = await session.call_tool("process_logs", {"workspace": "paper", "id": pid})
                # Its stdout, not the answer's text: that names the command (`echo ready`) at once.
                if "ready" in (logs.structured_content or {}).get("stdout", ""):
                    break
                await asyncio.sleep(0.1)
            killed = await session.call_tool("process_kill", {"workspace": "paper", "id": pid})
            for _ in range(100):
                after = await session.call_tool("process_logs", {"workspace": "paper", "id": pid})
                if after.structured_content["status"] != "running":
                    break
                await asyncio.sleep(0.1)
            other = await session.call_tool("process_logs", {"workspace": "paper", "id": "nope"})
            return [started, logs, killed, after, other]

    started, logs, killed, after, other = run(go())
    assert not started.is_error, text(started)
    assert "ready" in logs.structured_content["stdout"] and logs.structured_content["status"] == "running"
    assert not killed.is_error
    assert after.structured_content["status"] != "running"
    assert other.is_error


def test_move_over_the_http_route_and_the_cli(served: tuple[World, str]) -> None:
    world, url = served
    base = url.removesuffix("/mcp")
    (world.path("paper") / "drafts" / "m1.txt").write_text("m")
    headers = {"Authorization": f"Bearer {world.tokens['alice@paper']}"}
    moved = httpx.post(f"{base}/v1/workspaces/paper/files/move", headers=headers, timeout=30,
                       json={"source": "/drafts/m1.txt", "destination": "/drafts/sub/m2.txt"})
    assert moved.status_code == 200, moved.text
    assert moved.json() == {"source": "/drafts/m1.txt", "destination": "/drafts/sub/m2.txt", "type": "file"}
    again = httpx.post(f"{base}/v1/workspaces/paper/files/move", headers=headers, timeout=30,
                       json={"source": "/drafts/sub/m2.txt", "destination": "/input/m2.txt"})
    assert again.status_code == 403 and "zone input is ro" in again.json()["error"]["message"]
    asked = httpx.post(f"{base}/v1/workspaces/paper/files/move", headers=headers, timeout=30,
                       json={"source": "/drafts/sub/m2.txt", "destination": "/final/m2.txt"})
    assert asked.status_code == 202 and asked.json()["approval"]["operation"] == "move"
    world.cli("deny", asked.json()["approval"]["id"])
    proc = subprocess.run([sys.executable, "-m", "warden", "fs", "paper", "mv", "/drafts/sub/m2.txt", "/drafts/m3.txt",
                           "--json"], env=world.environ, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["type"] == "file"
    assert (world.path("paper") / "drafts" / "m3.txt").read_text() == "m"
    (world.path("paper") / "drafts" / "taken.txt").write_text("taken")
    clash = subprocess.run([sys.executable, "-m", "warden", "fs", "paper", "mv", "/drafts/m3.txt",
                            "/drafts/taken.txt"], env=world.environ, capture_output=True, text=True, timeout=60,
                           check=False)
    assert clash.returncode == 5 and "already exists" in clash.stderr
    assert (world.path("paper") / "drafts" / "taken.txt").read_text() == "taken"


def test_the_sdks_modern_client_speaks_the_2026_protocol_over_both_transports(served: tuple[World, str]) -> None:
    """The SDK's `Client` negotiates the per-request protocol of 2026-07-28 (no handshake): the
    same tools, the same progress notifications, over HTTP and over stdio."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    world, url = served
    token = world.tokens["alice@paper"]

    async def session(client: Any) -> tuple[str, Any, Recorder]:
        recorder = Recorder()
        async with client as connected:
            listed = await connected.call_tool("list_workspaces", {})
            result = await connected.call_tool("exec", {"workspace": "paper", "cmd": ["sh", "-c", "echo a; sleep 1"]},
                                               progress_callback=recorder.progress)
            recorder.ended(result)
            return connected.session.protocol_version, listed, recorder

    async def go() -> list[tuple[str, Any, Recorder]]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            over_http = await session(Client(streamable_http_client(url, http_client=http)))
        params = StdioServerParameters(command=sys.executable, args=["-m", "warden", "mcp"],
                                       env={**world.environ, "WARDEN_TOKEN": token})
        return [over_http, await session(Client(params))]

    for version, listed, recorder in run(go()):
        assert version == "2026-07-28"
        assert "paper" in text(listed)
        kinds = [kind for kind, _, _ in recorder.events]
        assert kinds[0] == "progress" and kinds[-1] == "result"
        assert recorder.events[-1][1] - recorder.events[0][1] >= 0.7


def test_a_call_the_http_client_gives_up_on_stops_its_command(served: tuple[World, str]) -> None:
    world, url = served
    marker = world.path("paper") / "drafts" / "too-late-http.txt"

    async def go() -> None:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            with pytest.raises(Exception):  # the SDK's timeout error, whatever its class
                await session.call_tool("exec", {"workspace": "paper", "cmd": [
                    "sh", "-c", "sleep 3; echo late > drafts/too-late-http.txt"]}, read_timeout_seconds=1)
        await asyncio.sleep(4)  # past the command's own end, had it gone on

    run(go())
    assert not marker.exists()


def test_any_worker_of_a_multi_worker_server_answers(served: tuple[World, str], tmp_path: Path) -> None:
    """No session state is kept between requests, so with `serve --workers 2` a client's
    initialize and calls may each land on either worker (a new connection for each here)."""
    world, _ = served
    headers = {"Authorization": f"Bearer {world.tokens['alice@paper']}", "Connection": "close",
               "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "file_info", "arguments": {"workspace": "paper", "path": "/input/data.csv"}}}
    with ServeProcess(world.environ, tmp_path, "--workers", "2") as server:
        url = server.url + "/mcp"
        assert httpx.post(url, json=_initialize(), headers=headers, timeout=30).status_code == 200
        answers = [httpx.post(url, json=call, headers=headers, timeout=30) for _ in range(12)]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert not result["isError"] and "type: file" in result["content"][0]["text"]


def test_a_flood_of_output_is_streamed_bounded_and_said(served: tuple[World, str]) -> None:
    """A command printing far more than a client takes: the server streams at most STREAM_TOTAL
    bytes (never holding more than STREAM_PENDING waiting) and says how much it did not send."""
    from warden.interfaces.mcp.calls import STREAM_TOTAL

    world, url = served
    recorder = Recorder()

    async def go() -> None:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            result = await session.call_tool(
                "exec", {"workspace": "paper", "cmd": ["sh", "-c", "head -c 48000000 /dev/zero | tr '\\0' a"],
                         "timeout": 120}, progress_callback=recorder.progress)
            recorder.ended(result)

    run(go())
    streamed = sum(len(message) for kind, _, message in recorder.events if kind == "progress")
    assert streamed <= STREAM_TOTAL + 1000
    notes = [m for kind, _, m in recorder.events if kind == "progress" and "were not streamed" in m]
    assert len(notes) == 1 and recorder.events[-1][0] == "result"


def test_an_answer_holding_a_file_is_bounded_whatever_the_file(served: tuple[World, str]) -> None:
    # Each answer is written whole to its connection: read_file of a 20 MB sparse file (no disk)
    # was 150 MB of JSON (base64 twice, or six bytes for each NUL), and four such answers a bot
    # never read held 600 MB of the server's memory. Whole binaries and resources are at most
    # 1 MiB now, and a line past 256 Ki characters is cut, saying so.
    world, url = served
    folder = world.path("paper") / "drafts"
    with open(folder / "zeros.bin", "wb") as zeros:
        zeros.truncate(20 << 20)  # NULs: UTF-8 text of one line
    (folder / "noise.bin").write_bytes(bytes(range(256)) * 8192)  # 2 MiB, not UTF-8
    headers = {"Authorization": f"Bearer {world.tokens['alice@paper']}",
               "Accept": "application/json, text/event-stream"}

    def call(method: str, params: dict[str, Any]) -> httpx.Response:
        return httpx.post(url, json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
                          headers=headers, timeout=120)

    def read(path: str) -> httpx.Response:
        return call("tools/call", {"name": "read_file", "arguments": {"workspace": "paper", "path": path}})

    zeros_answer = read("/drafts/zeros.bin")
    assert zeros_answer.status_code == 200 and len(zeros_answer.content) < 4 << 20, len(zeros_answer.content)
    said = zeros_answer.json()["result"]
    assert not said["isError"] and "cut at 262144 of its 20971520 characters" in said["content"][0]["text"]
    noise_answer = read("/drafts/noise.bin")
    assert len(noise_answer.content) < 1 << 20
    refusal = noise_answer.json()["result"]
    assert refusal["isError"] and "over the 1 MiB read_file returns" in refusal["content"][0]["text"]
    resource = call("resources/read", {"uri": "warden://paper/drafts/zeros.bin"})
    assert len(resource.content) < 1 << 20 and "over the 1 MiB a resource read returns" in resource.text
    # Small ones come back whole, as before.
    (folder / "small.bin").write_bytes(bytes(range(256)))
    small = read("/drafts/small.bin").json()["result"]
    assert small["structuredContent"]["encoding"] == "base64" and small["structuredContent"]["size"] == 256
    whole = call("resources/read", {"uri": "warden://paper/input/data.csv"}).json()["result"]
    assert whole["contents"][0]["text"] == "a,b\n1,2\n"


def test_an_edit_of_a_file_crafted_against_difflib_answers_at_once(served: tuple[World, str]) -> None:
    """edit_file answers with a diff, and difflib's is quadratic or worse on some files: 200,000
    short lines alternating `a` with 75 others (half a megabyte) took 50 s of a server thread
    holding the GIL for one call, and a bot's 40 calls at once held every thread of the server,
    every other bot's requests waiting tens of seconds. The diff is linear now (core/diffs.py)."""
    world, url = served
    crafted = "".join("a\n" if i % 2 else f"{i % 150}\n" for i in range(200_000)) + "UNIQUE\n"
    (world.path("paper") / "drafts" / "alt.txt").write_text(crafted)

    async def go() -> Any:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            return await session.call_tool("edit_file", {"workspace": "paper", "path": "/drafts/alt.txt",
                                                         "old": "UNIQUE", "new": "CHANGED"})

    began = time.monotonic()
    edited = run(go())
    assert time.monotonic() - began < 10
    assert not edited.is_error
    assert "-UNIQUE\n+CHANGED" in text(edited)
    assert (world.path("paper") / "drafts" / "alt.txt").read_text() == crafted.replace("UNIQUE", "CHANGED")


def test_an_edit_of_a_file_over_its_bound_is_refused_before_it_is_read(served: tuple[World, str]) -> None:
    """edit_file holds the file whole a few times over (bytes, text, the changed text; a diff of
    all its lines, ~60 bytes a line, came on top): a 60 MB file of short lines took 25 s and
    gigabytes for one call, and a bot makes such files with one exec. Over MAX_EDIT: refused."""
    world, url = served
    big = world.path("paper") / "drafts" / "big.txt"
    big.write_text("a\n" * (4 << 20) + "UNIQUE\n")  # 8 MiB and a line

    async def go() -> Any:
        async with http_session(url, world.tokens["alice@paper"]) as session:
            return await session.call_tool("edit_file", {"workspace": "paper", "path": "/drafts/big.txt",
                                                         "old": "UNIQUE", "new": "CHANGED"})

    refused = run(go())
    assert refused.is_error and "over the 8 MiB edit_file changes" in text(refused), text(refused)
    assert big.read_text().endswith("UNIQUE\n")
