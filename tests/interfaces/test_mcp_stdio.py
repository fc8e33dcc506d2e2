"""`warden mcp` over stdio, driven by the official `mcp` SDK's client: the tool list a model
reads, a scripted agent session, the path attacks of the reference filesystem server's CVEs, and
refusals that name the rule without Warden's internal words."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mcp import SECRET, World, make_world, stdio_session, text

BINDING = ["list_workspaces", "create_workspace", "exec", "process_logs", "process_kill", "read_file",
           "write_file", "edit_file", "list_directory", "directory_tree", "search_files", "file_info",
           "delete_file", "move_file"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield make_world(tmp_path_factory.mktemp("mcp-stdio"))


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_tool_list_is_what_interfaces_md_binds_with_schemas_for_a_model(world: World) -> None:
    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.list_tools(), await session.list_resource_templates()

    tools, templates = run(go())
    assert [tool.name for tool in tools.tools] == BINDING
    schemas = {tool.name: tool.input_schema for tool in tools.tools}
    # A grant token is for one workspace: a call may leave it out (test below); the schema says
    # which it is, and keeps it required, as INTERFACES.md shapes the tools.
    assert schemas["exec"]["required"] == ["workspace", "cmd"]
    assert "'paper', the one workspace this token is for" in schemas["exec"]["properties"]["workspace"]["description"]
    assert schemas["exec"]["properties"]["cmd"]["items"] == {"type": "string"}
    assert set(schemas["exec"]["properties"]) == {"workspace", "cmd", "cwd", "timeout", "background"}
    assert schemas["edit_file"]["required"] == ["workspace", "path", "old", "new"]
    assert schemas["move_file"]["required"] == ["workspace", "source", "destination"]
    assert schemas["create_workspace"]["required"] == ["name"]
    by_name = {tool.name: tool for tool in tools.tools}
    assert by_name["read_file"].annotations.read_only_hint is True
    assert by_name["delete_file"].annotations.destructive_hint is True
    # Seed 003: a model sees folders, never Warden's word for them, nor hard-coded folder names.
    for tool in tools.tools:
        words = (tool.description or "") + str(tool.input_schema)
        assert "zone" not in words.lower(), tool.name
        assert "/workspace/" not in words and "/cache" not in words, tool.name
    assert templates.resource_templates[0].uri_template == "warden://{workspace}/{+path}"


def test_a_scripted_agent_session_creates_writes_tests_edits_and_reads(world: World) -> None:
    """What a coding agent does: create → write → run the tests (fail) → edit → run (pass) → read.

    (The edit keeps the file's size and lands within the second of the first run: Python's
    bytecode cache, checked by size and whole-second mtime, then still holds the old code. Hence
    an edit that changes the size; a model could hit this too, see the README.)"""
    module = "def add(a, b):\n    return a - b\n"
    tests = ("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")

    async def go() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with stdio_session(world, world.tokens["carol"]) as session:
            seen["create"] = await session.call_tool("create_workspace", {"name": "agent", "template": "minimal"})
            seen["listed"] = await session.call_tool("list_workspaces", {})
            await session.call_tool("write_file", {"workspace": "agent", "path": "/calc.py", "content": module})
            await session.call_tool("write_file", {"workspace": "agent", "path": "test_calc.py", "content": tests})
            run_tests = {"workspace": "agent", "cmd": ["python", "-m", "unittest", "-q"]}
            seen["red"] = await session.call_tool("exec", run_tests)
            seen["edit"] = await session.call_tool("edit_file", {"workspace": "agent", "path": "/calc.py",
                                                                 "old": "a - b", "new": "a + b  # fixed"})
            seen["green"] = await session.call_tool("exec", run_tests)
            seen["read"] = await session.call_tool("read_file", {"workspace": "agent", "path": "/calc.py"})
            seen["tree"] = await session.call_tool("directory_tree", {"workspace": "agent"})
            seen["search"] = await session.call_tool("search_files", {"workspace": "agent", "pattern": "*.py",
                                                                      "contains": "assertEqual"})
        return seen

    seen = run(go())
    assert not seen["create"].is_error, text(seen["create"])
    assert "agent" in text(seen["listed"]) and "execute" in text(seen["listed"])
    assert seen["red"].structured_content["exit_code"] == 1, text(seen["red"])
    assert "FAILED" in seen["red"].structured_content["stderr"]
    assert "-    return a - b" in text(seen["edit"]) and "+    return a + b  # fixed" in text(seen["edit"])
    assert seen["green"].structured_content["exit_code"] == 0, text(seen["green"])
    assert text(seen["read"]) == "def add(a, b):\n    return a + b  # fixed\n"
    assert "calc.py" in text(seen["tree"]) and ".venv/  (not expanded)" in text(seen["tree"])
    assert "/test_calc.py" in text(seen["search"]) and "/calc.py\n" not in text(seen["search"])
    assert (world.path("agent") / "calc.py").read_text() == "def add(a, b):\n    return a + b  # fixed\n"
    # The same audit as over HTTP: the tool calls, the file service's events, the runs, one chain.
    events = json.loads(world.cli("audit", "--workspace", "agent", "--limit", "200", "--json"))["data"]
    actions = {(event["action"], event["actor"].split("@")[0]) for event in events}
    assert {("mcp.exec", "bot:carol"), ("fs.write", "bot:carol"), ("run", "bot:carol")} <= actions
    assert world.cli("audit", "verify")


def test_a_grant_token_may_leave_out_its_one_workspace_and_an_identity_token_is_told_how_to_name_one(
        world: World) -> None:
    """A newcomer called exec with no `workspace` and got `invalid: exec needs workspace`, nothing
    more. A grant token is for exactly one workspace: that one is meant. A bot's identity token may
    act on several: the refusal says how to name one, and its tool list still requires it."""

    async def go() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            seen["exec"] = await session.call_tool("exec", {"cmd": ["sh", "-c", "pwd; ls input"]})
            seen["read"] = await session.call_tool("read_file", {"path": "/input/data.csv"})
        async with stdio_session(world, world.tokens["carol"]) as session:
            seen["identity"] = await session.call_tool("exec", {"cmd": ["pwd"]})
            seen["tools"] = await session.list_tools()
        return seen

    seen = run(go())
    assert not seen["exec"].is_error, text(seen["exec"])
    assert seen["exec"].structured_content["exit_code"] == 0
    assert str(world.path("paper")) in text(seen["exec"]) and "data.csv" in text(seen["exec"])
    assert not seen["read"].is_error and "a,b" in text(seen["read"])
    refused = text(seen["identity"])
    assert seen["identity"].is_error and "exec needs workspace" in refused
    assert '"workspace": "NAME"' in refused and "list_workspaces" in refused
    schemas = {tool.name: tool.input_schema for tool in seen["tools"].tools}
    assert schemas["exec"]["required"] == ["workspace", "cmd"]
    assert "default" not in schemas["exec"]["properties"]["workspace"]["description"]


def test_edit_file_refuses_no_match_and_several_matches_saying_so(world: World) -> None:
    target = world.path("paper") / "drafts" / "twice.txt"
    target.write_text("x = 1\nx = 1\n")

    async def go() -> list[Any]:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            call = {"workspace": "paper", "path": "/drafts/twice.txt", "new": "y"}
            return [await session.call_tool("edit_file", {**call, "old": "x = 1"}),
                    await session.call_tool("edit_file", {**call, "old": "z = 9"})]

    several, none = run(go())
    assert several.is_error and "occurs 2 times" in text(several)
    assert none.is_error and "does not occur" in text(none)
    assert target.read_text() == "x = 1\nx = 1\n"


def test_read_file_gives_line_ranges_and_base64_for_binary(world: World) -> None:
    root = world.path("paper") / "drafts"
    (root / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 3001)))
    (root / "blob.bin").write_bytes(bytes(range(256)))

    async def go() -> list[Any]:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return [await session.call_tool("read_file", {"workspace": "paper", "path": "/drafts/long.txt"}),
                    await session.call_tool("read_file", {"workspace": "paper", "path": "/drafts/long.txt",
                                                          "offset": 2999, "limit": 5}),
                    await session.call_tool("read_file", {"workspace": "paper", "path": "/drafts/blob.bin"})]

    first, tail, blob = run(go())
    assert "lines 1-2000 of 3000" in text(first) and "offset=2001" in text(first)
    assert text(tail).endswith("line 2999\nline 3000\n")
    assert blob.structured_content["encoding"] == "base64"
    assert base64.b64decode(blob.structured_content["content"]) == bytes(range(256))


@pytest.mark.parametrize("path", [
    "/../paper-evil/secret.txt",          # `..` out of the workspace (CVE-2025-53110's prefix sibling)
    "../paper-evil/secret.txt",
    "/drafts/../../paper-evil/secret.txt",
    "/link-to-sibling",                   # a link to the sibling's file (CVE-2025-53109)
    "/linked-dir/secret.txt",             # a folder that is a link to the sibling
    str(Path("/paper-evil/secret.txt")),  # an absolute path names the workspace's own /paper-evil
])
def test_path_attacks_through_read_file_never_reach_the_sibling(world: World, path: str) -> None:
    paper = world.path("paper")
    sibling = world.path("paper-evil")
    assert str(sibling).startswith(str(paper))  # the string-prefix trap is really there
    with_links = [(paper / "link-to-sibling", sibling / "secret.txt"), (paper / "linked-dir", sibling)]
    for link, target in with_links:
        if not link.is_symlink():
            link.symlink_to(target)

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("read_file", {"workspace": "paper", "path": path})

    result = run(go())
    assert result.is_error
    assert SECRET not in text(result)


@pytest.mark.parametrize(("path", "said"), [
    ("/../paper-evil/planted.txt", "climbs above the workspace root"),
    ("/linked-dir/planted.txt", "symbolic link"),
    ("/link-to-sibling", "symbolic link"),
])
def test_path_attacks_through_write_file_never_land_outside(world: World, path: str, said: str) -> None:
    paper, sibling = world.path("paper"), world.path("paper-evil")
    for link, target in [(paper / "link-to-sibling", sibling / "secret.txt"), (paper / "linked-dir", sibling)]:
        if not link.is_symlink():
            link.symlink_to(target)

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("write_file", {"workspace": "paper", "path": path, "content": "pwned"})

    result = run(go())
    assert result.is_error and said in text(result)
    assert not (sibling / "planted.txt").exists()
    assert (sibling / "secret.txt").read_text() == SECRET


def test_a_hard_link_to_a_neighbours_file_is_not_written_through(world: World) -> None:
    paper, sibling = world.path("paper"), world.path("paper-evil")
    os.link(sibling / "secret.txt", paper / "drafts" / "hard.txt")

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("write_file", {"workspace": "paper", "path": "/drafts/hard.txt",
                                                          "content": "pwned"})

    result = run(go())
    assert result.is_error and "hard links" in text(result)
    assert (sibling / "secret.txt").read_text() == SECRET


def test_a_search_reads_a_bounded_amount_of_text(world: World) -> None:
    # 5,000 hard links to one 1 MiB text file cost the bot 1 MiB of disk, and each search_files
    # with `contains` read all of them: 5 GiB, 19 s of the server's CPU a call. At most 32 MiB now.
    folder = world.path("paper") / "drafts" / "links"
    folder.mkdir()
    (folder / "f0").write_text(("x" * 99 + "\n") * 10_000)  # just under 1 MiB
    for i in range(1, 60):
        os.link(folder / "f0", folder / f"f{i}")
    (folder / "z-last").write_text("needle\n")

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("search_files", {"workspace": "paper", "pattern": "*",
                                                            "path": "/drafts/links", "contains": "needle"})

    result = run(go())
    assert not result.is_error, text(result)
    assert result.structured_content["truncated"] is True
    assert "32 MiB of text read" in text(result)


def test_list_directory_answers_a_bounded_number_of_entries(world: World) -> None:
    # A folder of 200,000 empty files was one answer of tens of MB: at most 1,000 entries now.
    folder = world.path("paper") / "drafts" / "crowd"
    folder.mkdir()
    for i in range(1200):
        (folder / f"f{i:04}").touch()

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("list_directory", {"workspace": "paper", "path": "/drafts/crowd"})

    result = run(go())
    assert not result.is_error, text(result)
    assert len(result.structured_content["entries"]) == 1000 and result.structured_content["truncated"] is True
    assert "200 more entries not shown (at most 1000)" in text(result)


def test_refusals_name_the_rule_and_what_to_do_in_folder_words(world: World) -> None:
    async def go() -> list[Any]:
        async with stdio_session(world, world.tokens["bob@drafts"]) as session:
            return [await session.call_tool("list_directory", {"workspace": "paper", "path": "/"}),
                    await session.call_tool("write_file", {"workspace": "paper", "path": "/input/x", "content": "x"}),
                    await session.call_tool("exec", {"workspace": "paper", "cmd": ["true"]}),
                    await session.call_tool("read_file", {"workspace": "vault", "path": "/secret.txt"}),
                    await session.call_tool("create_workspace", {"name": "mine"}),
                    await session.call_tool("read_file", {"workspace": "paper", "path": "/drafts/nope"})]

    root, outside, command, vault, create, missing = run(go())
    assert text(root) == "drafts/"  # the folders this grant may use are the top-level directories
    assert outside.is_error and "/input/x is outside the folders this token may use (/drafts)" in text(outside)
    assert command.is_error and "grant.permission" in text(command) and "does not include `execute`" in text(command)
    assert "warden grant paper bob --permissions" in text(command)
    # The bob@drafts token is for paper: the vault is another grant's, never reached by this one.
    assert vault.is_error and "permission denied (grant.workspace)" in text(vault)
    assert create.is_error and "token.not_identity" in text(create)
    assert missing.is_error and "not_found" in text(missing) and "list_directory" in text(missing)
    for result in (root, outside, command, vault, create, missing):
        assert "zone" not in text(result).lower()


def test_a_refusal_names_the_callers_own_paths_as_given_never_reworded(world: World) -> None:
    """Refusals are reworded into folder words, but a path the model named is its own: "/zone/a.txt"
    told back as "/folder/a.txt" would send it after a file that does not exist."""
    async def go() -> list[Any]:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return [await session.call_tool("read_file", {"workspace": "paper", "path": "/time zone/zones.txt"}),
                    await session.call_tool("delete_file", {"workspace": "paper", "path": "/zone/a.txt"}),
                    await session.call_tool("read_file", {"workspace": "paper", "path": "/drafts/my zone file"})]

    spaced, plain_path, word_in_name = run(go())
    assert spaced.is_error and "/time zone/zones.txt" in text(spaced), text(spaced)
    assert plain_path.is_error and "/zone/a.txt" in text(plain_path), text(plain_path)
    assert word_in_name.is_error and "/drafts/my zone file" in text(word_in_name), text(word_in_name)


def test_a_read_only_folder_says_read_only(world: World) -> None:
    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("write_file", {"workspace": "paper", "path": "/input/data.csv",
                                                          "content": "x"})

    result = run(go())
    assert result.is_error and "/input is read-only" in text(result) and "zone" not in text(result)


def test_a_missing_or_bad_token_stops_before_serving(world: World) -> None:
    for token, said in (("", "no token"), ("wdn_" + "x" * 43, "was refused")):
        proc = subprocess.run([sys.executable, "-m", "warden", "mcp"], env={**world.environ, "WARDEN_TOKEN": token},
                              input=b"", capture_output=True, timeout=60, check=False)
        assert proc.returncode == 3, proc.stderr
        assert said in proc.stderr.decode() and proc.stdout == b""


def test_exec_takes_its_folder_as_a_workspace_path(world: World) -> None:
    (world.path("paper") / "drafts" / "here.txt").write_text("here")

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("exec", {"workspace": "paper", "cmd": ["cat", "here.txt"], "cwd": "/drafts"})

    result = run(go())
    assert result.structured_content["exit_code"] == 0 and result.structured_content["stdout"] == "here"


def test_a_command_without_network_is_told_what_an_mcp_bot_can_do(world: World) -> None:
    """An MCP exec has no network to ask for and no tool adds packages: Warden's last line was the
    HTTP API's (`"network": {"allow": …}`, `POST /v1/workspaces/NAME/install`), which a model here
    cannot send; it names the person's command for this workspace instead."""
    reach = "import socket; socket.create_connection(('pypi.org', 443), 5)"

    async def go() -> Any:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            return await session.call_tool("exec", {"workspace": "paper", "cmd": ["python3", "-c", reach]})

    result = run(go())
    stderr = result.structured_content["stderr"]
    assert result.structured_content["exit_code"] != 0, stderr
    assert stderr.rstrip().endswith("warden: the sandbox has no network, and an MCP exec cannot ask for it; for "
                                    "packages, ask the person to run `warden install paper PACKAGE...`"), stderr
    assert "/v1/" not in stderr and '"network"' not in stderr


