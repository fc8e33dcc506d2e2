"""`warden doctor` names what killed processes left behind, which `--fix` removes: a `create`
killed while it built an env layer leaves a half-built layer of tens of MB in the home, and only
`doctor --fix` (or the janitor) ever said so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.empty_home

_DEAD_PID = 4194304  # above any pid the kernel gives (pid_max's ceiling): no such process lives


def test_doctor_names_a_half_built_layer_and_fix_removes_it(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    assert [c for c in cli("doctor", "--json").json["data"]["checks"] if c["name"] == "leftovers"] == []
    half = home / "layers" / f".build-py3.11-0123456789abcdef-{_DEAD_PID}-a1b2c3"
    (half / "lib").mkdir(parents=True)
    (half / "lib" / "mod.py").write_text("X = 1\n")
    live = home / "layers" / f".build-py3.11-fedcba9876543210-{os.getpid()}-d4e5f6"
    live.mkdir()  # a build in flight (its process lives): not a leftover
    said = cli("doctor", "--json")
    [left] = [c for c in said.json["data"]["checks"] if c["name"] == "leftovers"]
    assert not left["ok"] and not left["required"], left  # a warning: isolation works all the same
    assert left["detail"] == "left by killed processes: half-built env layers: 1", left
    assert left["fix"] == "`warden doctor --fix` removes them"
    assert half.exists()  # looked at, not removed
    text = cli("doctor")
    assert "leftovers" in text.stdout and "warden doctor --fix" in text.stdout, text.stdout
    fixed = cli("doctor", "--fix", "--json")
    assert fixed.json["data"]["swept"]["layers"] == 1
    assert not half.exists() and live.exists()
    assert [c for c in cli("doctor", "--json").json["data"]["checks"] if c["name"] == "leftovers"] == []


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_fix_removes_what_a_checkpoint_killed_as_it_wrote_its_manifest_left(cli: Cli, home: Path) -> None:
    """A checkpoint (or a rollback's save of the workspace first) killed as it wrote its manifest or
    the store's usage left `.NAME.PID.tmp` in the workspace's checkpoint store: the next capture
    never looks there and `doctor --fix` said "nothing was left behind", for good (a manifest is
    as large as the workspace's list of files). Real checkpoints, each killed at its Nth rename."""
    assert cli("init").code == 0
    folder = Path(cli("create", "kept", "--template", "minimal", "--json").json["data"]["path"])
    store = home / "versions" / "kept"
    for n in range(1, 40):
        (folder / "notes.txt").write_text(f"draft {n}\n")
        done = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=rename",
                               "-e", f"inject=rename:signal=SIGKILL:when={n}",
                               sys.executable, "-m", "warden", "checkpoint", "kept"],
                              env=cli.environ, capture_output=True, timeout=120, check=False)
        if done.returncode == 0:
            break
    left = sorted(p.name for p in store.rglob(".*.tmp"))
    assert any(".json." in name for name in left), left  # a manifest's, at least
    swept = cli("doctor", "--fix", "--json").json["data"]["swept"]
    assert {Path(p).name for p in swept["temp_files"]} >= set(left), swept
    assert sorted(p.name for p in store.rglob(".*.tmp")) == []
    assert cli("checkpoints", "kept").code == 0
