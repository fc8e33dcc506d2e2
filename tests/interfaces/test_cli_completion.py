"""`warden completion bash|zsh|fish`: the scripts, sourced in the real shells, complete commands,
subcommands, options, choices and workspace names, and leave the sandboxed command's words
(after `--`) to file completion."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Cli
from warden.interfaces.cli.completion import levels
from warden.interfaces.cli.main import build_parser

pytestmark = pytest.mark.used_home

# (words typed, the word being completed last) → what must be offered, what must not.
CASES = [
    (["warden", "cre"], {"create"}, {"list"}),
    (["warden", "--home", "HOME", "li"], {"list"}, {"create"}),
    (["warden", "fs", "notes", "w"], {"write"}, {"ls", "notes"}),
    (["warden", "fs", ""], {"notes", "write"}, set()),
    (["warden", "create", "x", "--type", ""], {"user", "bot", "temporary"}, {"create"}),
    (["warden", "run", "no"], {"notes"}, set()),
    (["warden", "run", "notes", "--ne"], {"--net"}, {"--json"}),
    (["warden", "info", "-w", ""], {"notes"}, {"create"}),
    (["warden", "audit", ""], {"verify"}, set()),
    (["warden", "completion", ""], {"bash", "zsh", "fish"}, set()),
    (["warden", "ws", "s"], {"set", "snapshot"}, {"notes"}),
    (["warden", "grant", "notes", "bot1", "--per"], {"--permissions"}, set()),
]


@pytest.fixture
def scripts(cli: Cli, tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "notes"
    folder.mkdir()
    assert cli("ws", "set", str(folder)).code == 0  # adopts it: a workspace named notes
    assert cli("list", "--names").stdout.split() == ["notes"]
    made = {}
    for shell in ("bash", "zsh", "fish"):
        result = cli("completion", shell)
        assert result.code == 0, result.stderr
        made[shell] = tmp_path / f"warden.{shell}"
        made[shell].write_text(result.stdout)
    return made


def _env(cli: Cli, tmp_path: Path) -> dict[str, str]:
    # The scripts call `warden list --names`: this checkout's warden, on PATH, in the test's home.
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "warden"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m warden "$@"\n')
    wrapper.chmod(0o755)
    return {**cli.environ, "PATH": f"{bindir}:{cli.environ['PATH']}", "PYTHONPATH": os.pathsep.join(sys.path)}


def _words(case: list[str], home: str) -> list[str]:
    return [home if w == "HOME" else w for w in case]


def _check(offered: dict[tuple[str, ...], set[str]]) -> None:
    for words, must, must_not in CASES:
        got = offered[tuple(words)]
        assert must <= got, (words, got)
        # zsh and fish filter by the typed prefix themselves; what they were handed may hold more.
        assert not {w for w in must_not if w.startswith(words[-1])} & got, (words, got)


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def test_bash(cli: Cli, scripts: dict[str, Path], tmp_path: Path) -> None:
    home = cli.environ["WARDEN_HOME"]
    lines = [f"source {scripts['bash']}"]
    for words, _, _ in CASES:
        typed = " ".join(f"'{w}'" for w in _words(words, home))
        lines.append(f"COMP_WORDS=({typed}); COMP_CWORD={len(words) - 1}; COMPREPLY=(); _warden; "
                     'echo "${COMPREPLY[*]}"')
    out = subprocess.run([_shell("bash"), "--norc", "--noprofile", "-c", "\n".join(lines)], capture_output=True,
                         text=True, env=_env(cli, tmp_path), timeout=120, check=True).stdout.splitlines()
    _check({tuple(words): set(line.split()) for (words, _, _), line in zip(CASES, out, strict=True)})


def test_bash_leaves_the_command_after_dashes_to_files(cli: Cli, scripts: dict[str, Path], tmp_path: Path) -> None:
    script = (f"source {scripts['bash']}; complete -p warden; COMP_WORDS=(warden run notes -- py); COMP_CWORD=4; "
              "_warden; echo \"n=${#COMPREPLY[@]}\"")
    out = subprocess.run([_shell("bash"), "--norc", "-c", script], capture_output=True, text=True,
                         env=_env(cli, tmp_path), timeout=60, check=True).stdout
    assert "-o default" in out and "-F _warden warden" in out  # nothing offered: bash falls back to files
    assert "n=0" in out


def test_zsh(cli: Cli, scripts: dict[str, Path], tmp_path: Path) -> None:
    home = cli.environ["WARDEN_HOME"]
    # compadd and _files are zsh's completion builtins, usable only inside a completion widget:
    # stand-ins print what they are handed, one call a line; the script's own logic runs for real.
    lines = ["compdef() { :; }", f"source {scripts['zsh']}",
             'compadd() { while [[ $1 == -* && $1 != -- ]]; do [[ $1 == -d ]] && shift; shift; done; shift; '
             'print -r -- "$*"; }',
             '_files() { print -r -- "<files>"; }']
    for words, _, _ in CASES:
        typed = " ".join(f"'{w}'" for w in _words(words, home))
        lines.append(f"words=({typed}); CURRENT={len(words)}; _warden")
    lines.append("words=(warden run notes -- py); CURRENT=5; _warden")
    out = subprocess.run([_shell("zsh"), "-f", "-c", "\n".join(lines)], capture_output=True, text=True,
                         env=_env(cli, tmp_path), timeout=120, check=True).stdout.splitlines()
    assert out[-1] == "<files>"
    _check({tuple(words): set(line.split()) for (words, _, _), line in zip(CASES, out[:-1], strict=True)})


def test_fish(cli: Cli, scripts: dict[str, Path], tmp_path: Path) -> None:
    home = cli.environ["WARDEN_HOME"]
    (tmp_path / "pyfile.txt").write_text("")
    lines = [f"source {scripts['fish']}"]
    for words, _, _ in CASES:
        typed = " ".join(_words(words, home)[:-1]) + " " + words[-1]
        lines.append(f"echo (complete -C'{typed}' | string split -f1 \\t | string join ' ')")
    lines.append(f"echo (complete -C'warden run notes -- {tmp_path}/pyf' | string join ' ')")
    out = subprocess.run([_shell("fish"), "--no-config", "-c", "\n".join(lines)], capture_output=True, text=True,
                         env={**_env(cli, tmp_path), "HOME": str(tmp_path)}, timeout=120,
                         check=True).stdout.splitlines()
    assert out[-1] == f"{tmp_path}/pyfile.txt"
    _check({tuple(words): set(line.split()) for (words, _, _), line in zip(CASES, out[:-1], strict=True)})


def test_the_scripts_name_every_command_the_parser_has() -> None:
    every = levels(build_parser())
    paths = {level.path for level in every}
    assert ("fs", "write") in paths and ("ws", "set") in paths and ("completion",) in paths
    top = every[0].commands
    from warden.interfaces.cli.main import COMMANDS

    assert set(top) == set(COMMANDS)
    from warden.interfaces.cli.completion import script

    for shell in ("bash", "zsh", "fish"):
        text = script(build_parser(), shell)
        for name in COMMANDS:
            assert f"'{name}'" in text or f" {name} " in text or f" {name}'" in text, (shell, name)