def test_a_call_the_client_gives_up_on_stops_its_command(world: World) -> None:
    marker = world.path("paper") / "drafts" / "too-late.txt"

    async def go() -> None:
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            with pytest.raises(Exception):  # the SDK's timeout error, whatever its class
                await session.call_tool("exec", {"workspace": "paper", "cmd": [
                    "sh", "-c", "sleep 3; echo late > drafts/too-late.txt"]}, read_timeout_seconds=1)
            await asyncio.sleep(4)  # past the command's own end, had it gone on
            listed = await session.call_tool("list_directory", {"workspace": "paper", "path": "/drafts"})
            assert "too-late.txt" not in text(listed)

    run(go())
    assert not marker.exists()
    # Its event says why it was killed: "ok" with status 137 alone read as the command's own end.
    events = json.loads(world.cli("audit", "--workspace", "paper", "--limit", "30", "--json"))["data"]
    ended = [e for e in events if e["action"] == "mcp.exec"]
    assert ended and ended[-1]["detail"].get("client_gone") is True, ended[-1:]


def test_a_client_that_closes_stdin_mid_exec_ends_it_without_an_internal_error(world: World) -> None:
    """A client that sends its calls and closes stdin (a script piping requests in, an agent
    quitting) ends the server while a command runs: the command goes, its output has nowhere to
    go, and that is no internal error; the run's intent gets its outcome in the audit."""
    calls = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "exec", "arguments": {
                 "workspace": "paper", "cmd": ["sh", "-c", "echo early; sleep 3; echo late > drafts/closed.txt"]}}}]
    proc = subprocess.run([sys.executable, "-m", "warden", "mcp"],
                          env={**world.environ, "WARDEN_TOKEN": world.tokens["alice@paper"]},
                          input="".join(json.dumps(call) + "\n" for call in calls).encode(),
                          capture_output=True, timeout=60, check=False)
    assert b"internal error" not in proc.stderr, proc.stderr
    assert not (world.path("paper") / "drafts" / "closed.txt").exists()
    events = json.loads(world.cli("audit", "--workspace", "paper", "--limit", "200", "--json"))["data"]
    started = [event["detail"]["run_id"] for event in events if event["action"] == "run.start"
               and event["detail"].get("argv", [""])[-1].endswith("drafts/closed.txt")]
    # The end of stdin cancels the call: before its command started (on a busy machine), nothing
    # ran and no run is audited; after, the command is killed and its run has its outcome.
    assert len(started) <= 1, started
    for run_id in started:
        ended = [event for event in events if event["action"] in ("run", "run.lost")
                 and event["detail"].get("run_id") == run_id]
        assert len(ended) == 1, [event["action"] for event in events[-6:]]
    mcp = [event for event in events if event["action"] == "mcp.exec" and event["detail"].get("program") == "sh"]
    assert all(event["result"] != "internal" for event in mcp), mcp


