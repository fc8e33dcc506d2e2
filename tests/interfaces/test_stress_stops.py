"""scripts/stress_stops.py, the tool that stops `warden run` at random moments and checks what each
stop leaves, is kept working: a short round of it, for real (its full rounds are run by hand)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "stress_stops.py"
NATIVE = Path(sys.executable).parent / "warden"


@pytest.mark.parametrize("options", [
    ("--targets", "client,child,daemon"),
    ("--no-daemon", "--live"),
    ("--detach", "--targets", "client,child"),
])
def test_a_short_round_of_stops_finds_nothing_left_behind(options: tuple[str, ...]) -> None:
    client = "native" if NATIVE.exists() else "python"
    done = subprocess.run([sys.executable, str(SCRIPT), "--tries", "6", "--seed", "7", "--client", client, *options],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 tries" in done.stdout and ": 0 with problems; audit: 0 problems" in done.stdout, done.stdout
