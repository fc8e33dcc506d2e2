"""What following uv package by package costs a layer build (issue #15), measured in one run.

Builds the same Python layer (N local wheels, offline) with `warden snapshot build T` in fresh
homes, alternating:
  bar     stderr a pipe: the bar on, uv asked for its per-package log (RUST_LOG), read line by line
  --json  no bar: uv runs as it did before the per-package bar (no log asked, nothing read)
and, for reference, the same `uv pip install` outside Warden (no sandbox) with and without the log.
Prints the medians; the difference is the bar's cost.

Usage: .venv/bin/python bench/progress.py [--packages N] [--runs N]
Needs bwrap and uv; no network (wheels are written locally).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from tests.support.packages import make_wheel  # noqa: E402

from warden.adapters.envs.interpreters import uv_binary  # noqa: E402
from warden.core.layers import UV_PROGRESS_LOG  # noqa: E402

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", type=int, default=60)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="warden-bench-progress-"))
    try:
        wheels = root / "wheels"
        names = [f"bp{i:03d}" for i in range(args.packages)]
        for name in names:  # a few files each, as small real packages have
            make_wheel(wheels, name, "1.0", files={f"{name}/{m}.py": f"X = {'1' * 2000}\n" for m in "abcdefgh"})
        deps = "".join(f"    - {name}\n" for name in names)
        template = f"name: bench\npython:\n  version: \"{PYTHON}\"\n  dependencies:\n{deps}"
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "PYENV_ROOT")}
        base.update({"WARDEN_ENVS_FIND_LINKS": str(wheels), "WARDEN_ENVS_NO_INDEX": "1", "HOME": str(root)})

        def build(i: int, json: bool) -> float:
            home = root / f"home-{i}-{'json' if json else 'bar'}"
            env = {**base, "WARDEN_HOME": str(home)}
            subprocess.run([sys.executable, "-m", "warden", "init"], env=env, check=True, capture_output=True)
            (home / "templates").mkdir(exist_ok=True)
            (home / "templates" / "bench.yaml").write_text(template)
            argv = [sys.executable, "-m", "warden", "snapshot", "build", "bench", *(["--json"] if json else [])]
            started = time.perf_counter()
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            took = time.perf_counter() - started
            if proc.returncode != 0:
                raise SystemExit(proc.stderr)
            if not json and i == 0:
                print(proc.stderr, file=sys.stderr)  # what a log shows, once
            shutil.rmtree(home, ignore_errors=True)
            return took

        uv = uv_binary()
        cache = root / "uv-cache"
        lock = root / "req.txt"
        lock.write_text("".join(f"{n}==1.0\n" for n in names))

        def plain_uv(i: int, log: bool) -> float:
            venv = root / f"venv-{i}-{log}"
            env = {**base, "UV_CACHE_DIR": str(cache), "UV_NO_PROGRESS": "1"}
            subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], env=env, check=True)
            if log:
                env["RUST_LOG"] = UV_PROGRESS_LOG
            started = time.perf_counter()
            subprocess.run([uv, "pip", "sync", str(lock), "--python", str(venv / "bin" / "python"), "--offline",
                            "--no-index", "--find-links", str(wheels), "--link-mode=copy", "--compile-bytecode",
                            "--quiet"], env=env, check=True, capture_output=True)
            took = time.perf_counter() - started
            shutil.rmtree(venv)
            return took

        bar, quiet, logged, plain = [], [], [], []
        for i in range(args.runs):  # interleaved, the order swapped each round: 2 busy cores drift
            pair = [(bar, False), (quiet, True)] if i % 2 == 0 else [(quiet, True), (bar, False)]
            for out, json in pair:
                out.append(build(i, json))
            for out, log in ([(logged, True), (plain, False)] if i % 2 == 0 else [(plain, False), (logged, True)]):
                out.append(plain_uv(i, log))
        med = statistics.median
        print(f"{args.packages} packages, {args.runs} runs each, medians (min):")
        for label, times in (("warden snapshot build, bar (uv log read)", bar),
                             ("warden snapshot build --json (no bar)", quiet),
                             ("uv pip sync with RUST_LOG, no sandbox", logged),
                             ("uv pip sync plain, no sandbox", plain)):
            print(f"  {label:44s} {med(times):6.2f}s ({min(times):.2f}s)")
        print(f"  bar's cost on the build: {med(bar) - med(quiet):+.2f}s; "
              f"uv's log alone: {med(logged) - med(plain):+.3f}s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