def test_a_client_that_stops_reading_mid_exec_ends_it_without_an_internal_error(world: World) -> None:
    """A client that closes its end of the server's stdout has left as surely as one that closes
    stdin: the next write (here the exec's progress) fails with EPIPE, which the SDK's stdio task
    group raised as an ExceptionGroup, said as "internal error" with exit status 1. Now the
    session ends as a closed stdin ends it (0, nothing said), the command goes, and its run gets
    its outcome in the audit."""
    marker = world.path("paper") / "drafts" / "unread.txt"
    proc = subprocess.Popen([sys.executable, "-m", "warden", "mcp"],
                            env={**world.environ, "WARDEN_TOKEN": world.tokens["alice@paper"]},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}})
        assert b'"id":1' in proc.stdout.readline().replace(b" ", b"")
        proc.stdout.close()  # the client reads no more, and keeps stdin open
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "exec", "_meta": {"progressToken": 7}, "arguments": {
                "workspace": "paper", "cmd": ["sh", "-c", "echo early; sleep 3; echo late > drafts/unread.txt"]}}})
        time.sleep(2)  # its progress ("early") met the closed pipe meanwhile
        proc.stdin.close()  # the reader of stdin, in a thread, cannot be cancelled: it ends here
        status = proc.wait(timeout=60)
        said = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stderr.close()
    assert (status, said) == (0, b""), said.decode(errors="replace")
    time.sleep(3.5)  # past the command's own end, had it gone on
    assert not marker.exists()
    events = json.loads(world.cli("audit", "--workspace", "paper", "--limit", "200", "--json"))["data"]
    started = [event["detail"]["run_id"] for event in events if event["action"] == "run.start"
               and event["detail"].get("argv", [""])[-1].endswith("drafts/unread.txt")]
    assert len(started) == 1
    ended = [event for event in events if event["action"] in ("run", "run.lost")
             and event["detail"].get("run_id") == started[0]]
    assert len(ended) == 1, [event["action"] for event in events[-6:]]


