"""What a Warden killed mid-clone leaves in the workspace's `.warden/` is swept by the janitor.

A real `warden git NAME clone` is killed with SIGKILL while git waits on a remote that never
answers; its scratch folder (`git-clone-PID-…`) stays. `warden janitor --once` removes it, since
its Warden is gone, and leaves one whose Warden still runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"), pytest.mark.used_home]


@pytest.fixture
def silent_remote() -> Iterator[str]:
    """An http "remote" on loopback that takes connections and never answers; closed at the end
    (git then gives up)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/repo.git"
    server.close()
    for conn in held:
        conn.close()


def test_a_clone_killed_mid_way_leaves_scratch_the_janitor_sweeps(cli: Cli, silent_remote: str) -> None:
    created = cli("create", "leftws", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    state = Path(created.json["data"]["path"]) / ".warden"
    clone = subprocess.Popen([sys.executable, "-m", "warden", "git", "leftws", "clone", silent_remote],
                             env=cli.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        found = wait_until(lambda: list(state.glob("git-clone-*")), timeout=30,
                           message="the clone never made its scratch folder")
    finally:
        os.kill(clone.pid, signal.SIGKILL)
        clone.wait()
    assert found[0].name.startswith(f"git-clone-{clone.pid}-")
    mine = state / f"git-index-{os.getpid()}-live"  # a Warden that still runs (this test) owns it
    mine.write_bytes(b"DIRC")

    dry = cli("janitor", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert dry.json["data"]["swept"]["git_scratch"] == [str(found[0])] and found[0].exists()
    done = cli("janitor", "--once")
    assert done.code == 0, done.stderr
    assert not list(state.glob("git-clone-*")) and mine.exists()
