"""How much a sandboxed `true` costs, against its baselines measured in the same run.

    .venv/bin/python bench/exec.py [-n 30] [--spaced MS]

Rows: a bare `true`; a raw `bwrap … true` with the same namespaces (the floor any bwrap
sandbox pays); `Workspace.run(["true"])` in a warm process (seccomp, cgroups, limits, audit
included), in a fresh sandbox and in the person's live sandbox (one a detached process keeps
up); `warden run NAME -- true` from a shell (a fresh Python process each time) running the
command itself (`WARDEN_DAEMON=0`, as before the daemon) and through the home's daemon, in a
fresh and in the live sandbox, by `warden` as installed (the native client where scripts/setup
could build it) and, in the live sandbox, by the Python client (entry.py's `main`, as its console
script starts it: `python -m` would add runpy's import, ~9 ms); and Anthropic's `srt true` when it
is installed. Targets:
in-process run <= 2x raw bwrap, in-process in a live sandbox <= 0.5x raw bwrap, CLI through
the daemon <= 40 ms. The CLI rows use a home of their own whose registry no other process
holds open, as for a person typing commands (the last connection's close then makes SQLite
checkpoint); the in-process rows, the benchmark's own. The package is byte-compiled first, as
an installed wheel would be (this environment sets PYTHONDONTWRITEBYTECODE).
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home, measure, raw_bwrap_argv, stop_daemon  # noqa: E402


def _wait_for_daemon(home: Path) -> None:
    path = home / "run" / "daemon.sock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(str(path)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("the home's daemon did not start")


def _alternate(n: int, *fns: Callable[[], object], gap: float = 0.0) -> list[list[float]]:
    """Each callable `n` times, taking turns, so all see the same machine load; `gap` seconds
    of nothing before each call (not timed), as between an agent's commands."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()  # warm-up
    for _ in range(n):
        for index, fn in enumerate(fns):
            time.sleep(gap)
            start = time.perf_counter()
            fn()
            times[index].append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("--spaced", type=float, default=0.0, metavar="MS",
                        help="a pause before each timed call, as between an agent's commands (cgroup v1 moves "
                             "then wait for the kernel: back-to-back calls hide that)")
    opts = parser.parse_args()
    n, gap = opts.n, opts.spaced / 1000
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden

    rows: list[tuple[str, list[float]]] = []
    rows.append(("bare true", measure(lambda: subprocess.run(["true"], check=True), n)))
    raw = raw_bwrap_argv()
    # `warden` as a user types it in a shell: the native client, or the console script where
    # scripts/setup had no compiler (`python -m` adds runpy on top).
    script = Path(sys.executable).with_name("warden")
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "warden"]
    # The Python client as its console script starts it, whichever `warden` is installed.
    python_client = [sys.executable, "-P", "-c", "from warden.interfaces.cli.entry import main; main()"]
    with tempfile.TemporaryDirectory() as tmp:
        home, env = bench_home(tmp)
        cli_home, cli_env = bench_home(str(Path(tmp) / "cli"))
        alone_env = {**cli_env, "WARDEN_DAEMON": "0"}
        cli = [*entry, "run", "bench", "--", "true"]
        subprocess.run([*entry, "create", "bench", "--template", "minimal"], check=True, env=alone_env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def raw_bwrap() -> None:
            subprocess.run(raw, check=True)

        def cli_alone() -> None:
            subprocess.run(cli, check=True, env=alone_env, stdin=subprocess.DEVNULL)

        def cli_daemon() -> None:
            subprocess.run(cli, check=True, env=cli_env, stdin=subprocess.DEVNULL)

        def cli_daemon_python() -> None:
            subprocess.run([*python_client, *cli[1:]], check=True, env=cli_env, stdin=subprocess.DEVNULL)

        with Warden.open(home, environ=env) as w:
            ws = w.create("bench", template="minimal")

            def in_process() -> None:
                assert ws.run(["true"]).exit_code == 0

            cli_daemon()  # starts the CLI home's daemon
            _wait_for_daemon(cli_home)
            fresh = _alternate(n, raw_bwrap, in_process, cli_alone, cli_daemon, gap=gap)
            # A detached process keeps the person's live sandbox up, in each home: their commands run in it.
            homes = [{**env, "WARDEN_DAEMON": "0"}, alone_env]
            for each in homes:
                subprocess.run([*entry, "run", "bench", "--detach", "--", "sleep", "600"], check=True,
                               env=each, stdout=subprocess.DEVNULL)
            try:
                live = _alternate(n, raw_bwrap, in_process, cli_daemon, cli_daemon_python, gap=gap)
            finally:
                for each in homes:
                    # A suspend stops the live sandbox with its detached process: killed alone, its
                    # sandbox stayed up to an hour for its uncollected output, its home gone.
                    subprocess.run([*entry, "suspend", "bench"], env={**each, "WARDEN_DAEMON": "0"},
                                   capture_output=True, check=False)
            stop_daemon(cli_home)
        rows += [("raw bwrap ... true", fresh[0] + live[0]),
                 ('Workspace.run(["true"]) warm', fresh[1]),
                 ('Workspace.run(["true"]) warm, live', live[1]),
                 ("warden run (WARDEN_DAEMON=0)", fresh[2]),
                 ("warden run, daemon", fresh[3]),
                 ("warden run, daemon, live", live[2]),
                 ("warden run, daemon, live (Python client)", live[3])]
        if shutil.which("srt"):
            rows.append(("srt true", measure(lambda: subprocess.run(["srt", "true"], cwd=tmp, check=False,
                                                                     capture_output=True), max(5, n // 3))))
        else:
            print("srt not installed (npm install -g @anthropic-ai/sandbox-runtime; needs socat, ripgrep)")
    medians = {name: statistics.median(times) for name, times in rows}
    raw_median = medians["raw bwrap ... true"]
    print(f"{'what':42} {'median ms':>10} {'p90 ms':>8} {'x raw bwrap':>12}")
    for name, times in rows:
        p90 = sorted(times)[int(len(times) * 0.9) - 1]
        print(f"{name:42} {medians[name]:10.1f} {p90:8.1f} {medians[name] / raw_median:12.2f}")
    in_proc = medians['Workspace.run(["true"]) warm']
    in_live = medians['Workspace.run(["true"]) warm, live']
    cli_med = min(medians["warden run, daemon"], medians["warden run, daemon, live"])
    print(f"\ntarget in-process <= 2x raw bwrap: {in_proc / raw_median:.2f}x "
          f"({'met' if in_proc <= 2 * raw_median else 'MISSED'})")
    print(f"target in-process in a live sandbox <= 0.5x raw bwrap: {in_live / raw_median:.2f}x "
          f"({'met' if in_live <= 0.5 * raw_median else 'MISSED'})")
    print(f"target CLI through the daemon <= 40 ms: {cli_med:.0f} ms ({'met' if cli_med <= 40 else 'MISSED'}); "
          f"running the command itself: {medians['warden run (WARDEN_DAEMON=0)']:.0f} ms; through the Python "
          f"client (live): {medians['warden run, daemon, live (Python client)']:.0f} ms")


if __name__ == "__main__":
    main()
