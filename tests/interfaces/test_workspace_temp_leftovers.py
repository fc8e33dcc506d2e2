"""A write killed at its final rename leaves its temporary file in the workspace; the sweep
(`warden doctor` reports it, `--fix` removes it) takes it away once its writer is dead, and
never a file a bot named to look like one, nor anything through a link.

Real processes: a `warden` write in a child killed with SIGKILL as it renames (its `os.rename`
made the kill, so the moment is exact), another held alive at the same point.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.used_home]

# A `warden` process writing `path` of workspace `name`, stopped at the rename that would make the
# write visible: killed there (`kill`) or left waiting (`wait`, the test kills it at the end).
_WRITER = """
import os, signal, sys, time
from warden.bootstrap import bootstrap
name, path, how = sys.argv[1:]
def at_rename(*args, **kwargs):
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(60)
os.rename = at_rename
bootstrap().files(name).write_bytes(path, b"half of what the person wrote")
"""


@pytest.fixture
def writers(cli: Cli) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _write(cli: Cli, writers: list[subprocess.Popen[bytes]], path: str, how: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, "tempws", path, how], env=cli.environ,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    writers.append(proc)
    return proc


def _temps(folder: Path, leaf: str) -> list[Path]:
    return sorted(folder.glob(f".{leaf}.*.warden-tmp"))


def test_a_write_killed_at_its_rename_leaves_a_temp_file_the_sweep_removes(
        cli: Cli, writers: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    created = cli("create", "tempws", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    (ws / "sub").mkdir()

    killed = _write(cli, writers, "sub/notes.txt", "kill")
    assert killed.wait(timeout=60) == -signal.SIGKILL, killed.stderr.read() if killed.stderr else ""
    left = _temps(ws / "sub", "notes.txt")
    assert len(left) == 1 and f".{killed.pid}-" in left[0].name, left
    assert not (ws / "sub" / "notes.txt").exists()
    waiting = _write(cli, writers, "draft.txt", "wait")
    live = wait_until(lambda: _temps(ws, "draft.txt"), timeout=60, message="the live writer made no temp file")

    # What a bot can make: names that look like Warden's (an old unsigned one, a signed shape with
    # a MAC of its own, a dead pid), and the real leftover's name as a link to a person's file, as
    # a folder, and behind a link to a folder outside the workspace.
    person = tmp_path / "person.txt"
    person.write_text("the person's")
    outside = tmp_path / "outside"
    outside.mkdir()
    bot = [ws / ".notes.txt.0123456789ab.warden-tmp",
           ws / f".notes.txt.{killed.pid}-1-0123456789ab-{'0' * 32}.warden-tmp",
           ws / ".notes.txt.1-2-0123456789ab-0123456789abcdef0123456789abcdef.warden-tmp",
           outside / left[0].name]
    for path in bot:
        path.write_text("the bot's")
    (ws / left[0].name).symlink_to(person)
    (ws / "dir").mkdir()
    (ws / "dir" / left[0].name).mkdir()
    (ws / "away").symlink_to(outside, target_is_directory=True)

    doctor = cli("doctor", "--json")
    rows = {check["name"]: check for check in doctor.json["data"]["checks"]}
    assert "half-written files: 1" in rows["leftovers"]["detail"], rows.get("leftovers")
    dry = cli("janitor", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert [p for p in dry.json["data"]["swept"]["temp_files"] if str(ws) in p] == [str(left[0])]
    assert left[0].exists()

    fixed = cli("doctor", "--fix", "--json")
    assert fixed.code in (0, 1), fixed.stderr  # doctor's own checks may fail on this host
    assert str(left[0]) in fixed.json["data"]["swept"]["temp_files"]
    assert not left[0].exists()
    # The live writer's file, the bot's look-alikes, the link (and the person's file), the folder
    # and what lies behind the folder link are all still there.
    assert live[0].exists() and waiting.poll() is None
    assert all(path.read_text() == "the bot's" for path in bot)
    assert (ws / left[0].name).is_symlink() and person.read_text() == "the person's"
    assert (ws / "dir" / left[0].name).is_dir()

    # Once the live writer is killed too, its file goes at the next sweep.
    waiting.kill()
    waiting.wait()
    assert cli("janitor", "--once").code == 0
    assert not live[0].exists()
    assert all(path.exists() for path in bot)
