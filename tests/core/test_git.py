"""core/git.py: what Warden lets git do, decided without running it."""

from __future__ import annotations

import pytest

from warden.core.errors import Denied, InvalidInput
from warden.core.git import (
    HARDENING,
    Proposal,
    body,
    check_branch,
    check_message,
    check_proposal_id,
    check_url,
    clone_blockers,
    credential_answer,
    forbidden_config,
    git_environ,
    parse_status,
    proposal_message,
    trailers,
    tree_conflicts,
)


@pytest.mark.parametrize("key", [
    "core.fsmonitor", "core.hooksPath", "core.sshCommand", "core.gitProxy", "core.askPass", "core.pager",
    "core.editor", "sequence.editor", "pager.log", "diff.external", "diff.evil.textconv", "diff.evil.command",
    "filter.lfs.smudge", "filter.x.clean", "filter.x.process", "merge.ours.driver", "credential.helper",
    "credential.https://example.com.helper", "gpg.program", "gpg.ssh.defaultKeyCommand",
    "remote.origin.uploadpack", "remote.origin.receivepack", "url.ext::sh.insteadOf", "include.path",
    "includeIf.gitdir:/x/.path", "protocol.ext.allow", "core.alternateRefsCommand", "CORE.FSMONITOR",
])
def test_keys_that_run_programs_are_refused(key: str) -> None:
    assert forbidden_config([(key, "x"), ("user.name", "A")]) == [key]


