"""How long the `warden` program takes to start and answer, against Python itself.

Prints one table, all measured in this run, interleaved (so a busy machine slows each alike):
  python -c pass       the floor: the interpreter starting and stopping
  warden --version     the program's entry, no command module
  warden --help        every command module's parser
  warden list          a read of the registry (a home with one adopted workspace)
  warden completion    a shell's completion script
with each one's median and minimum, and the median less the floor's (what Warden adds).
The issue's target: `warden --help` and `warden list` within 50 ms of wall time.

Usage: .venv/bin/python bench/startup.py [--runs N]
(Another checkout's interpreter measures that checkout's warden: a before/after in one session.)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import bench_home

TARGET_MS = 50.0


def once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one run. CPU time is what the program does
    itself: on a machine others share, wall time also holds the time it waited for a CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    warden = str(Path(sys.executable).with_name("warden"))
    with tempfile.TemporaryDirectory(prefix="warden-bench-startup-") as tmp:
        _, env = bench_home(tmp)
        env["WARDEN_DAEMON"] = "0"
        folder = Path(tmp) / "notes"
        folder.mkdir()
        subprocess.run([warden, "ws", "set", str(folder)], env=env, check=True, stdout=subprocess.DEVNULL)
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "warden --version": [warden, "--version"],
            "warden --help": [warden, "--help"],
            "warden list": [warden, "list"],
            "warden completion bash": [warden, "completion", "bash"],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for name, argv in list(cases.items()):
            try:
                once(argv, env)  # warm the page cache and .pyc files
            except subprocess.CalledProcessError:
                del cases[name]  # an older Warden without this command (a before/after comparison)
        for _ in range(args.runs):
            for name, argv in cases.items():
                wall, used = once(argv, env)
                times[name].append(wall)
                cpu[name].append(used)
    floor = statistics.median(times["python -c pass"])
    print(f"{'command':<26}{'wall median':>12}{'wall min':>9}{'over python':>12}{'CPU median':>11}  target (wall)")
    for name, got in times.items():
        if not got:
            continue
        median = statistics.median(got)
        target = ""
        if name in ("warden --help", "warden list"):
            target = f"<= {TARGET_MS:.0f} ms: " + ("met" if median <= TARGET_MS else "NOT met")
        print(f"{name:<26}{median:>12.1f}{min(got):>9.1f}{median - floor:>12.1f}"
              f"{statistics.median(cpu[name]):>11.1f}  {target}")
    print(f"({args.runs} runs each, interleaved; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
