"""Where one in-process exec of a bot's `true` in its live sandbox spends its time: each part's
wall and calling-thread CPU (medians, ms), and the CPU of the sandbox's supervisor and of what it
spawned, per exec. bench/exec_cost.py compares two trees; this says where one tree's time goes.

    .venv/bin/python bench/exec_breakdown.py [-n 300]

The parts are functions of Warden's run path wrapped with timers (nested: a part includes the
parts it calls; the wrappers add a few microseconds each). The supervisor's CPU (its own, and
its reaped children's: the launcher and the command) is read from /proc over `n` more execs: it
runs while Warden's thread waits, so the wait parts (`_Channel.frame`, `_follow`) hold it, plus
whatever the machine's other load takes. A raw `bwrap ... true` is timed before each exec.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bot_exec, raw_bwrap_argv  # noqa: E402

PARTS = [
    ("warden.services.auth", "AuthService.authenticate"),
    ("warden.services.bot_requests", "BotRequestService._authorize"),
    ("warden.services.runs", "RunService._judge"),
    ("warden.services.runs", "RunService._hold_lease"),
    ("warden.services.runs_in_progress", "RunsInProgress.begin"),
    ("warden.services.runs", "RunService._mount"),
    ("warden.services.quota", "QuotaService.watch"),
    ("warden.adapters.quota", "Watcher.__enter__"),
    ("warden.services.runs", "RunService._sandboxed"),
    ("warden.services.live", "LiveSandboxService._sandbox_for"),
    ("warden.adapters.sandbox.live", "HostLiveSandboxes.run"),
    ("warden.adapters.sandbox.live", "HostLiveSandboxes._channel"),
    ("warden.adapters.sandbox.live", "HostLiveSandboxes._spawn"),
    ("warden.adapters.sandbox.live", "_command_cgroup"),
    ("warden.adapters.sandbox.live", "_Channel.send"),
    ("warden.adapters.sandbox.live", "_Channel.frame"),
    ("warden.adapters.sandbox.live", "HostLiveSandboxes._follow"),
    ("warden.adapters.sandbox.live", "_Channel.close"),
    ("warden.adapters.quota", "Watcher.__exit__"),
    ("warden.adapters.gitguard", "GitGuard.after"),
    ("warden.services.runs", "RunService._conclude"),
    ("warden.services.leases", "LeaseService._release"),
    ("warden.services.runs_in_progress", "RunsInProgress.end"),
]


def _wrap(spent: dict[str, list[float]]) -> None:
    """Time each part (in the main thread only), adding to `spent[part] = [wall, cpu]`."""
    main = threading.main_thread()
    for module_name, qualname in PARTS:
        owner: Any = importlib.import_module(module_name)
        *path, name = qualname.split(".")
        for step in path:
            owner = getattr(owner, step)
        real = getattr(owner, name)

        def timed(*args: Any, _real: Callable[..., Any] = real, _part: str = qualname, **kwargs: Any) -> Any:
            if threading.current_thread() is not main:
                return _real(*args, **kwargs)
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return _real(*args, **kwargs)
            finally:
                spent[_part][0] += time.perf_counter() - wall
                spent[_part][1] += time.thread_time() - cpu

        setattr(owner, name, functools.wraps(real)(timed))


def _cpu_ms(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU ms of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) * 1000 / tick, (int(fields[13]) + int(fields[14])) * 1000 / tick


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=300, help="execs timed, and as many for the supervisor's CPU")
    args = parser.parse_args()
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    _wrap(spent)
    with tempfile.TemporaryDirectory() as tmp, bot_exec(tmp) as (w, run):
        for _ in range(5):
            run()  # its live sandbox started, the caches filled
        time.sleep(1.05)  # the policy folder settled (a folder changed within a second is read again)
        raw, raw_ms = raw_bwrap_argv(), []
        per: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for _ in range(args.n):
            start = time.perf_counter()
            subprocess.run(raw, check=True)
            raw_ms.append((time.perf_counter() - start) * 1000)
            spent.clear()
            wall, cpu = time.perf_counter(), time.thread_time()
            run()
            per["the whole exec"].append(((time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000))
            for part, (part_wall, part_cpu) in spent.items():
                per[part].append((part_wall * 1000, part_cpu * 1000))
        with w.app.registry.transaction(write=False) as tx:
            supervisor = next(iter(tx.sandboxes.of_workspace("bench"))).supervisor_pid
        before, mine = _cpu_ms(supervisor), os.times()
        for _ in range(args.n):
            run()
        after, mine_after = _cpu_ms(supervisor), os.times()
    print(f"{'part (nested; median of ' + str(args.n) + ')':48} {'wall ms':>8} {'thread CPU ms':>14}")
    for part, samples in per.items():
        print(f"{part:48} {statistics.median(s[0] for s in samples):8.3f} "
              f"{statistics.median(s[1] for s in samples):14.3f}")
    warden = (mine_after.user + mine_after.system - mine.user - mine.system) * 1000 / args.n
    print(f"\nCPU per exec: Warden's process {warden:.2f} ms, the supervisor {(after[0] - before[0]) / args.n:.2f} ms, "
          f"what it spawned (launcher, command) {(after[1] - before[1]) / args.n:.2f} ms")
    print(f"raw bwrap ... true, wall ms median: {statistics.median(raw_ms):.2f}; "
          f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
