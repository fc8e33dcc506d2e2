"""How much a sandboxed `true` costs, against its baselines measured in the same run.

    .venv/bin/python bench/exec.py [-n 30]

Rows: a bare `true`; a raw `bwrap … true` with the same namespaces (the floor any bwrap
sandbox pays); `Workspace.run(["true"])` in a warm process (seccomp, cgroups, limits,
audit included); `warden run NAME -- true` from a shell (a fresh Python process each
time); and Anthropic's `srt true` when it is installed. Targets: in-process
run <= 2x raw bwrap, CLI median <= 150 ms. The package is byte-compiled first, as an
installed wheel would be (this environment sets PYTHONDONTWRITEBYTECODE).
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home, measure, raw_bwrap_argv  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30)
    n = parser.parse_args().n
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden

    rows: list[tuple[str, list[float]]] = []
    rows.append(("bare true", measure(lambda: subprocess.run(["true"], check=True), n)))
    raw = raw_bwrap_argv()
    with tempfile.TemporaryDirectory() as tmp:
        home, env = bench_home(tmp)
        with Warden.open(home, environ=env) as w:
            ws = w.create("bench", template="minimal")

            def in_process() -> None:
                assert ws.run(["true"]).exit_code == 0

            # Raw bwrap and the in-process run alternate, so both see the same machine load.
            raw_times: list[float] = []
            run_times: list[float] = []
            in_process()
            for _ in range(n):
                raw_times += measure(lambda: subprocess.run(raw, check=True), 1)
                run_times += measure(in_process, 1)
            rows.append(("raw bwrap ... true", raw_times))
            rows.append(('Workspace.run(["true"]) warm', run_times))
        # The console script, as a user types it in a shell (`python -m` adds runpy on top).
        script = Path(sys.executable).with_name("warden")
        entry = [str(script)] if script.exists() else [sys.executable, "-m", "warden"]
        cli = [*entry, "run", "bench", "--", "true"]
        rows.append(("warden run bench -- true", measure(
            lambda: subprocess.run(cli, check=True, env=env), n)))
        if shutil.which("srt"):
            rows.append(("srt true", measure(lambda: subprocess.run(["srt", "true"], cwd=tmp, check=False,
                                                                     capture_output=True), max(5, n // 3))))
        else:
            print("srt not installed (npm install -g @anthropic-ai/sandbox-runtime; needs socat, ripgrep)")
    raw_median = statistics.median(rows[1][1])
    print(f"{'what':34} {'median ms':>10} {'p90 ms':>8} {'x raw bwrap':>12}")
    for name, times in rows:
        med = statistics.median(times)
        p90 = sorted(times)[int(len(times) * 0.9) - 1]
        print(f"{name:34} {med:10.1f} {p90:8.1f} {med / raw_median:12.2f}")
    in_proc = statistics.median(rows[2][1])
    cli_med = statistics.median(rows[3][1])
    print(f"\ntarget in-process <= 2x raw bwrap: {in_proc / raw_median:.2f}x "
          f"({'met' if in_proc <= 2 * raw_median else 'MISSED'})")
    print(f"target CLI median <= 150 ms: {cli_med:.0f} ms ({'met' if cli_med <= 150 else 'MISSED'})")


if __name__ == "__main__":
    main()
