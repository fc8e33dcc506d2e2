"""A terminal's context (pure): set, back, forward like a browser; matching typed names."""

from __future__ import annotations

import pytest

from warden.core.context import MAX_HISTORY, TerminalContext, match_workspace
from warden.core.errors import InvalidInput, NotFound


def test_back_and_forward_walk_the_history_and_a_new_set_drops_the_forward_part() -> None:
    ctx = TerminalContext().set("a").set("b").set("c")
    assert ctx.current == "c" and ctx.recent == ("c", "b", "a")
    ctx = ctx.back().back()
    assert ctx.current == "a"
    with pytest.raises(InvalidInput, match="no earlier"):
        ctx.back()
    assert ctx.forward().current == "b"
    ctx = ctx.set("d")  # after going back, a new one drops b and c from the way forward
    assert ctx.history == ("a", "d") and ctx.current == "d"
    with pytest.raises(InvalidInput, match="no later"):
        ctx.forward()
    assert ctx.set("d") == ctx  # setting the current one again changes nothing


def test_history_is_bounded_and_survives_a_round_trip() -> None:
    ctx = TerminalContext()
    for i in range(MAX_HISTORY + 10):
        ctx = ctx.set(f"w{i}")
    assert len(ctx.history) == MAX_HISTORY and ctx.current == f"w{MAX_HISTORY + 9}"
    assert TerminalContext.from_json(ctx.to_json()) == ctx
    for bad in ({"history": "x", "position": 0}, {"history": ["a"], "position": 5}, {"history": [1], "position": 0},
                {}):
        assert TerminalContext.from_json(bad) == TerminalContext()


def test_a_typed_name_matches_exactly_then_by_prefix_then_by_part_and_never_guesses() -> None:
    names = ["web-app", "web-api", "notes", "scratch"]
    assert match_workspace("notes", names) == "notes"
    assert match_workspace("scr", names) == "scratch"
    assert match_workspace("app", names) == "web-app"
    with pytest.raises(InvalidInput, match="web-api, web-app"):
        match_workspace("web", names)
    with pytest.raises(NotFound, match="did you mean notes"):
        match_workspace("notse", names)
    with pytest.raises(NotFound):
        match_workspace("scr", names, exact_only=True)


def test_saved_states_never_keep_a_secret_and_read_back_only_what_was_written() -> None:
    from warden.core.context import StateSnapshot, check_variables, export_blob, parse_blob, restore_lines

    for name in ("API_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "SSH_KEY", "GITHUB_AUTH"):
        with pytest.raises(InvalidInput, match="looks like a secret"):
            check_variables([name])
    with pytest.raises(InvalidInput, match="looks like a secret"):
        check_variables(["OPENAI"], secrets=["OPENAI"])  # a Warden secret's own name
    check_variables(["NODE_ENV", "PYTHON_VERSION", "KEYBOARD_LAYOUT"])
    for bad in ({"label": "x", "created": "t", "cwd": "/a/../../etc"}, {"label": "../x", "created": "t"},
                {"label": "x", "created": "t", "env": {"API_TOKEN": "v"}}, {"label": "x", "created": "t",
                                                                           "env": {"A": "b\x00"}}):
        with pytest.raises(InvalidInput):
            StateSnapshot.from_json(bad)
    snap = StateSnapshot("s", "t", "/src", {"A": "it's"})
    assert restore_lines("/w", snap) == "cd -- /w/src\nexport A='it'\"'\"'s'"
    # fish reads backslashes inside single quotes: a value ending in one must not leave a quote open.
    tail = StateSnapshot("s", "t", "/", {"A": "it's", "B": "x\\"})
    assert restore_lines("/w", tail, "fish") == "cd -- '/w'\nset -gx A 'it\\'s'\nset -gx B 'x\\\\'"
    assert parse_blob(export_blob({"name": "n"}))["name"] == "n"
    for junk in ("", "!!!", "e30=", "x" * 300_000):
        with pytest.raises(InvalidInput):
            parse_blob(junk)


def test_a_saved_state_never_holds_what_steers_the_shell_and_an_import_names_no_file() -> None:
    from warden.core.context import StateSnapshot, check_variables, parse_blob

    for name in ("PATH", "PROMPT_COMMAND", "BASH_ENV", "LD_PRELOAD", "PYTHONSTARTUP", "NODE_OPTIONS", "GIT_DIR",
                 "fish_greeting", "PS1"):
        with pytest.raises(InvalidInput, match="steers the shell"):
            check_variables([name])
    with pytest.raises(InvalidInput, match="looks like a secret"):
        check_variables(["GH_PAT"])
    with pytest.raises(InvalidInput, match="looks like a secret"):
        check_variables(["REPO"], values={"REPO": "https://me:hunter2@example.com/x.git"})
    with pytest.raises(InvalidInput):
        StateSnapshot.from_json({"label": "x", "created": "t", "env": {"PROMPT_COMMAND": "touch /tmp/p"}})
    with pytest.raises(InvalidInput):
        parse_blob("W" * 20 + "=")  # not base64 JSON
    import base64

    with pytest.raises(InvalidInput):  # a deeply nested document is refused, not a crash
        parse_blob(base64.b64encode(b"[" * 150_000).decode())
