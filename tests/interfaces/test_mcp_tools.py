"""The MCP layer's pure parts: the argument check a model's call meets first, the rewording of
refusals into filesystem words, and which HTTP requests get an event stream."""

from __future__ import annotations

import pytest

from warden.core.errors import Denied, InvalidInput, NotFound, Pending
from warden.interfaces.mcp.server import _asks_progress
from warden.interfaces.mcp.texts import pending_text, plain, refusal_text
from warden.interfaces.mcp.tools import TOOLS, check_arguments


def test_every_tool_schema_is_a_closed_object_whose_required_fields_exist() -> None:
    for tool in TOOLS:
        schema = tool.input_schema()
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"]), tool.name
        assert tool.description and "zone" not in tool.description.lower()


def test_a_left_out_workspace_is_the_grant_tokens_one_or_a_refusal_saying_how_to_name_it() -> None:
    _, args = check_arguments("exec", {"cmd": ["ls"]}, "paper")
    assert args == {"cmd": ["ls"], "workspace": "paper"}
    _, args = check_arguments("exec", {"workspace": "other", "cmd": ["ls"]}, "paper")
    assert args["workspace"] == "other"  # named: as given (the grant check refuses it later)
    with pytest.raises(InvalidInput, match='exec needs workspace; give it as "workspace": "NAME"'):
        check_arguments("exec", {"cmd": ["ls"]})
    schemas = {tool.name: tool.input_schema("paper") for tool in TOOLS}
    assert schemas["directory_tree"]["required"] == ["workspace"] and "'paper'" in str(schemas["file_info"])
    assert schemas["create_workspace"] == next(t for t in TOOLS if t.name == "create_workspace").input_schema()


@pytest.mark.parametrize(("name", "arguments", "said"), [
    ("nope", {}, "no tool 'nope'"),
    ("no\x1b[2J", {}, r"no tool 'no\\x1b[2J'; the tools"),  # escaped once (it was twice: \\x1b)
    ("exec", {"workspace": "w"}, "exec needs cmd"),
    ("exec", {"workspace": "w", "cmd": "ls -l"}, 'cmd must be an array of strings, one per argument: ["ls", "-l"]'),
    ("exec", {"workspace": "w", "cmd": "ls | wc -l"}, '["sh", "-c", "ls | wc -l"]'),
    ("exec", {"workspace": "w", "cmd": []}, "cmd must not be empty"),
    ("exec", {"workspace": "w", "cmd": ["ls", 3]}, "cmd[1] must be a string"),
    ("exec", {"workspace": "w", "cmd": ["ls"], "timeout": 0}, "timeout must be more than 0"),
    ("exec", {"workspace": "w", "cmd": ["ls"], "background": "yes"}, "background must be a boolean"),
    ("read_file", {"workspace": "w", "path": "/a", "limit": True}, "limit must be an integer"),
    ("exec", {"workspace": "w", "cmd": ["ls"], "timeout": "9"}, "timeout must be a number"),
    ("list_workspaces", {"workspace": "w"}, "list_workspaces takes no argument workspace; it takes none"),
    ("list_workspaces", {f"k{i}\x1b[2J": 1 for i in range(9)}, r"takes no argument k0\\x1b[2J, k1"),
    ("read_file", {"workspace": "w", "path": "/a", "offset": 0}, "offset must be at least 1"),
    ("write_file", {"workspace": "w", "path": "/a", "content": "x", "mode": "0777"}, "takes no argument mode"),
    ("write_file", {"workspace": "w", "path": "/a", "content": "x", "encoding": "hex"}, "must be one of"),
    ("create_workspace", {"name": "../x"}, "does not match"),
    ("edit_file", {"workspace": "w", "path": "/a", "old": "", "new": "x"}, "old must not be empty"),
])
def test_a_bad_call_is_refused_saying_what_to_mend(name: str, arguments: dict[str, object], said: str) -> None:
    with pytest.raises(InvalidInput, match=said.replace("[", r"\[").replace("]", r"\]")):
        check_arguments(name, arguments)


