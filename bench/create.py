"""How fast a workspace is ready, for the `default` template, against the plain ways.

Prints one table of medians, all measured in this run with warm caches:
  naive          python -m venv + pip install (a fresh install)
  snapshot cp -a copying a prebuilt venv (restoring a snapshot)
  uv offline     uv venv + uv pip install --offline from the lock
  Warden.create  in a warm Python process (layer already built)
  warden create  the command, from a shell
and the time of `import pandas, matplotlib` inside `warden run` against a plain venv.

Usage: .venv/bin/python bench/create.py [--runs N] [--naive-runs N] [--home DIR]
Needs PyPI and the npm registry once (to build the layers and the baselines).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from warden import Warden
from warden.adapters.envs.interpreters import find_python, uv_binary

IMPORT = ("import time; t = time.perf_counter(); import pandas, matplotlib; "
          "print(time.perf_counter() - t)")


def timed(fn, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        started = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - started)
    return out


def run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--naive-runs", type=int, default=1)
    parser.add_argument("--home", default=os.environ.get(
        "WARDEN_BENCH_HOME", os.path.join(tempfile.gettempdir(), "warden-bench-create")))
    args = parser.parse_args()
    home = Path(args.home)
    scratch = home / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = {**os.environ, "WARDEN_HOME": str(home / "warden")}
    uv = uv_binary()

    w = Warden.open(home / "warden", environ=env)
    print("building the default template's layers (once; later runs reuse them)...", file=sys.stderr)
    built = w.app.layers.build("default")
    resolution, layers = built.resolution, built.layers
    assert resolution.python is not None and layers.python is not None
    interp = find_python(resolution.python.interpreter.version.rsplit(".", 1)[0], env)
    lock = Path(layers.python.path) / "requirements.lock"
    deps = list(resolution.template.python.dependencies)

    # Baselines --------------------------------------------------------------------------
    def naive(i: int) -> None:
        venv = scratch / f"naive-{i}"
        run([interp.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin/pip"), "install", "--disable-pip-version-check", "-q", *deps])

    print("timing the naive install (python -m venv + pip)...", file=sys.stderr)
    naive_t = timed(naive, args.naive_runs)

    prebuilt = scratch / "prebuilt"
    run([uv, "venv", "--python", interp.executable, "-q", str(prebuilt)])
    # Compiled bytecode, as in the layer, so the import comparison is fair (PYTHONDONTWRITEBYTECODE).
    run([uv, "pip", "install", "--python", str(prebuilt / "bin/python"), "--link-mode=copy", "--compile-bytecode",
         "-q", "-r", str(lock)])
    cp_t = timed(lambda i: run(["cp", "-a", str(prebuilt), str(scratch / f"cp-{i}")]), args.runs)

    def uv_offline(i: int) -> None:
        venv = scratch / f"uv-{i}"
        run([uv, "venv", "--python", interp.executable, "-q", str(venv)])
        run([uv, "pip", "install", "--offline", "--python", str(venv / "bin/python"), "-q", "-r", str(lock)])

    uv_t = timed(uv_offline, args.runs)

    # Warden -----------------------------------------------------------------------------
    prefix = f"b{os.getpid()}"
    w.create(f"{prefix}-warm", template="default")  # first call pays imports and caches
    api_t = timed(lambda i: w.create(f"{prefix}-api-{i}", template="default"), max(args.runs, 20))
    warden = [sys.executable, "-m", "warden"]
    cli_t = timed(lambda i: run([*warden, "create", f"{prefix}-cli-{i}", "--template", "default"], env=env),
                  args.runs)

    # Import time inside `warden run` (thin venv on the layer) vs a plain venv ------------------
    ws = f"{prefix}-api-0"
    inside, plain = [], []
    for _ in range(max(10, args.runs)):  # interleaved; import times are noisy on 2 cores
        out = run([*warden, "run", ws, "--json", "--", "python", "-c", IMPORT], env=env)
        inside.append(float(json.loads(out.stdout)["data"]["stdout"]))
        plain.append(float(run([str(prebuilt / "bin/python"), "-c", IMPORT]).stdout))
    # --memory 8G: V8 reserves several GiB of address space for WebAssembly (undici), and
    # the sandbox's address-space backstop is 4x --memory.
    node = run([*warden, "run", ws, "--memory", "8G", "--", "node", "-e", "require('axios'); console.log('ok')"],
               env=env).stdout.strip()

    med = statistics.median
    snapshot = med(cp_t)
    rows = [
        ("naive: python -m venv + pip install", naive_t),
        ("snapshot: cp -a prebuilt venv", cp_t),
        ("uv venv + uv pip install --offline", uv_t),
        ("Warden.create() in a warm process", api_t),
        ("`warden create` command", cli_t),
    ]
    print(f"\ndefault template: {len(deps)} Python deps ({len(layers.python.packages)} packages), "
          f"Node {', '.join(layers.node.packages) if layers.node else '-'}; Python {interp.version}")
    print(f"{'way to a ready workspace':42} {'runs':>4} {'median':>10} {'vs cp -a':>9}")
    for label, values in rows:
        print(f"{label:42} {len(values):>4} {med(values) * 1000:>8.1f}ms {snapshot / med(values):>8.1f}x")
    print(f"\n{'import pandas, matplotlib':42} {'runs':>4} {'median':>10} {'ratio':>9}")
    print(f"{'plain venv (host)':42} {len(plain):>4} {med(plain) * 1000:>8.1f}ms {1:>8.2f}x")
    print(f"{'thin venv on layer, inside warden run':42} {len(inside):>4} {med(inside) * 1000:>8.1f}ms "
          f"{med(inside) / med(plain):>8.2f}x")
    print(f"node require('axios') inside warden run: {node}")
    targets = [("Warden.create() median <= 50 ms", med(api_t) <= 0.050),
               ("Warden.create() >= 10x faster than cp -a", snapshot / med(api_t) >= 10),
               ("`warden create` <= 300 ms", med(cli_t) <= 0.300),
               ("import time <= 1.1x plain venv", med(inside) <= 1.1 * med(plain))]
    print("\n" + "\n".join(f"[{'met' if ok else 'MISSED'}] {text}" for text, ok in targets))



def cleanup(home: Path) -> None:
    """Remove every workspace a run of this benchmark made (also after a failed run)."""
    env = {**os.environ, "WARDEN_HOME": str(home / "warden")}
    with Warden.open(home / "warden", environ=env) as w:
        for ws in w.list():
            if ws.name.startswith("b") and "-" in ws.name:
                w.destroy(ws.name, archive=False)
    shutil.rmtree(home / "scratch", ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup(Path(os.environ.get("WARDEN_BENCH_HOME", os.path.join(tempfile.gettempdir(), "warden-bench-create"))))