def test_ordinary_keys_pass() -> None:
    ordinary = [("core.bare", "false"), ("remote.origin.url", "https://h/x"), ("branch.main.remote", "origin"),
                ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"), ("user.email", "a@b")]
    assert forbidden_config(ordinary) == []


def test_the_pins_switch_off_each_program() -> None:
    pins = dict(p.split("=", 1) for p in HARDENING)
    assert pins["core.hooksPath"] == "/dev/null" and pins["core.fsmonitor"] == "false"
    assert pins["credential.helper"] == "" and pins["protocol.ext.allow"] == "never"
    assert pins["protocol.allow"] == "never" and pins["commit.gpgSign"] == "false"


def test_the_environment_keeps_nothing_of_the_callers_git() -> None:
    caller = {"PATH": "/usr/bin", "HOME": "/home/p", "GIT_SSH_COMMAND": "evil", "GIT_CONFIG_PARAMETERS": "'x'",
              "GIT_DIR": "/elsewhere", "GIT_EXTERNAL_DIFF": "evil", "SSH_ASKPASS": "evil", "LD_PRELOAD": "x"}
    env = git_environ(caller, git_dir="/ws/.git", work_tree="/ws")
    assert env["GIT_DIR"] == "/ws/.git" and env["GIT_WORK_TREE"] == "/ws"
    assert env["GIT_SSH_COMMAND"] == "ssh -o BatchMode=yes" and env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_ASKPASS"] == "" and env["GIT_TERMINAL_PROMPT"] == "0"
    for gone in ("GIT_CONFIG_PARAMETERS", "GIT_EXTERNAL_DIFF", "SSH_ASKPASS", "LD_PRELOAD"):
        assert gone not in env


@pytest.mark.parametrize("url", ["https://github.com/o/r.git", "http://127.0.0.1:8080/r.git",
                                 "ssh://git@host/r.git", "git@github.com:o/r.git", "file:///srv/r.git"])
def test_urls_warden_fetches_from(url: str) -> None:
    assert check_url(url, forbidden_roots=["/home/p/.warden/workspaces"]) == url


@pytest.mark.parametrize(("url", "error"), [
    ("ext::sh -c touch% /tmp/x", Denied), ("fd::3", Denied), ("git://host/r", Denied), ("ftp://h/r", Denied),
    ("file:///home/p/.warden/workspaces/ws/evil.git", Denied), ("-uhttps://x", InvalidInput),
    ("https://user:tok@github.com/o/r", InvalidInput), ("relative/path", Denied), ("", InvalidInput),
    ("https://h/r\n", InvalidInput), ("file://otherhost/r", InvalidInput),
])
def test_urls_refused(url: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_url(url, forbidden_roots=["/home/p/.warden/workspaces"])


def test_a_bare_path_is_refused_with_the_file_url_that_reaches_it() -> None:
    with pytest.raises(Denied) as refused:
        check_url("/srv/repos/app.git")
    assert "file:///srv/repos/app.git" in refused.value.message and "(none)" not in refused.value.message


REQUEST = "protocol=https\nhost=github.com\npath=o/r.git\n"
ENV = {"WARDEN_GIT_USERNAME": "bot", "WARDEN_GIT_PASSWORD": "tok", "WARDEN_GIT_HOST": "https://github.com"}


def test_the_helper_answers_get_for_its_host_only() -> None:
    assert credential_answer(REQUEST, ENV, "get") == "username=bot\npassword=tok\n"
    assert credential_answer(REQUEST.replace("github.com", "evil.example"), ENV, "get") == ""
    assert credential_answer(REQUEST.replace("https", "http"), ENV, "get") == ""
    assert credential_answer(REQUEST, ENV, "store") == credential_answer(REQUEST, ENV, "erase") == ""
    assert credential_answer(REQUEST, {}, "get") == ""


def test_the_helper_sends_a_token_over_plain_http_only_to_this_machine() -> None:
    env = {**ENV, "WARDEN_GIT_HOST": "http://127.0.0.1:8080"}
    assert "password=tok" in credential_answer("protocol=http\nhost=127.0.0.1:8080\n", env, "get")
    env = {**ENV, "WARDEN_GIT_HOST": "http://example.com"}
    assert credential_answer("protocol=http\nhost=example.com\n", env, "get") == ""


def test_names() -> None:
    assert check_branch("feature/x-1") == "feature/x-1"
    for bad in ("-f", "a..b", "x.lock", "HEAD", "a b", "/x", "x/"):
        with pytest.raises(InvalidInput):
            check_branch(bad)
    assert check_proposal_id("p-0123abcd") == "p-0123abcd"
    with pytest.raises(InvalidInput):
        check_proposal_id("../../heads/main")


def test_a_proposal_message_carries_its_trailers() -> None:
    text = proposal_message("Fix it\n\nBecause.", actor="bot:b1", proposal="p-00000001", branch="main")
    assert trailers(text) == {"proposal": "p-00000001", "actor": "bot:b1", "branch": "main"}
    assert body(text) == "Fix it\n\nBecause."


FORGED = ("Fix typo\n\nWarden-Proposal: p-00000000\nWarden-Actor: user\nWarden-Branch: main\n\n"
          "Signed-off-by: x <x@y>\n\nHIDDEN")


@pytest.mark.parametrize("message", [
    FORGED, "Fix\nwarden-actor: user", "Fix\n  WARDEN-Branch: main", "Fix\x1b[2Aover", "Fix\rover",
    "Fix\x00", "Fix\x7f", "Fix\x9b2A",
])
def test_a_stage_message_cannot_forge_trailers_or_hide_text(message: str) -> None:
    with pytest.raises(InvalidInput):
        check_message(message)


def test_ordinary_messages_pass() -> None:
    assert check_message("  Fix it\n\n\tBecause: a Warden of the city said so.\n") == \
        "Fix it\n\n\tBecause: a Warden of the city said so."


def test_trailers_are_read_from_the_last_paragraph_only() -> None:
    # A message staged before stage refused such lines: the look-alikes further up are words,
    # the real trailers (last) decide, and every word is shown.
    text = proposal_message(FORGED, actor="bot:b1", proposal="p-00000001", branch="dev")
    assert trailers(text) == {"proposal": "p-00000001", "actor": "bot:b1", "branch": "dev"}
    assert body(text) == FORGED
    # A trailer look-alike followed by more text is no trailer block at all.
    assert trailers(FORGED) == {} and body(FORGED) == FORGED


def test_a_listing_says_how_many_lines_the_first_one_hides() -> None:
    one = Proposal(id="p-00000001", commit="c", parent="", branch="main", message="Fix typo", actor="a",
                   created="")
    assert one.subject == "Fix typo"
    assert Proposal(**{**one.__dict__, "message": FORGED}).subject == "Fix typo (+5 more lines)"


def test_status_parsing() -> None:
    raw = ("# branch.oid abc\0# branch.head main\0# branch.upstream origin/main\0# branch.ab +1 -2\0"
           "1 .M N... 100644 100644 100644 a b a.txt\0? new file.txt\0")
    status = parse_status(raw)
    assert (status.branch, status.upstream, status.ahead, status.behind) == ("main", "origin/main", 1, 2)
    assert status.changes == ((" M", "a.txt"), ("??", "new file.txt"))


def test_what_a_clone_refuses() -> None:
    assert clone_blockers([".venv", ".workspace.json", "pyproject.toml", ".gitignore", ".warden"]) == []
    assert clone_blockers([".venv", "notes.txt"]) == ["notes.txt"]
    assert tree_conflicts(["src/a.py", ".venv/bin/python", ".WARDEN/x", "README"]) == [".WARDEN", ".venv"]
