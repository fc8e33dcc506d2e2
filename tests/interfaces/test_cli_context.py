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
    assert cli("ws", env=right).stdout.startswith("ctx-beta  ")  # bare `ws` is `ws current`
    assert cli("ws", env={"WARDEN_TERMINAL": "elsewhere"}).code == 4  # none current there: said so
    ran = cli("run", "--", "sh", "-c", "pwd", env=left)
    assert ran.code == 0 and ran.stdout.strip().endswith("/ctx-alpha-web")
    assert cli("info", "--json", env=right).json["data"]["name"] == "ctx-beta"
    assert cli("info", "-w", "ctx-alpha-web", "--json", env=right).json["data"]["name"] == "ctx-alpha-web"
    # After a global flag too, as other commands are: `warden --home H @NAME`.
    flagged = cli("--home", cli.environ["WARDEN_HOME"], "@ctx-beta", env={"WARDEN_TERMINAL": "flagged"})
    assert flagged.code == 0 and flagged.stdout.startswith("ctx-beta  "), flagged.stderr
    assert cli("--json", "@ctx-alpha", env={"WARDEN_TERMINAL": "flagged"}).json["data"]["name"] == "ctx-alpha-web"
    assert cli("run", "ctx-beta", "--", "echo", "@ctx-alpha").stdout.strip() == "@ctx-alpha"  # an argument stays one


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
    outside = cli("ws", "set", str(home), env=term)  # Warden's own home is never adopted
    assert outside.code == 2 and "holds or lies inside Warden's home" in outside.stderr
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


