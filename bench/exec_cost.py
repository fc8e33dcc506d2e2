"""What one in-process exec of a bot's `true` in its live sandbox costs in Python: this tree
against a base commit's, in one run, counted so that the machine's load does not matter.

    .venv/bin/python bench/exec_cost.py [--base REV] [-n 200]

The base commit's `src/` is taken from git into a temporary folder. Each tree gets a worker
process (its own home, `minimal` workspace, a bot with read,write,execute) that runs
`BotRequestService.exec(principal, "bench", ["true"])` on demand (authentication included, as
over HTTP), in the bot's live sandbox (started by the warm-up execs). The two workers take turns,
exec by exec, so both see the same load. Each turn every worker runs one timed exec (wall and
the calling thread's CPU, nothing installed) and one counted exec, with:

- Python function calls and C calls of the calling thread (`sys.setprofile` events);
- SQL statements on the registry's connection (`sqlite3` trace callback: BEGIN/COMMIT included);
- `os.open`, `os.stat`/`os.lstat`/`os.fstat`, `os.scandir`, `json.dumps`, through counting
  wrappers installed in the worker only (what calls them from C, like `open()`, is not seen).

Counts are the same every exec (medians printed); the times are medians of `n` and move with
the machine's load (other processes), the counts do not. A raw `bwrap ... true` is timed once a
turn too, for issue #11's target: in-process <= 0.5x raw bwrap.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import raw_bwrap_argv  # noqa: E402
from exec_ab import tree_of  # noqa: E402

WORKER = r"""
import json, os, sys, time
from pathlib import Path
from warden import Warden
from warden.services.bot_requests import Command

home = Path(sys.argv[1])
env = json.loads(sys.argv[2])
counts = {}


def counting(module, name, key):
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        counts[key] = counts.get(key, 0) + 1
        return real(*args, **kwargs)

    wrapper._bench = True
    setattr(module, name, wrapper)
    return wrapper.__code__


with Warden.open(home, environ=env) as w:
    w.create("bench", template="minimal")
    w.app.grants.register_bot("bench-bot")
    token = w.app.grants.grant("bench", "bench-bot", "read,write,execute").token
    command = Command(argv=("true",))

    def run():
        principal = w.app.auth.authenticate(token)
        assert w.app.bot_requests.exec(principal, "bench", command).exit_code == 0

    for _ in range(5):
        run()  # starts the bot's live sandbox, fills the caches every exec may use
    with w.app.registry.transaction(write=False) as tx:
        live = [s for s in tx.sandboxes.of_workspace("bench") if s.principal.startswith("bot:bench-bot@")]
    assert len(live) == 1, live
    import json as json_module
    import sqlite3
    wrappers = {counting(os, "open", "os.open"), counting(os, "stat", "stat"), counting(os, "lstat", "stat"),
                counting(os, "fstat", "stat"), counting(os, "scandir", "os.scandir"),
                counting(json_module, "dumps", "json.dumps")}
    real_wrappers = dict(counts)  # nothing counted yet
    conn = w.app.registry.db._connection()

    def traced(statement):
        counts["sql"] = counts.get("sql", 0) + 1
        if statement.lstrip().upper().startswith("BEGIN IMMEDIATE"):
            counts["write tx"] = counts.get("write tx", 0) + 1

    def profiler(frame, event, arg):
        if event == "call":
            if frame.f_code not in wrappers:
                counts["py calls"] = counts.get("py calls", 0) + 1
        elif event == "c_call":
            counts["C calls"] = counts.get("C calls", 0) + 1

    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "time":
            wall, cpu = time.perf_counter(), time.thread_time()
            run()
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            print(json.dumps({"wall ms": wall * 1000, "thread CPU ms": cpu * 1000}), flush=True)
        else:
            counts.clear()
            conn.set_trace_callback(traced)
            sys.setprofile(profiler)
            run()
            sys.setprofile(None)
            conn.set_trace_callback(None)
            print(json.dumps(counts), flush=True)
"""

KEYS = ("py calls", "C calls", "sql", "write tx", "os.open", "stat", "os.scandir", "json.dumps",
        "thread CPU ms", "wall ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="65f5a49", help="the commit to compare with")
    parser.add_argument("-n", type=int, default=200, help="execs of each kind (timed, counted) per tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base_src = tree_of(args.base, Path(tmp) / "base")
        trees = {f"base {args.base}": base_src, "this tree": REPO / "src"}
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
        workers = {}
        try:
            for i, (label, src) in enumerate(trees.items()):
                compileall.compile_dir(str(src / "warden"), quiet=1)
                # No daemon: the worker owns its live sandbox, as `warden serve` does.
                env = {**keep, "WARDEN_HOME": str(Path(tmp) / f"home{i}"), "PYTHONPATH": str(src),
                       "WARDEN_DAEMON": "0"}
                proc = subprocess.Popen([sys.executable, "-c", WORKER, env["WARDEN_HOME"], json.dumps(env)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    raise SystemExit(f"the {label} worker did not start")
                workers[label] = proc
            samples: dict[str, dict[str, list[float]]] = {label: {k: [] for k in KEYS} for label in trees}
            raw, raw_ms = raw_bwrap_argv(), []
            for turn in range(args.n):
                start = time.perf_counter()  # the floor of any sandbox, in the same turns
                subprocess.run(raw, check=True)
                raw_ms.append((time.perf_counter() - start) * 1000)
                for label, proc in (workers.items() if turn % 2 else reversed(workers.items())):
                    assert proc.stdin is not None and proc.stdout is not None
                    for kind in ("time", "count"):
                        proc.stdin.write(kind + "\n")
                        proc.stdin.flush()
                        for key, value in json.loads(proc.stdout.readline()).items():
                            samples[label][key].append(value)
        finally:
            for proc in workers.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(60)
    labels = list(trees)
    print(f"per exec, median of {args.n}{'':12} " + " ".join(f"{label:>16}" for label in labels) + f" {'ratio':>7}")
    for key in KEYS:
        meds = [statistics.median(samples[label][key] or [0]) for label in labels]
        ratio = f"{meds[1] / meds[0]:7.2f}" if meds[0] else ""
        print(f"{key:34} " + " ".join(f"{m:16.2f}" for m in meds) + f" {ratio:>7}")
    raw_median = statistics.median(raw_ms)
    walls = ", ".join(f"{label} {statistics.median(samples[label]['wall ms']) / raw_median:.2f}x" for label in labels)
    print(f"\nraw bwrap ... true, wall ms median: {raw_median:.2f}; in-process exec wall vs it: {walls} "
          "(issue #11 target <= 0.5x)")
    print(f"load average (other processes share the machine): {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
