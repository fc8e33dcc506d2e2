"""Per-run cgroups: thread-safe bookkeeping, and cgroups of killed runs swept by liveness."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from warden.adapters.processes import start_time
from warden.adapters.sandbox import cgroups


def test_concurrent_sweeps_never_trip_over_each_other(tmp_path: Path) -> None:
    """The API server ends runs in many threads at once: each may sweep the busy cgroups."""
    paths = [str(tmp_path / f"gone-{i}") for i in range(20000)]  # already removed: each sweep drops them
    errors: list[BaseException] = []
    for _ in range(3):
        with cgroups._stale_lock:
            cgroups._stale[:] = paths

        def sweep() -> None:
            try:
                cgroups.sweep()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=sweep) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and cgroups._stale == []


@pytest.mark.alone  # another process's sweep (doctor --fix, serve's start-up) would take the stale cgroup first
def test_cgroups_of_dead_runs_are_swept_and_live_ones_kept() -> None:
    support = cgroups.detect()
    if support.pids is None:
        pytest.skip("no writable pids cgroup here")
    base = support.pids[1]
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(base, f"warden-{dead.pid}-{12345}-0")
    mine = Path(base, f"warden-{os.getpid()}-{start_time(os.getpid())}-999")
    for path in (stale, mine):
        path.mkdir()
    try:
        removed = cgroups.sweep_orphans(support)
        assert str(stale) in removed and not stale.exists()
        assert mine.exists()
    finally:
        for path in (stale, mine):
            if path.exists():
                path.rmdir()
