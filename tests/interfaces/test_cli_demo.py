"""`warden demo` (`scripts/run demo`): the tour takes a workspace of its own, never another's."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def test_the_tour_does_not_write_into_a_demo_it_did_not_leave(cli: Cli, home: Path) -> None:
    # `warden serve` shows a bot asking for a workspace named demo: a person who tried that first
    # had the tour write its notes and plant a link to /etc/passwd in the bot's workspace.
    assert cli("create", "demo", "--template", "minimal").code == 0
    r = cli("demo")
    assert r.code == 5, (r.code, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "--workspace NAME" in r.stderr, r.stderr
    assert not (home / "workspaces" / "demo" / "notes").exists()
    # A workspace it is given by name, or one of its own, it uses; its last line names that one.
    r = cli("demo", "--workspace", "tour")
    assert r.code == 0, r.stdout + r.stderr
    assert "`warden fs tour ls /`" in r.stdout and "warden fs demo" not in r.stdout
    assert cli("destroy", "demo", "--yes", "--no-archive").code == 0
    assert cli("demo").code == 0  # missing: made by the tour
    r = cli("demo")  # again: the one it left
    assert r.code == 0 and "already exists" in r.stdout, r.stdout + r.stderr


def test_the_commands_the_tour_shows_are_the_ones_it_ran(cli: Cli, home: Path) -> None:
    """A person copies them: `echo hello | warden fs … write` was shown, "hello from the tour" written."""
    r = cli("demo", "--workspace", "shown", "--json")
    assert r.code == 0, r.stdout + r.stderr
    steps = {step["step"]: step for step in r.json["data"]["steps"]}
    write = steps["Files are written atomically, paths relative to the workspace"]
    producer = str(write["command"]).split(" | ")[0]
    said = subprocess.run(["sh", "-c", producer], capture_output=True, text=True, check=True).stdout
    assert said == (home / "workspaces" / "shown" / "notes" / "hello.txt").read_text()
    assert write["outcome"] == f"wrote {len(said.encode())} bytes"
    look = steps["Commands run in a bubblewrap sandbox: the workspace is home, the host is not there"]
    shown = cli(*shlex.split(str(look["command"]))[1:])  # the words after `warden`
    assert look["outcome"] == f"exit {shown.code}: {shown.stdout.strip()}"