def test_snapshot_restore_export_import_and_the_shell_functions(cli: Cli, home: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    made = cli("create", "ctx-state", "--template", "minimal", "--json")
    root = Path(made.json["data"]["path"])
    (root / "src").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/feature-auth\n")
    term = {"WARDEN_TERMINAL": "stateful", "NODE_ENV": "development", "API_TOKEN": "hunter2"}
    assert cli("@ctx-state", env=term).code == 0
    env = {**cli.environ, **term}
    saved = subprocess.run([sys.executable, "-m", "warden", "ws", "snapshot", "before", "--env", "NODE_ENV",
                            "--json"], cwd=root / "src", env=env, capture_output=True, text=True, check=False)
    assert saved.returncode == 0, saved.stderr
    assert {k: v for k, v in __import__("json").loads(saved.stdout)["data"].items() if k != "created"} == {
        "workspace": "ctx-state", "label": "before", "cwd": "/src", "env": {"NODE_ENV": "development"},
        "git_branch": "feature-auth"}
    secret = cli("ws", "snapshot", "--env", "API_TOKEN", env=term)
    assert secret.code == 2 and "looks like a secret" in secret.stderr
    lines = cli("ws", "restore", "before", env=term)
    assert lines.code == 0 and lines.stdout.splitlines() == [f"cd -- {root}/src", "export NODE_ENV=development"]
    # Through the shell functions: `warden cd` and `warden ws restore` act on this very shell.
    script = ('eval "$(warden shell-init bash)"; cd /; warden cd; pwd; unset NODE_ENV; warden ws restore; pwd; '
              'echo "env=$NODE_ENV"; echo "prompt=$(warden_ws)"')
    bash = subprocess.run(["bash", "-c", script], env={**env, "PATH": f"{Path(sys.executable).parent}:"
                                                       f"{env['PATH']}"}, capture_output=True, text=True,
                          check=False)
    assert bash.stdout.splitlines() == [str(root), f"{root}/src", "env=development", "prompt=ctx-state"], bash.stderr
    # Another home takes the workspace's template and saved states from one line on stdin.
    blob = cli("ws", "export", env=term).stdout
    other_home = tmp_path / "other-home"
    other = {**cli.environ, "WARDEN_HOME": str(other_home), "WARDEN_TERMINAL": "elsewhere"}
    imported = subprocess.run([sys.executable, "-m", "warden", "ws", "import", "--name", "copied"], input=blob,
                              env=other, capture_output=True, text=True, check=False, timeout=300)
    assert imported.returncode == 0, imported.stderr
    there = subprocess.run([sys.executable, "-m", "warden", "ws", "restore", "before"], env=other,
                           capture_output=True, text=True, check=False)
    assert there.returncode == 0 and there.stdout.splitlines()[0].endswith("/copied/src")
    bad = subprocess.run([sys.executable, "-m", "warden", "ws", "import"], input="not a blob", env=other,
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "not an exported workspace state" in bad.stderr


def test_an_import_names_no_file_and_never_lands_on_a_workspace_of_this_home(cli: Cli, names: tuple[str, str]) -> None:
    import base64
    import json

    _made(cli, names)

    def blob(**state: object) -> str:
        return base64.b64encode(json.dumps({"kind": "warden-workspace-state/1", **state}).encode()).decode()

    hostile = cli("ws", "import", "--name", "ctx-hostile", input=blob(name="x", template="/etc/passwd"))
    assert hostile.code == 2 and "not a template name" in hostile.stderr and "root:" not in hostile.stderr
    taken = cli("ws", "import", input=blob(name="ctx-beta", template="minimal"))
    assert taken.code == 5 and "exists here" in taken.stderr


def test_the_fish_functions_go_to_the_workspace(cli: Cli, names: tuple[str, str]) -> None:
    import shutil
    import subprocess
    import sys

    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    _made(cli, names)
    term = {"WARDEN_TERMINAL": "fishy"}
    assert cli("ws", "set", "ctx-beta", env=term).code == 0
    env = {**cli.environ, **term, "PATH": f"{Path(sys.executable).parent}:{cli.environ['PATH']}"}
    out = subprocess.run(["fish", "-c", "warden shell-init fish | source; cd /; warden cd; pwd; echo (warden_ws)"],
                         env=env, capture_output=True, text=True, check=False, timeout=60)
    lines = out.stdout.splitlines()
    assert lines[0].endswith("/ctx-beta") and lines[1] == "ctx-beta", out.stderr


def test_an_existing_folder_is_adopted_in_place_and_destroy_leaves_its_files(cli: Cli, home: Path,
                                                                            tmp_path: Path) -> None:
    project = tmp_path / "my project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("print('mine')\n")
    term = {"WARDEN_TERMINAL": "adopter"}
    adopted = cli("ws", "set", str(project), "--json", env=term)
    assert adopted.code == 0, adopted.stderr
    name = adopted.json["data"]["name"]
    assert name == "my-project" and adopted.json["data"]["path"] == str(project)
    ran = cli("run", "--", "python3", "src/app.py", env=term)
    assert ran.code == 0 and ran.stdout == "mine\n"
    again = cli("ws", "set", str(project / "src"), env=term)
    assert again.stdout.startswith(name) and "adopted" not in again.stderr  # found, not adopted again
    other = tmp_path / "other"
    other.mkdir()
    said = cli("ws", "set", str(other), env=term)  # a new workspace made by what reads as a switch is said
    assert said.code == 0 and f"adopted {other} as a new workspace other" in said.stderr, said.stderr
    assert "destroy other --yes" in said.stderr and cli("destroy", "other", "--yes").code == 0
    assert cli("archive", name).code == 5  # never packed or moved
    forgot = cli("destroy", name, "--yes", env=term)
    assert forgot.code == 0 and "its folder and files stay" in forgot.stdout
    assert (project / "src" / "app.py").read_text() == "print('mine')\n"
    refusals = (("/", "system folder"), ("/etc", "system folder"), (str(home.parent), "home folder"),
                (str(home), "Warden's home"))
    for refused, why in refusals:
        out = cli("ws", "set", refused, env=term)
        assert out.code == 2 and "cannot adopt" in out.stderr and why in out.stderr, out.stderr
