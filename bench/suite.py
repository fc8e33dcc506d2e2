"""The test suite's wall time against an older tree's, on the same tests, in one run.

    .venv/bin/python bench/suite.py --base REV [--pairs 2] [--keep]

The older tree (`REV`, checked out in a temporary worktree with its own `scripts/setup --dev`)
and this one each run the tests whose ids both collect, each the way its own `scripts/test`
runs pytest (this tree: `-n $WARDEN_TEST_WORKERS` (4) `--dist loadscope`, bytecode written; an
older one: what its pyproject's addopts say), alternating base, this, base, this ... so that the
machine's load falls on both alike. Prints each run and the ratio of the medians. Lint and type
checks are not timed. Expect several minutes per run.
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


def _ids(tree: Path, environ: dict[str, str]) -> set[str]:
    listed = subprocess.run([str(tree / ".venv/bin/pytest"), "--collect-only", "-q", "-p", "no:cacheprovider"],
                            cwd=tree, env=environ, capture_output=True, text=True, check=False)
    return {line for line in listed.stdout.splitlines() if "::" in line}


def _run(tree: Path, args: list[str], ids_file: Path, environ: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run([str(tree / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider", *args, f"@{ids_file}"],
                          cwd=tree, env=environ, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    return time.monotonic() - started, (lines[-1] if lines else f"exit {done.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the older commit to compare with")
    parser.add_argument("--pairs", type=int, default=2, help="runs of each tree (alternating)")
    parser.add_argument("--keep", action="store_true", help="keep the older tree's worktree")
    opts = parser.parse_args()
    workers = os.environ.get("WARDEN_TEST_WORKERS", "4")
    base_env = {**os.environ, "CI": "true"}
    head_env = {k: v for k, v in base_env.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as scripts/test
    scratch = Path(tempfile.mkdtemp(prefix="warden-suite-"))
    base = scratch / "base"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), opts.base], cwd=REPO, check=True)
    try:
        subprocess.run(["bash", "scripts/setup", "--dev"], cwd=base, env=base_env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        common = sorted(_ids(base, base_env) & _ids(REPO, head_env))
        if not common:
            sys.exit("the two trees share no test ids")
        ids_file = scratch / "ids.txt"
        ids_file.write_text("\n".join(common) + "\n")
        print(f"{len(common)} tests both trees collect; {opts.pairs} runs each, alternating\n")
        print(f"{'run':>3}  {'tree':<8} {'wall s':>8}  result")
        walls: dict[str, list[float]] = {"base": [], "this": []}
        for n in range(opts.pairs):
            for name, tree, args, environ in (("base", base, [], base_env),
                                              ("this", REPO, ["-n", workers, "--dist", "loadscope"], head_env)):
                wall, result = _run(tree, args, ids_file, environ)
                walls[name].append(wall)
                print(f"{n + 1:>3}  {name:<8} {wall:>8.1f}  {result}", flush=True)
        b, h = statistics.median(walls["base"]), statistics.median(walls["this"])
        print(f"\nmedian: base {b:.1f} s ({opts.base}), this tree {h:.1f} s: {h / b:.2f}x")
    finally:
        if not opts.keep:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False)
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
