"""A mistyped command line gets one line saying what was meant, through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.used_home  # a copy of a home whose registry is made (tests/conftest.py `home`)


def test_a_mistyped_command_names_the_nearest_one(cli: Cli) -> None:
    result = cli("craete", "x")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr == ("warden: unknown command 'craete'; did you mean 'create'? "
                             "(`warden --help` lists them)\n")
    as_json = cli("craete", "x", "--json")
    assert as_json.code == 2 and as_json.stderr == ""
    assert as_json.json == {"ok": False, "error": {"code": "invalid", "message": result.stderr[8:-1]}}


def test_a_word_like_no_command_gets_no_guess(cli: Cli) -> None:
    result = cli("zzzz")
    assert result.code == 2
    assert result.stderr == "warden: unknown command 'zzzz' (`warden --help` lists them)\n"


@pytest.mark.parametrize(("args", "says"), [
    (["fs", "notes", "wirte", "/x"], "unknown command 'fs wirte'; did you mean 'fs write'? (`warden fs --help`"),
    (["sandbox", "ad", "/x"], "unknown command 'sandbox ad'; did you mean 'sandbox add'?"),
    (["run", "w", "--timout", "5", "--", "true"], "unknown option '--timout'; did you mean '--timeout'? "
                                                   "(see `warden run --help`)"),
    (["run", "w", "--timout=5", "--", "true"], "did you mean '--timeout'?"),
    (["list", "--jsn"], "unknown option '--jsn'; did you mean '--json'?"),
])
def test_mistyped_subcommands_and_options_name_the_nearest(cli: Cli, args: list[str], says: str) -> None:
    result = cli(*args)
    assert result.code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("warden: ") and not result.stderr.startswith("warden: warden")
    assert says in result.stderr
    as_json = cli(*args[:2], "--json", *args[2:])
    assert as_json.code == 2 and as_json.json["error"]["code"] == "invalid"
    assert says in as_json.json["error"]["message"]


@pytest.mark.parametrize(("args", "meant"), [
    (["ls"], "unknown command 'ls'; did you mean 'list'?"),  # by spelling: 'logs'
    (["exec", "w", "--", "true"], "did you mean 'run'?"),
    (["remove", "w"], "did you mean 'destroy'?"),  # by spelling: 'revoke'
    (["fs", "notes", "read", "/x"], "unknown command 'fs read'; did you mean 'fs cat'? (`warden fs --help`"),
    (["fs", "notes", "delete", "/x"], "did you mean 'fs rm'?"),
    (["bot", "remove", "x"], "did you mean 'bot rm'?"),
    (["config", "list"], "unknown command 'config list'; did you mean 'config show'?"),  # met as a newcomer
    (["fs", "notes", "list", "/"], "did you mean 'fs ls'?"),
])
def test_a_word_another_tool_uses_names_wardens_command(cli: Cli, args: list[str], meant: str) -> None:
    """Docker's, git's, the shell's and the SDK's (`ws.files.read`) words are what a newcomer types
    first: their nearest spelling here is another command, or none."""
    result = cli(*args)
    assert result.code == 2 and result.stderr.count("\n") == 1
    assert meant in result.stderr


def test_help_as_a_command_points_to_the_help_not_to_a_lookalike(cli: Cli) -> None:
    result = cli("help")
    assert result.code == 2
    assert result.stderr == "warden: unknown command 'help' (`warden --help` lists them)\n"  # not 'shell'


@pytest.mark.parametrize(("args", "fixed"), [
    (["run", "w", "python", "-V"], "warden run w -- python -V"),
    (["run", "w", "--timeout", "5", "python", "-c", "print(1)"], "warden run w --timeout 5 -- python -c 'print(1)'"),
])
def test_a_command_not_after_the_double_dash_is_shown_where_it_goes(cli: Cli, args: list[str], fixed: str) -> None:
    result = cli(*args)
    assert result.code == 2
    assert result.stderr == f"warden: put the command after --: {fixed} (see `warden run --help`)\n"


def test_a_hint_names_the_command_as_typed(cli: Cli) -> None:
    """Not `warden fs name write --help`, which reads as a command named `name`."""
    result = cli("fs", "notes", "write")
    assert result.code == 2
    assert result.stderr == ("warden: the following arguments are required: path "
                             "(see `warden fs notes write --help`)\n")


def test_version_is_printed_without_a_home(cli: Cli) -> None:
    from warden.interfaces.cli.main import version

    result = cli("--version", env={"WARDEN_HOME": "/nonexistent/never-made"})
    assert (result.code, result.stdout, result.stderr) == (0, f"warden {version()}\n", "")
    assert cli("--version", "--json").json == {"ok": True, "data": {"version": version()}}


def test_version_loads_no_command_module() -> None:
    import subprocess
    import sys

    code = ("import sys; from warden.interfaces.cli.main import main; main(['--version']); "
            "print(sorted(m for m in sys.modules if m.startswith(('warden.interfaces.cli.cmd_', 'warden.bootstrap'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_list_loads_nothing_it_does_not_use(tmp_path: Path) -> None:
    # `warden list` is asked often and should answer at once (issue #15: start-up within 50 ms):
    # the audit chain's hashlib, the git guard, safe file access (ctypes) and subprocess are
    # imported by the commands that use them, not by a read of the registry.
    import subprocess
    import sys

    heavy = ("hashlib", "ctypes", "subprocess", "warden.adapters.gitguard", "warden.adapters.safefs",
             "warden.services.runs", "sqlalchemy", "httpx")
    code = ("import sys; from warden.interfaces.cli.main import main\n"
            "try:\n    main(['list'])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    env = {**os.environ, "WARDEN_HOME": str(tmp_path / "home"), "WARDEN_DAEMON": "0"}
    subprocess.run([sys.executable, "-m", "warden", "init"], env=env, capture_output=True, check=True)
    (tmp_path / "notes").mkdir()
    subprocess.run([sys.executable, "-m", "warden", "ws", "set", str(tmp_path / "notes")], env=env,
                   capture_output=True, check=True)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    assert str(tmp_path / "notes") in done.stdout  # it did list the workspace


def test_an_option_nearest_only_to_help_is_not_said_to_mean_help(cli: Cli) -> None:
    """`warden checkpoint w --label x` was answered "did you mean '--help'?"."""
    result = cli("checkpoint", "w", "--label", "before")
    assert result.code == 2 and "did you mean" not in result.stderr, result.stderr
    assert result.stderr.startswith("warden: unrecognized arguments: --label") and result.stderr.count("\n") == 1
    assert "`warden checkpoint --help`" in result.stderr, result.stderr
