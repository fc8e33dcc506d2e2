"""`kill -9` of `warden create` at random points never leaves a workspace that claims to be ready."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture


def _check_ready(ws: Path) -> None:
    assert (ws / ".workspace_configured").is_file()
    assert (ws / ".workspace.json").is_file()
    subprocess.run([str(ws / ".venv/bin/python"), "-c", "import alpha"], check=True)


@pytest.mark.slow
@pytest.mark.alone  # the kills are spread over a create's duration measured first: no other test may change it
def test_kill_create_at_random_points(envhome: EnvHome) -> None:  # noqa: F811
    seed = int(os.environ.get("WARDEN_CRASH_SEED", time.time()))
    rng = random.Random(seed)
    # How long a whole create takes on this machine now, to spread the kills over all of it.
    spans = []
    for _ in range(3):
        started = time.monotonic()
        probe = subprocess.Popen([sys.executable, "-m", "warden", "create", envhome.name("probe"), "--template",
                                  "local"], env=envhome.environ, stdout=subprocess.DEVNULL)
        assert probe.wait() == 0
        spans.append(time.monotonic() - started)
    span = sorted(spans)[1]
    outcomes: dict[str, int] = {"absent": 0, "broken": 0, "ready": 0}
    for trial in range(20):
        name = f"crash-{seed % 10000}-{trial}"
        # Stratified: trial i lands in the i-th twentieth of the run (after start-up), at random.
        delay = span * (0.3 + 0.75 * (trial + rng.random()) / 20)
        proc = subprocess.Popen([sys.executable, "-m", "warden", "create", name, "--template", "local"],
                                env=envhome.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)  # the random moment of the kill: what the test does, not a wait
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        listed = envhome.cli("list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {w["name"]: w for w in json.loads(listed.stdout)["data"]}
        ws = envhome.home / "workspaces" / name
        row = rows.get(name)
        context = f"seed {seed} trial {trial} delay {delay:.3f}s"
        if row is None:
            outcomes["absent"] += 1
            assert not ws.exists(), context
            continue
        assert row["status"] in ("ready", "broken"), (context, row["status"])
        if row["status"] == "ready":
            outcomes["ready"] += 1
            _check_ready(ws)
            continue
        outcomes["broken"] += 1
        # Broken is repairable when its folder exists, and always removable.
        if trial % 2 and ws.exists():
            proc2 = envhome.cli("health", name, "--repair", "--json")
            assert proc2.returncode == 0, (context, proc2.stdout)
            assert json.loads(envhome.cli("info", name, "--json").stdout)["data"]["status"] == "ready"
            _check_ready(ws)
        else:
            assert envhome.cli("destroy", name, "--no-archive", "--yes").returncode == 0, context
            assert not ws.exists()
    # Every run that claims ready really is; the spread of kills reached more than one outcome.
    print(f"crash outcomes (seed {seed}, create takes {span:.3f}s): {outcomes}")
    assert sum(outcomes.values()) == 20
    assert len([v for v in outcomes.values() if v]) >= 2, outcomes
