"""Terminal locks through the real CLI: a lock by one terminal refuses the other's runs (126,
`locked`) and changes (5) but not its reads; its own terminal goes on; unlock is the holder's;
takeover is audited; expiry, and the end of the holding shell session, free the workspace."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import Cli
from tests.support.waiting import wait_until

pytestmark = pytest.mark.shared_home

A, B = {"WARDEN_TERMINAL": "term-a"}, {"WARDEN_TERMINAL": "term-b"}


@pytest.fixture
def name(cli: Cli, request: pytest.FixtureRequest) -> str:
    made = "lk-" + request.node.name.removeprefix("test_")[:40].replace("_", "-")
    assert cli("create", made, "--template", "minimal").code == 0
    return made


def test_a_lock_keeps_other_terminals_out_of_changes_but_not_reads(cli: Cli, name: str) -> None:
    locked = cli("lock", name, "--reason", "release prep", "--json", env=A)
    assert locked.code == 0 and locked.json["data"]["terminal"] == "term-a"
    run = cli("run", name, "--json", "--", "true", env=B)
    assert run.code == 126 and run.json["error"]["code"] == "locked"
    assert "locked by terminal term-a (release prep)" in run.json["error"]["message"]
    write = cli("fs", name, "write", "/x.txt", input="x", env=B)
    assert write.code == 5 and "warden takeover" in write.stderr
    assert cli("fs", name, "ls", "/", env=B).code == 0  # reads go on
    assert cli("run", name, "--", "true", env=A).code == 0  # the holder works as ever
    assert cli("fs", name, "write", "/mine.txt", input="m", env=A).code == 0
    assert cli("unlock", name, env=B).code == 5  # not B's to give back
    listed = cli("locks", "--json", env=B).json["data"]
    assert [(r["workspace"], r["terminal"], r["this_terminal"]) for r in listed if r["workspace"] == name] == [
        (name, "term-a", False)]
    assert cli("unlock", name, env=A).code == 0
    assert cli("run", name, "--", "true", env=B).code == 0


def test_takeover_is_audited_and_the_old_holder_is_then_refused(cli: Cli, name: str) -> None:
    assert cli("lock", name, env=A).code == 0
    took = cli("takeover", name, "--json", env=B)
    assert took.code == 0 and took.json["data"]["from"] == "term-a"
    assert cli("run", name, "--", "true", env=A).code == 126
    events = cli("audit", "--json", "--limit", "20").json["data"]
    assert any(e["action"] == "workspace.takeover" and e["target"] == name and e["detail"]["from"] == "term-a"
               for e in events)
    # The old holder's refused run is a decision like any other refusal: it left no trace.
    refused = [e for e in events if e["action"] == "run" and e["target"] == name and e["decision"] == "deny"]
    assert [(e["rule"], e["result"], e["detail"]["argv"]) for e in refused] == [("lock.terminal", "refused", ["true"])]
    assert cli("unlock", name, env=B).code == 0


def test_a_lock_lapses_at_its_ttl_and_with_its_shell_session(cli: Cli, name: str) -> None:
    assert cli("lock", name, "--ttl", "2s", env=A).code == 0
    assert cli("run", name, "--", "true", env=B).code == 126
    wait_until(lambda: cli("run", name, "--", "true", env=B).code == 0, timeout=10, interval=0.3,
               message="the lock did not lapse after its ttl")
    # A lock taken by a shell session (no WARDEN_TERMINAL) ends with that session.
    env = {k: v for k, v in cli.environ.items() if k != "WARDEN_TERMINAL"}
    done = subprocess.run(["setsid", "-w", sys.executable, "-m", "warden", "lock", name, "--ttl", "1h"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert cli("run", name, "--", "true", env=B).code == 0  # that session is gone: so is its lock


def test_bad_lock_requests(cli: Cli, name: str) -> None:
    assert cli("lock", name, "--ttl", "0s", env=A).code == 2
    assert cli("lock", name, "--reason", "two\nlines", env=A).code == 2
    assert cli("lock", "no-such-ws", env=A).code == 4
    assert cli("unlock", name, env=A).code == 5  # not locked