def test_a_good_call_passes_unchanged() -> None:
    tool, args = check_arguments("exec", {"workspace": "w", "cmd": ["pytest", "-q"], "timeout": 30})
    assert tool.name == "exec" and args == {"workspace": "w", "cmd": ["pytest", "-q"], "timeout": 30}


@pytest.mark.parametrize(("said", "shown"), [
    ("write /input/a refused (deny: zone input is ro)", "write /input/a refused (deny: /input is read-only)"),
    ("write /input/a in workspace w refused (deny: zone input is ro); a zone's rules are set in the workspace's "
     ".warden/zones.yaml", "write /input/a in workspace w refused (deny: /input is read-only)"),
    ("delete /keep/a refused (deny: zone keep blocks delete)",
     "delete /keep/a refused (deny: /keep does not allow delete)"),
    ("(deny: no granted zone holds /x/a (granted: drafts, final))",
     "(deny: /x/a is outside the folders this token may use (/drafts, /final))"),
    ("grant acc_1 is limited to zones drafts and cannot reach the whole workspace",
     "grant acc_1 may use only the folders /drafts, not the whole workspace"),
    ("something about zones and a zone", "something about folders and a folder"),
    # Names are left as they are: a file, a folder, a workspace, an error in the person's zones.yaml.
    ("/w/.warden/zones.yaml: zone drafts: unknown field(s) write", "/w/.warden/zones.yaml: folder drafts: "
     "unknown field(s) write"),
    ("no such file or directory: /zone/a.txt", "no such file or directory: /zone/a.txt"),
    ("this token may not use workspace time-zones", "this token may not use workspace time-zones"),
])
def test_refusals_are_reworded_into_folders(said: str, shown: str) -> None:
    assert plain(said) == shown


def test_permission_refusals_name_their_rule_and_the_fix() -> None:
    text = refusal_text(Denied("permission denied", rule="grant.permission"), tool="write_file",
                        workspace="paper", bot="bob")
    assert "(grant.permission)" in text and "`write`" in text and "warden grant paper bob" in text
    gone = refusal_text(Denied("permission denied", rule="workspace.gone"), tool="read_file", workspace="x", bot="b")
    other = refusal_text(Denied("permission denied", rule="grant.workspace"), tool="read_file", workspace="x", bot="b")
    assert gone.replace("workspace.gone", "R") == other.replace("grant.workspace", "R")  # existence not told
    missing = refusal_text(NotFound("no such file or directory: /a"), tool="read_file", workspace="w", bot=None)
    assert missing.startswith("not_found:") and "list_directory" in missing


def test_a_protected_workspace_file_is_said_to_be_no_tokens_to_change() -> None:
    rule = "deny: protected workspace file /.warden"
    text = refusal_text(Denied(f"write /.warden/zones.yaml in workspace w refused ({rule})", rule=rule),
                        tool="write_file", workspace="w", bot="b")
    assert text.startswith("denied: write /.warden/zones.yaml") and rule in text
    assert "no token may change them" in text and "elsewhere in the workspace" in text


def test_a_pending_change_says_it_is_not_done_and_how_a_person_approves() -> None:
    exc = Pending("…", approval={"id": "apr_abcdefghijklmnop", "status": "pending", "operation": "write",
                                 "path": "/final/a", "zone": "final", "rule": "allow: zone final (rw)"})
    text, shown = pending_text(exc)
    assert "NOT been done" in text and "warden approve apr_abcdefghijklmnop" in text
    assert "zone" not in text and "zone" not in shown and "rule" not in shown


@pytest.mark.parametrize(("body", "streams"), [
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","_meta":{"progressToken":1}}}', True),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file"}}', False),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"params":{"_meta":{"progressToken":"t"}}}]',
     True),
    (b"not json", True),
])
def test_only_a_request_that_asked_for_progress_gets_an_event_stream(body: bytes, streams: bool) -> None:
    assert _asks_progress(body) is streams
