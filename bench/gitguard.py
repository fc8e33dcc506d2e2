"""What the git guard's walk costs a run in a big workspace, against the standard library's floor.

    .venv/bin/python bench/gitguard.py [--folders 5000] [-n 10]

Every bot run is swept for git control structures before and after (adapters/gitguard.py): a
walk of the whole workspace by descriptors. A project with a node_modules has thousands of
folders and tens of thousands of files, so the walk must cost per folder, not per file. Rows,
alternating in one process over one tree (`--folders` folders of four empty files each):
`os.walk` (listing every folder, the floor of any walk), `gitguard.scan`, and `find` (the
coreutils walk, in its own process); then what a sweep costs in a process that ran the workspace
before (the API server, a Python program), where the quota watcher's kept tree tells what changed:
`scan_again` after a small change (a file made and removed in one folder, a `.git` made deep and
moved aside) and after none, against the full `scan` of the same moment.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from warden.adapters.gitguard import scan, scan_again
from warden.adapters.quota import Watcher
from warden.core.quota import Quota


def _tree(root: Path, folders: int) -> None:
    for i in range(folders):
        folder = root / "node_modules" / f"p{i // 50}" / f"lib{i % 50}"
        folder.mkdir(parents=True)
        for k in range(4):
            (folder / f"f{k}.js").touch()


def _sweeps(root: Path, rounds: int) -> dict[str, list[float]]:
    """Sweeps of a workspace whose watched tree this process kept (two runs before it)."""
    for _ in range(2):  # the first run gives its tree back, the second keeps it
        with Watcher(str(root), Quota(max_bytes=1 << 40, max_files=1 << 30, min_free=0)):
            pass
    scan_again(str(root))  # the first sweep with the tree: a full scan, kept
    times: dict[str, list[float]] = {"scan (same moment)": [], "scan_again, small change": [],
                                     "scan_again, no change": []}
    deep = root / "node_modules" / "p7" / "lib3"
    for i in range(rounds):
        (deep / "new.js").touch()
        (deep / "new.js").unlink()
        (deep / ".git").mkdir()
        (deep / ".git").rename(deep / f"moved{i}")
        for name, fn in (("scan_again, small change", lambda: scan_again(str(root))),
                         ("scan (same moment)", lambda: scan(str(root))),
                         ("scan_again, no change", lambda: scan_again(str(root)))):
            started = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folders", type=int, default=5000)
    parser.add_argument("-n", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _tree(root, args.folders)
        cases = {
            "os.walk (floor)": lambda: sum(1 for _ in os.walk(root)),
            "gitguard.scan": lambda: scan(str(root)),
            "find -type d": lambda: subprocess.run(["find", str(root), "-type", "d"], stdout=subprocess.DEVNULL,
                                                   check=True),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.n):
            for name, fn in cases.items():
                started = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - started) * 1000)
        times.update(_sweeps(root, args.n))
    floor = statistics.median(times["os.walk (floor)"])
    print(f"{'walk of ' + str(args.folders) + ' folders, ' + str(4 * args.folders) + ' files':<36}"
          f"{'median ms':>10}{'x os.walk':>11}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<36}{median:>10.1f}{median / floor:>11.3f}")
    print(f"({args.n} rounds, interleaved; load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