def test_a_terminals_lock_refuses_a_bot_started_from_that_terminal_as_any_bot(world: World) -> None:
    """`warden mcp` acted for the terminal it was started from: a bot there passed that
    terminal's lock (which refuses the same bot over HTTP), and a bot refused elsewhere was told
    to take the lock over with a person's command. A bot is nobody's terminal."""
    here = {"WARDEN_TERMINAL": "mcp-lock-test"}
    subprocess.run([sys.executable, "-m", "warden", "lock", "paper", "--reason", "release"],
                   env={**world.environ, **here}, check=True, capture_output=True, timeout=60)
    try:
        async def go() -> Any:
            async with stdio_session(world, world.tokens["alice@paper"], **here) as session:
                return await session.call_tool("write_file", {"workspace": "paper", "path": "/drafts/locked.txt",
                                                              "content": "x"})

        refused = run(go())
        assert refused.is_error and "locked by its person's terminal (release)" in text(refused), text(refused)
        assert "takeover" not in text(refused)
        assert not (world.path("paper") / "drafts" / "locked.txt").exists()
    finally:
        subprocess.run([sys.executable, "-m", "warden", "unlock", "paper"], env={**world.environ, **here},
                       check=True, capture_output=True, timeout=60)


class _Wire:
    """`warden mcp` driven line by line, past the SDK's client (which sends only good lines): a
    line sent as given, each reply read as it comes; initialized on entry, and on exit its stdin
    closed and its exit status and stderr kept."""

    def __init__(self, world: World) -> None:
        import queue
        import threading

        self.proc = subprocess.Popen([sys.executable, "-m", "warden", "mcp"],
                                     env={**world.environ, "WARDEN_TOKEN": world.tokens["alice@paper"]},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        out = self.proc.stdout
        threading.Thread(target=lambda: [self.replies.put(json.loads(line)) for line in out], daemon=True).start()
        self.ended: tuple[int, bytes] | None = None

    def send(self, line: bytes) -> None:
        self.stdin.write(line + b"\n")
        self.stdin.flush()

    def reply(self, timeout: float = 60) -> dict[str, Any]:
        return self.replies.get(timeout=timeout)

    def __enter__(self) -> _Wire:
        self.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                              "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "1"}}}).encode())
        assert self.reply()["id"] == 1
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stderr is not None
        self.stdin.close()
        status = self.proc.wait(timeout=60)
        self.ended = (status, self.proc.stderr.read())
        self.proc.stderr.close()


def test_a_malformed_line_is_answered_as_json_rpc_says_and_the_session_goes_on(world: World) -> None:
    """A line that is not JSON, JSON that is not one request object (a number, a batch, an
    object without a method) and a huge line of junk each got no reply at all (the SDK drops
    them), so a client waited on its request for ever. JSON-RPC 2.0 §5.1: -32700 for a parse
    error, -32600 for an invalid request, with the request's id where it can be read (else
    null); the server answers the next request as before."""
    with _Wire(world) as wire:
        for line in (b"not json", b"42", b'[{"jsonrpc": "2.0", "id": 8, "method": "ping"}]',
                     b'{"jsonrpc": "2.0", "id": 9}', b'{"jsonrpc": "1.0", "id": "ten", "method": "ping"}',
                     b"{" * 4_000_000, b"   "):
            wire.send(line)
        wire.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}).encode())
        got = [wire.reply() for _ in range(7)]
        assert wire.proc.poll() is None
    codes = [(reply["id"], reply.get("error", {}).get("code")) for reply in got]
    assert codes == [(None, -32700), (None, -32600), (None, -32600), (9, -32600), ("ten", -32600),
                     (None, -32700), (3, None)], got
    assert got[-1]["result"] == {} and all(reply["jsonrpc"] == "2.0" for reply in got)
    assert wire.ended is not None and wire.ended == (0, b""), wire.ended


