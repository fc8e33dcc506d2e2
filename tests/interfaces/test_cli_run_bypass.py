"""`warden run` refuses commands that would run code the allowlist never saw (end to end)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli
from warden.api import Warden
from warden.core.errors import Denied

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.shared_home]


@pytest.fixture
def ws(cli: Cli, home: Path) -> Path:
    if cli("info", "bypass").code != 0:  # one workspace for the module (shared_home)
        assert cli("create", "bypass").code == 0
    path = home / "workspaces" / "bypass"
    (path / "evil.sh").write_text("touch pwned-by-startup\n")
    (path / ".bashrc").write_text("touch pwned-by-bashrc\n")
    return path


@pytest.fixture
def allowlist(cli: Cli) -> Iterator[None]:
    # The JSON array form of `config set` (the comma form is tested elsewhere).
    assert cli("config", "set", "sandbox.allowed_commands", '["sh", "bash", "ls", "echo"]').code == 0
    assert cli("config", "set", "sandbox.enabled", "true").code == 0
    try:
        yield
    finally:
        assert cli("config", "set", "sandbox.enabled", "false").code == 0


def test_hidden_commands_in_scripts_exit_126_and_do_not_run(cli: Cli, ws: Path, allowlist: None) -> None:
    attempts = [
        ["sh", "-c", "echo ${X:-$(touch pwned)}"],
        ["bash", "-c", "printf -v 'a[$(touch pwned)]' x"],
        ["bash", "-c", '[ -v "$1" ]', "bash", "a[$(touch pwned)]"],
        ["sh", "-c", "BASH_ENV=./evil.sh bash -c ls"],
        ["bash", "-ic", "ls"],
        ["sh", "-c", "export BASH_ENV=./evil.sh; bash -c ls"],
    ]
    for argv in attempts:
        r = cli("run", "bypass", "--", *argv)
        assert r.code == 126, (argv, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stdout == "", r.stderr
        assert "not_allowed" not in r.stderr, r.stderr  # refused for what it hides, not its programs
    assert sorted(p.name for p in ws.iterdir() if p.name.startswith("pwned")) == []
    assert cli("run", "bypass", "--", "sh", "-c", "echo ${X:-plain}").stdout == "plain\n"


def test_without_the_allowlist_the_same_script_would_run(cli: Cli, ws: Path) -> None:
    # What the refusal above prevents: the substitution inside ${...} really runs.
    assert cli("run", "bypass", "--", "sh", "-c", "echo ${X:-$(touch pwned)}").code == 0
    assert (ws / "pwned").exists()
    (ws / "pwned").unlink()


@pytest.mark.parametrize("name", ["BASH_ENV", "ENV", "SSH_CLIENT"])
def test_start_up_variables_in_the_run_environment_are_refused(cli: Cli, ws: Path, name: str) -> None:
    value = "./evil.sh" if "ENV" in name else "1"
    r = cli("run", "bypass", "--env", f"{name}={value}", "--json", "--", "bash", "-c", "true")
    assert r.code == 126 and r.json["error"]["code"] == "denied", r.stdout
    assert name in r.json["error"]["message"]
    assert not (ws / "pwned-by-startup").exists() and not (ws / "pwned-by-bashrc").exists()


def test_python_api_refuses_start_up_variables(environ: dict[str, str], home: Path, ws: Path) -> None:
    with Warden.open(home, environ=environ) as warden, pytest.raises(Denied, match="BASH_ENV"):
        warden.get("bypass").run(["bash", "-c", "true"], env={"BASH_ENV": "./evil.sh"})
    assert not (ws / "pwned-by-startup").exists()
