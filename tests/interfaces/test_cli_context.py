"""Terminals' current workspaces through the real CLI: two terminals keep their own, `@NAME`,
back and forward, `with` leaving the current one, commands using it when none is named
(through the home's daemon too), and what is said when there is none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.shared_home


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return ("ctx-alpha-web", "ctx-beta")


def _made(cli: Cli, names: tuple[str, str]) -> None:
    for name in names:
        if cli("info", name).code != 0:
            assert cli("create", name, "--template", "minimal").code == 0


def test_two_terminals_keep_their_own_current_workspace(cli: Cli, names: tuple[str, str]) -> None:
    _made(cli, names)
    left, right = {"WARDEN_TERMINAL": "left"}, {"WARDEN_TERMINAL": "right"}
    said = cli("@ctx-alpha", env=left)  # an unambiguous part of the name is enough
    assert said.code == 0 and said.stdout.startswith("ctx-alpha-web  ")
    assert cli("ws", "set", "ctx-beta", env=right).code == 0
    assert cli("ws", "current", "--json", env=left).json["data"]["name"] == "ctx-alpha-web"
    assert cli("ws", "current", "--json", env=right).json["data"]["name"] == "ctx-beta"
    ran = cli("run", "--", "sh", "-c", "pwd", env=left)
    assert ran.code == 0 and ran.stdout.strip().endswith("/ctx-alpha-web")
    assert cli("info", "--json", env=right).json["data"]["name"] == "ctx-beta"
    assert cli("info", "-w", "ctx-alpha-web", "--json", env=right).json["data"]["name"] == "ctx-alpha-web"


def test_back_forward_history_and_with(cli: Cli, names: tuple[str, str]) -> None:
    _made(cli, names)
    term = {"WARDEN_TERMINAL": "walker"}
    for name in ("ctx-alpha-web", "ctx-beta"):
        assert cli("ws", "set", name, env=term).code == 0
    assert cli("ws", "back", env=term).stdout.startswith("ctx-alpha-web")
    assert cli("ws", "forward", env=term).stdout.startswith("ctx-beta")
    assert cli("ws", "forward", env=term).code == 2  # nothing later
    assert [r["name"] for r in cli("ws", "history", "--json", env=term).json["data"]] == ["ctx-beta", "ctx-alpha-web"]
    other = cli("with", "ctx-alpha-web", "--", "sh", "-c", "pwd", env=term)
    assert other.code == 0 and other.stdout.strip().endswith("/ctx-alpha-web")
    assert cli("ws", "current", "--json", env=term).json["data"]["name"] == "ctx-beta"  # unchanged
    listed = cli("ws", "list", "--json", env=term).json["data"]
    assert [r["name"] for r in listed if r["current"]] == ["ctx-beta"]


def test_without_a_current_workspace_a_command_says_what_to_do(cli: Cli, names: tuple[str, str]) -> None:
    _made(cli, names)
    fresh = {"WARDEN_TERMINAL": "fresh"}
    run = cli("run", "--json", "--", "true", env=fresh)
    assert run.code == 126 and run.json["error"]["code"] == "invalid"
    assert "warden ws set NAME" in run.json["error"]["message"]
    info = cli("info", env=fresh)
    assert info.code == 2 and info.stderr.count("\n") == 1
    none = cli("ws", "current", env=fresh)
    assert none.code == 4 and none.stderr.startswith("warden: no current workspace")
    twice = cli("info", "ctx-beta", "-w", "ctx-alpha-web", env=fresh)
    assert twice.code == 2 and "name it once" in twice.stderr
    vague = cli("ws", "set", "ctx", env=fresh)
    assert vague.code == 2 and "ctx-alpha-web, ctx-beta" in vague.stderr
    missing = cli("@nope", env=fresh)
    assert missing.code == 4 and cli("ws", "current", env=fresh).code == 4  # nothing changed


def test_a_path_names_the_workspace_holding_it_and_a_destroyed_current_one_is_said(cli: Cli, home: Path) -> None:
    made = cli("create", "ctx-gone", "--template", "minimal", "--json")
    folder = Path(made.json["data"]["path"])
    (folder / "src").mkdir()
    term = {"WARDEN_TERMINAL": "pathy"}
    assert cli("ws", "set", str(folder / "src"), env=term).stdout.startswith("ctx-gone")
    assert cli("destroy", "ctx-gone", "--yes", "--no-archive").code == 0
    gone = cli("ws", "current", "--json", env=term)
    assert gone.code == 4 and "ctx-gone no longer exists" in gone.json["error"]["message"]
    assert cli("run", "--", "true", env=term).code == 126
    outside = cli("ws", "set", str(home), env=term)
    assert outside.code == 4 and "no workspace holds" in outside.stderr
    # A link (a bot's, in its workspace) into another workspace does not carry the person there.
    made = cli("create", "ctx-linked", "--template", "minimal", "--json")
    linked = Path(made.json["data"]["path"])
    (linked / "other").symlink_to(home / "workspaces")
    assert cli("ws", "set", str(linked / "other" / "ctx-beta"), env=term).stdout.startswith("ctx-linked")


def test_the_terminal_file_is_the_persons_own(cli: Cli, home: Path, names: tuple[str, str]) -> None:
    _made(cli, names)
    assert cli("ws", "set", "ctx-beta", env={"WARDEN_TERMINAL": "odd/../name"}).code == 0
    files = sorted(p.name for p in (home / "terminals").glob("*.json"))
    assert all("/" not in f and not f.startswith(".") for f in files)
    for path in (home / "terminals").glob("*.json"):
        assert path.stat().st_mode & 0o077 == 0
        json.loads(path.read_text())


def test_a_chosen_terminal_name_never_passes_for_a_shell_session(cli: Cli, home: Path,
                                                                 names: tuple[str, str]) -> None:
    _made(cli, names)
    assert cli("ws", "set", "ctx-beta", env={"WARDEN_TERMINAL": "sid123-456"}).code == 0
    files = {p.stem for p in (home / "terminals").glob("*.json")}
    assert "sid123-456" not in files and any(f.startswith("h") for f in files)
