"""What a janitor pass costs over many workspaces, against reading them all in the same run.

    .venv/bin/python bench/janitor.py [-n 5] [--workspaces 1000]

A home gets N workspaces (registry rows with their folders; no layers built), half of them
idle (last used 8 days ago), a tenth of them temporary and expired. Rows: listing every
workspace from the registry (the baseline: a pass reads them all), a dry-run pass (plan,
sweep, disk), a pass with nothing left to do (after a first real pass acted). Target: a pass
over 1,000 workspaces <= 2 s; `warden @NAME` <= 100 ms (measured here too, with its baseline
`warden --version`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import measure

from warden.bootstrap import bootstrap
from warden.core.workspaces import WorkspaceRecord


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--workspaces", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        env = {"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home), "WARDEN_DAEMON": "0"}
        app = bootstrap(home, environ=env)
        root = app.root_dir
        now = datetime.now(UTC)
        with app.registry.transaction() as tx:
            for i in range(args.workspaces):
                name = f"w{i:05d}"
                (root / name).mkdir(parents=True)
                used = now - timedelta(days=8 if i % 2 else 0)
                kind = "temporary" if i % 10 == 0 else "user"
                tx.workspaces.insert(WorkspaceRecord(
                    id=f"ws_{uuid.uuid4().hex[:16]}", name=name, path=str(root / name), type=kind, status="ready",
                    created_at=used.isoformat(), last_accessed=used.isoformat(),
                    expires_at=(now - timedelta(hours=1)).isoformat() if kind == "temporary" else None))
        rows = {
            "list every workspace (baseline)": measure(lambda: app.workspaces.list(), args.n),
            "janitor pass, dry run": measure(lambda: app.janitor.run(dry_run=True), args.n),
        }
        started = time.perf_counter()
        first = app.janitor.run()
        first_ms = (time.perf_counter() - started) * 1000
        rows["janitor pass, idle ones already said"] = measure(lambda: app.janitor.run(), args.n)
        app.close()
        cli = [sys.executable, "-m", "warden"]
        rows["warden --version (baseline)"] = measure(
            lambda: subprocess.run([*cli, "--version"], env=env, capture_output=True, check=True), args.n)
        rows["warden @w00001"] = measure(
            lambda: subprocess.run([*cli, "@w00001"], env={**env, "WARDEN_TERMINAL": "bench"}, capture_output=True,
                                   check=True), args.n)
    print(f"{args.workspaces} workspaces; first real pass {first_ms:.0f} ms "
          f"({sum(1 for c in first.chores if c['action'] == 'destroy')} destroyed, "
          f"{sum(1 for c in first.chores if c['action'] == 'idle')} said idle)")
    print(f"{'what':44} {'median ms':>10} {'min ms':>8}")
    for what, times in rows.items():
        print(f"{what:44} {statistics.median(times):10.1f} {min(times):8.1f}")


if __name__ == "__main__":
    main()
