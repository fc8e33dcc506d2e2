"""The run path of this tree against an earlier commit's, alternating, in one run.

    .venv/bin/python bench/exec_ab.py [--base REV] [-n 30] [--live] [--no-cli]

The base commit's `src/` is taken from git into a temporary folder. Each tree gets a worker
process (its own home and `minimal` workspace) that times `Workspace.run(["true"])` on demand,
and `python -m warden run bench -- true` is timed from each tree's code in a second home, whose
registry no other process holds open (as for a person typing commands: the last connection's
close then makes SQLite checkpoint); the two trees take turns, call by call, so both see the
same machine load. Rows: medians and p90 per tree, and
this tree's median as a ratio of the base's (target: within +10%). `--live`: a detached `sleep`
keeps each home's live sandbox up first, so both rows run in it, and the CLI goes through each
home's daemon once it listens (as `warden run` does for a person after their first command).
`--no-cli`: the in-process rows alone, back to back (no process start between two runs).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import stop_daemon  # noqa: E402

WORKER = r"""
import json, sys, time
from pathlib import Path
from warden import Warden
home = Path(sys.argv[1])
env = json.loads(sys.argv[2])
with Warden.open(home, environ=env) as w:
    ws = w.create("bench", template="minimal")
    ws.run(["true"])
    print("ready", flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        assert ws.run(["true"]).exit_code == 0
        print((time.perf_counter() - start) * 1000, flush=True)
"""


def tree_of(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into)  # git archive of this very repository
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="ba1cb12", help="the commit to compare with")
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("--live", action="store_true", help="run both rows in each home's live sandbox")
    parser.add_argument("--no-cli", action="store_true",
                        help="time Workspace.run alone: a CLI call between two runs (a whole process start) "
                             "leaves the next run cold, and its median moves with the CLI's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base " + args.base: tree_of(args.base, Path(tmp) / "base"), "this tree": REPO / "src"}
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
        workers, envs, worker_envs = {}, {}, {}
        for i, (label, src) in enumerate(trees.items()):
            env = {**keep, "WARDEN_HOME": str(Path(tmp) / f"home{i}"), "PYTHONPATH": str(src)}
            worker_envs[label] = env
            envs[label] = {**env, "WARDEN_HOME": str(Path(tmp) / f"cli{i}")}
            subprocess.run([sys.executable, "-m", "warden", "create", "bench", "--template", "minimal"],
                           check=True, env=envs[label], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            proc = subprocess.Popen([sys.executable, "-c", WORKER, env["WARDEN_HOME"], json.dumps(env)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            workers[label] = proc
        if args.live:
            for env in [*worker_envs.values(), *envs.values()]:
                subprocess.run([sys.executable, "-m", "warden", "run", "bench", "--detach", "--", "sleep", "600"],
                               check=True, env=env, stdout=subprocess.DEVNULL)
                _until_daemon(Path(env["WARDEN_HOME"]), env)
        warm: dict[str, list[float]] = {label: [] for label in trees}
        cli: dict[str, list[float]] = {label: [] for label in trees}
        for _ in range(args.n + 1):
            for label, proc in workers.items():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                warm[label].append(float(proc.stdout.readline()))
                if args.no_cli:
                    continue
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "warden", "run", "bench", "--", "true"], check=True,
                               env=envs[label])
                cli[label].append((time.perf_counter() - start) * 1000)
        for proc in workers.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        for env in [*worker_envs.values(), *envs.values()]:
            _end_home(Path(env["WARDEN_HOME"]), env)
    print(f"{'what':56} {'median ms':>10} {'p90 ms':>8} {'x base':>8}")
    tables = (('Workspace.run(["true"]) warm', warm), ("python -m warden run bench -- true", cli))
    for title, table in tables[:1] if args.no_cli else tables:
        base_median = statistics.median(table["base " + args.base][1:])
        for label, times in table.items():
            times = times[1:]  # the first call of each is a warm-up
            med = statistics.median(times)
            p90 = sorted(times)[int(len(times) * 0.9) - 1]
            print(f"{title + ' (' + label + ')':56} {med:10.1f} {p90:8.1f} {med / base_median:8.2f}")


def _until_daemon(home: Path, env: dict[str, str]) -> None:
    """Commands until the home's daemon listens (the first starts it), so the timed ones go through it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        subprocess.run([sys.executable, "-m", "warden", "run", "bench", "--", "true"], check=True, env=env)
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(str(home / "run" / "daemon.sock")) == 0:
                time.sleep(0.5)  # its spare forked
                return
        time.sleep(0.2)
    raise SystemExit("the home's daemon did not start")


def _end_home(home: Path, env: dict[str, str]) -> None:
    """Stop the home's live sandbox with its detached process (a suspend: killed, the sandbox
    ended; killed alone, its sandbox stayed up to an hour for its uncollected output, its home
    gone) and end the home's daemon (its folder goes with the run)."""
    subprocess.run([sys.executable, "-m", "warden", "suspend", "bench"], env={**env, "WARDEN_DAEMON": "0"},
                   capture_output=True, check=False)
    stop_daemon(home)

if __name__ == "__main__":
    main()