def _peak_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_line_past_api_max_body_is_dropped_as_read_and_answered_without_holding_it(world: World) -> None:
    """The SDK read each stdin line whole: a client sending 160 MiB without a newline made
    `warden mcp` hold all of it (and copies) before answering. A line past `api.max_body` (16 MiB,
    as an HTTP request's body) is now read on to its newline a little at a time and dropped,
    answered -32700 naming the bound, and the session goes on: the server's peak memory grows by
    about two bounds (it grew by 480 MiB before)."""
    with _Wire(world) as wire:
        wire.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode())
        assert wire.reply()["id"] == 2
        before = _peak_kib(wire.proc.pid)
        chunk = b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "' + b"a" * (1 << 20)
        for _ in range(160):  # 160 MiB, no newline until the end
            wire.stdin.write(chunk)
        wire.send(b'"}}')
        too_long = wire.reply(timeout=120)
        wire.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}).encode())
        after = wire.reply()
        grown = _peak_kib(wire.proc.pid) - before
    assert too_long["error"]["code"] == -32700 and too_long["id"] is None, too_long
    assert "longer than 16777216 bytes (api.max_body)" in too_long["error"]["message"], too_long
    assert after == {"jsonrpc": "2.0", "id": 3, "result": {}}, after
    assert grown < 48 * 1024, f"the server's peak memory grew by {grown} KiB for a 160 MiB line"
    assert wire.ended is not None and wire.ended == (0, b""), wire.ended


