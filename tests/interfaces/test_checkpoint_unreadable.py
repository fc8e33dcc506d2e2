"""A folder a bot made unsearchable (`chmod 644` on a folder, in its sandbox) gets a clear refusal
naming it from `warden checkpoint` and `warden rollback`, never a traceback.

The mode only keeps out a Warden without CAP_DAC_OVERRIDE: the person's own user, as Warden
normally runs. When these tests run as root, Warden is run with every capability dropped
(setpriv), which makes root's file access follow the modes as a user's does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"), pytest.mark.used_home]

NO_CAPS = ("setpriv", "--bounding-set=-all", "--inh-caps=-all")


@pytest.fixture
def as_user(cli: Cli) -> Cli:
    """The CLI as a user without privileges: root with its capabilities dropped, else as it is."""
    if os.geteuid() != 0:
        # Warden then owns the workspace's folders, and the run's quota scan gives their owner back
        # read and search (adapters/disk_usage.py), so a bot cannot leave one unsearchable to it.
        pytest.skip("as a normal user Warden owns the folders and gives itself back search after a run")
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv (util-linux) is missing: no way to drop CAP_DAC_OVERRIDE")

    class Dropped(Cli):
        def __call__(self, *args: str, **kwargs: object) -> object:  # type: ignore[override]
            import subprocess
            import sys

            proc = subprocess.run([*NO_CAPS, sys.executable, "-m", "warden", *args], capture_output=True,
                                  timeout=120, env=self.environ, check=False)
            from tests.conftest import CliResult

            return CliResult(proc.returncode, proc.stdout.decode(errors="replace"),
                             proc.stderr.decode(errors="replace"))

    return Dropped(cli.environ)


def test_an_unsearchable_folder_is_named_in_a_clear_refusal(cli: Cli, as_user: Cli) -> None:
    created = cli("create", "modes", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    first = as_user("checkpoint", "modes", "-m", "before", "--json")
    assert first.code == 0, first.stderr
    bot = cli("run", "modes", "--", "sh", "-c", "mkdir -p d/e && echo x > d/e/f && echo y > d/g && chmod 644 d")
    assert bot.code == 0, bot.stderr
    assert (os.stat(ws / "d").st_mode & 0o777) == 0o644
    try:
        for args in (("checkpoint", "modes", "-m", "after"), ("rollback", "modes", first.json["data"]["id"])):
            refused = as_user(*args)
            assert refused.code == 5, (args, refused.stdout, refused.stderr)
            assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
            assert "folder 'd' of the workspace cannot be read or searched" in refused.stderr
            assert "conflict" in as_user(*args, "--json").stdout
    finally:
        os.chmod(ws / "d", 0o755)
