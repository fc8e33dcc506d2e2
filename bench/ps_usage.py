"""What `warden ps`'s CPU column costs: the process listing with each running process's usage
read (its cgroup's cpu.stat and memory.peak, else /proc/PID/stat of its leader) against the same
listing with that read skipped, taking turns call by call in one run, so both see the same load.

    .venv/bin/python bench/ps_usage.py [-n 400] [--processes 5]

A fresh home and `minimal` workspace; N background `sleep`s; LiveSandboxService.list timed in
this process. Rows: median and p90 per variant, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home

from warden.bootstrap import bootstrap
from warden.core.live import LiveProcess
from warden.core.runs import Usage
from warden.services.live import LiveSandboxService


def _skipped(self: LiveSandboxService, process: LiveProcess) -> Usage | None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=400)
    parser.add_argument("--processes", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warden-bench-") as tmp:
        _, env = bench_home(tmp)

        def cli(*argv: str) -> str:
            return subprocess.run([sys.executable, "-m", "warden", *argv], env=env, check=True,
                                  capture_output=True, text=True).stdout.strip()

        cli("init")
        cli("create", "bench", "--template", "minimal")
        ids = [cli("run", "bench", "--detach", "--", "sleep", "600") for _ in range(args.processes)]
        try:
            live = bootstrap(env["WARDEN_HOME"], environ=env).live
            real = LiveSandboxService._used_so_far
            times: dict[str, list[float]] = {"with usage": [], "without (before)": []}
            measured = 0
            for i in range(args.n):
                for name in (("with usage", "without (before)") if i % 2 else ("without (before)", "with usage")):
                    LiveSandboxService._used_so_far = real if name == "with usage" else _skipped  # type: ignore[method-assign]
                    start = time.perf_counter()
                    views = live.list("bench")
                    times[name].append((time.perf_counter() - start) * 1000)
                    if name == "with usage":
                        measured = sum(v.usage is not None for v in views)
            LiveSandboxService._used_so_far = real  # type: ignore[method-assign]
        finally:
            for process in ids:
                cli("kill", "bench", process, "--signal", "KILL")
    print(f"{args.processes} running processes, {measured} with usage, {args.n} listings each")
    base = statistics.median(times["without (before)"])
    for name, ms in times.items():
        ms.sort()
        print(f"{name:18} median {statistics.median(ms):6.2f} ms  p90 {ms[int(len(ms) * 0.9)]:6.2f} ms  "
              f"x{statistics.median(ms) / base:.2f}")


if __name__ == "__main__":
    main()