def test_a_line_of_too_many_json_values_is_answered_without_being_parsed(world: World) -> None:
    """Within api.max_body, a line of a million small lists cost the SDK's parser seconds and
    hundreds of MiB (the garbage collector walking them all); it is counted first
    (core/bodies.py), answered -32700 naming the bound, and the session goes on."""
    with _Wire(world) as wire:
        many = b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": [' + b",".join([b"[]"] * 1_000_000)
        wire.send(many + b"]}}")
        refused = wire.reply(timeout=60)
        wire.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}).encode())
        after = wire.reply()
    assert refused["error"]["code"] == -32700 and refused["id"] is None, refused
    assert "more than 100000 JSON values" in refused["error"]["message"], refused
    assert after == {"jsonrpc": "2.0", "id": 3, "result": {}}, after


def test_warden_mcp_answers_initialize_without_loading_fastapi(world: World) -> None:
    """`warden mcp` uses the file services and no HTTP route; it once loaded FastAPI and every
    route model at start (through interfaces/http/files.py), a tenth to a third of a second of a
    start-up a newcomer timed at 15 s on a loaded machine. Python's own import log says."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "1"}}}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "warden", "mcp"],
                          input=json.dumps(initialize) + "\n", capture_output=True, text=True, timeout=120,
                          env={**world.environ, "WARDEN_TOKEN": world.tokens["alice@paper"]}, check=False)
    assert json.loads(proc.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "warden", proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "warden.interfaces.mcp.server" in imported  # the log is there
    assert "fastapi" not in imported and "warden.interfaces.http.routes" not in imported
