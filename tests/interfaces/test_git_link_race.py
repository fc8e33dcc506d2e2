"""A bot racing Warden's git writes with a link: `discard`, the checkout after a `clone` and a
`pull` write the bot's working tree, and a bot's process swaps a folder for a link to a folder
outside the workspace while they do (it waits for git's `index.lock`, the sign that a write is
under way, then plants the link again and again). Warden must never write through it.

The racer runs where a bot acts: a detached process in the workspace's live sandbox. The link it
plants names a host folder it cannot see (the sandbox has its own /tmp); only a write by Warden,
outside the sandbox, could land there.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli, isolated_environ
from tests.services.test_git import git, seeded_remote

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                                 reason="needs bubblewrap and git")]

FILES = 400  # files in the raced folder: each one git writes is one more chance for the link

# The bot's racer: while a git write is under way (git's `.git/index.lock`, or the scratch tree
# Warden checks files out into), the folder `d` is moved aside and a link to OUTSIDE planted in its place, as
# fast as Python can; otherwise `d` is left a folder. It stops when the file `stop` appears.
RACER = """
import os, sys, glob
out, n = sys.argv[1], 0
print('ready', flush=True)
while True:
    if os.path.exists('.git/index.lock') or glob.glob('.warden/git-checkout-*'):
        n += 1
        if n == 1:
            print('racing', flush=True)
        try:
            os.rename('d', 'moved-%d' % n)
        except OSError:
            pass
        try:
            os.symlink(out, 'd')
        except OSError:
            pass
"""


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    home = tmp_path / "warden-home"
    home.mkdir()
    return Cli({**isolated_environ(home), "WARDEN_WORKSPACE_SANDBOX_IDLE": "120s"})


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return seeded_remote(tmp_path, {f"d/f{i:03}.txt": f"{i}\n" for i in range(FILES)})


@pytest.fixture
def ws(cli: Cli, remote: Path) -> Iterator[Path]:
    created = cli("create", "race", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    cloned = cli("git", "race", "clone", f"file://{remote}")
    assert cloned.code == 0, cloned.stderr
    yield Path(created.json["data"]["path"])
    cli("destroy", "race", "--yes", "--no-archive")


def start_racer(cli: Cli, name: str, outside: Path) -> str:
    started = cli("run", name, "--detach", "--json", "--", "python3", "-c", RACER, str(outside))
    assert started.code == 0, started.stdout + started.stderr
    racer = str(started.json["data"]["id"])
    deadline = time.monotonic() + 30
    while "ready" not in cli("logs", name, racer).stdout:
        assert time.monotonic() < deadline, "the racer never started"
        time.sleep(0.1)
    return racer


def stop_racer(cli: Cli, name: str, racer: str) -> None:
    """Stops the racer, having checked that it raced (it saw Warden's write under way)."""
    said = cli("logs", name, racer).stdout
    cli("kill", name, racer, "--signal", "KILL")
    cli("wait", name, racer, "--timeout", "30")
    assert "racing" in said, "the racer never saw a write under way: this test proved nothing"


def bot_edits(cli: Cli) -> None:
    """Every file of `d` changed, by the bot, in its sandbox (no racer running)."""
    edited = cli("run", "race", "--", "sh", "-c", "for f in d/*.txt; do echo more >> \"$f\"; done")
    assert edited.code == 0, edited.stderr


def test_discard_never_writes_through_a_link_a_bot_plants(cli: Cli, ws: Path, outside: Path) -> None:
    bot_edits(cli)
    staged = cli("git", "race", "stage", "-m", "edits", "--json")
    assert staged.code == 0, staged.stderr
    racer = start_racer(cli, "race", outside)
    try:
        discarded = cli("git", "race", "discard", staged.json["data"]["id"])
        assert discarded.code in (0, 5), discarded.stderr  # done, or a conflict: the tree changed
    finally:
        stop_racer(cli, "race", racer)
    assert sorted(p.name for p in outside.iterdir()) == []


def test_a_pull_never_writes_through_a_link_a_bot_plants(cli: Cli, ws: Path, outside: Path, remote: Path,
                                                          tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    for i in range(FILES):
        (other / "d" / f"f{i:03}.txt").write_text(f"{i} changed upstream\n")
    git("commit", "-qam", "upstream", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    racer = start_racer(cli, "race", outside)
    try:
        pulled = cli("git", "race", "pull")
        assert pulled.code in (0, 5), pulled.stderr
    finally:
        stop_racer(cli, "race", racer)
    assert sorted(p.name for p in outside.iterdir()) == []


def test_the_checkout_after_a_clone_never_writes_through_a_link(cli: Cli, remote: Path, outside: Path) -> None:
    created = cli("create", "fresh", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    try:
        racer = start_racer(cli, "fresh", outside)
        try:
            cloned = cli("git", "fresh", "clone", f"file://{remote}")
            assert cloned.code in (0, 5), cloned.stderr
        finally:
            stop_racer(cli, "fresh", racer)
        assert sorted(p.name for p in outside.iterdir()) == []
    finally:
        cli("destroy", "fresh", "--yes", "--no-archive")
