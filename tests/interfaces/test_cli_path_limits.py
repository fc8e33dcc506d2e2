"""Path lists cannot hand a sandbox Warden's own state, and a deny above a workspace holds in runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli
from warden.core.policy import state_exposure

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]


@pytest.mark.parametrize(("path", "exposed"), [
    ("/", True),
    ("/srv", True),                       # contains the home
    ("/srv/warden", True),                # the home itself
    ("/srv/warden/keys", True),           # its keys
    ("/srv/warden/layers/py3.11-x", True),
    ("/srv/warden/workspaces", True),     # every workspace at once
    ("/srv/warden/workspaces/other", False),  # one workspace: the user's call to share it
    ("/srv/warden-data", False),          # a sibling that only shares a prefix
    ("/opt/tools", False),
])
def test_state_exposure(path: str, exposed: bool) -> None:
    why = state_exposure(path, home="/srv/warden", workspaces_root="/srv/warden/workspaces")
    assert (why is not None) is exposed, why


def test_workspaces_outside_the_home_are_guarded_too() -> None:
    assert state_exposure("/data", home="/srv/warden", workspaces_root="/data/ws") is not None
    assert state_exposure("/data/ws/one", home="/srv/warden", workspaces_root="/data/ws") is None


@pytest.fixture
def cli(environ: dict[str, str]) -> Cli:
    client = Cli(environ)
    assert client("create", "a1", "--json").code == 0
    return client


def test_allowing_a_parent_of_the_home_is_refused_and_changes_nothing(cli: Cli, home: Path) -> None:
    before = (home / "sandbox_paths.json").read_bytes() if (home / "sandbox_paths.json").exists() else None
    for path in ("/", str(home.parent), str(home / "keys"), ""):
        r = cli("sandbox", "add", path, "--json")
        assert r.code == 2, (path, r.stdout, r.stderr)
        assert r.json["error"]["code"] == "invalid"
    after = (home / "sandbox_paths.json").read_bytes() if (home / "sandbox_paths.json").exists() else None
    assert before == after


def test_a_hand_written_allow_of_root_never_mounts_the_keys(cli: Cli, home: Path) -> None:
    (home / "sandbox_paths.json").write_text(json.dumps({"allowed_paths": ["/"], "denied_paths": []}))
    r = cli("run", "a1", "--", "sh", "-c", f"cat {home}/keys/master.key >/dev/null 2>&1 && echo LEAK || echo hidden")
    assert r.code == 0, r.stderr
    assert r.stdout == "hidden\n"
    assert "not mounting the allowed path /" in r.stderr


@pytest.mark.parametrize("denied", ["/", "workspaces", "workspaces/a1"])
def test_a_deny_on_the_workspace_or_above_refuses_the_run(cli: Cli, home: Path, denied: str) -> None:
    target = denied if denied.startswith("/") else str(home / denied)
    assert cli("sandbox", "remove", target).code == 0
    r = cli("run", "a1", "--json", "--", "sh", "-c", "echo w > t.txt")
    assert r.code == 126, (r.stdout, r.stderr)
    assert r.json["error"]["code"] == "denied" and "denied path" in r.json["error"]["message"]
    assert not (home / "workspaces" / "a1" / "t.txt").exists()
    assert cli("sandbox", "check", str(home / "workspaces" / "a1" / "t.txt"),
               "--op", "write").code == 3
