"""What the workspace disk quota adds to a plain run, and how far a writer gets past it.

    .venv/bin/python bench/quota.py [-n 40] [--files 0]

Cost: `Workspace.run(["true"])` in a warm process, alternately with the quota (a free-space
check, one walk of the workspace with an inotify watch per folder, a watcher thread) and with
it switched off in the same process; `--files N` first fills the workspace with N files in
N/100 folders. Target: the run stays within +10% of the run without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home, measure  # noqa: E402


class _Off:
    """The quota switched off: no free-space check, no walk, no watcher."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def check_free(self) -> None:
        pass

    def watch(self, path: str) -> Any:
        from warden.core.quota import Usage

        class Null:
            start = Usage(0, 0)
            breach = None
            notes: tuple[str, ...] = ()

            def __enter__(self) -> Null:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def arm(self, stop: object) -> None:
                pass

        return Null()

    def capped(self, limits: Any, start: Any) -> Any:
        return limits

    def stop_note(self, watcher: Any, workspace: str, exit_code: int) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=40)
    parser.add_argument("--files", type=int, default=0)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden
    from warden.adapters.disk_usage import measure as walk

    with tempfile.TemporaryDirectory() as tmp:
        home, env = bench_home(tmp)
        with Warden.open(home, environ=env) as w:
            ws = w.create("bench", template="minimal")
            for i in range(args.files):
                folder = Path(ws.path) / "fill" / f"d{i // 100}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"f{i}").write_bytes(b"x" * 100)
            app = w.app  # the bench swaps one service
            real = app.quota
            off = _Off(real)
            usage = walk(os.path.realpath(ws.path))

            def run() -> None:
                assert ws.run(["true"]).exit_code == 0

            on_times: list[float] = []
            off_times: list[float] = []
            run()
            for _ in range(args.n):  # alternate, so both see the same machine load
                app.__dict__["quota"] = real
                on_times += measure(run, 1)
                app.__dict__["quota"] = off
                off_times += measure(run, 1)
            app.__dict__["quota"] = real
            walk_ms = measure(lambda: walk(os.path.realpath(ws.path)), 20)
        # The CLI, a fresh process per run, both through `python -c` (one of them switching the
        # quota off before main()), alternately.
        entry = "import sys; from warden.interfaces.cli.main import main; sys.argv[0] = 'warden'; "
        both = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import quota, "
                "warden.bootstrap as b; ")  # the same imports either way
        off_entry = both + "b.App.quota = property(lambda app: quota._Off(None)); "
        argv = ["run", "bench", "--", "true"]
        cli_on = [sys.executable, "-c", both + entry + "sys.exit(main(sys.argv[1:]))", *argv]
        cli_off = [sys.executable, "-c", off_entry + entry + "sys.exit(main(sys.argv[1:]))", *argv]
        cli_env = {**env, "PYTHONPATH": str(REPO / "src")}
        cli_on_times: list[float] = []
        cli_off_times: list[float] = []
        for _ in range(max(5, args.n // 4)):
            cli_on_times += measure(lambda: subprocess.run(cli_on, check=True, env=cli_env), 1)
            cli_off_times += measure(lambda: subprocess.run(cli_off, check=True, env=cli_env), 1)
    on, without = statistics.median(on_times), statistics.median(off_times)
    print(f"workspace: {usage.files} files, {usage.bytes / 1024:.0f} KiB")
    title = 'Workspace.run(["true"])'
    print(f"{title:32} {'median ms':>10} {'p90 ms':>8}")
    for name, times in (("without the quota", off_times), ("with the quota", on_times),
                        ("warden run (CLI) without", cli_off_times), ("warden run (CLI) with", cli_on_times)):
        p90 = sorted(times)[int(len(times) * 0.9) - 1]
        print(f"{name:32} {statistics.median(times):10.2f} {p90:8.2f}")
    print(f"one walk (measure) alone         {statistics.median(walk_ms):10.2f}")
    paired = statistics.median(a - b for a, b in zip(on_times, off_times, strict=True))
    print(f"\nquota cost: {on - without:+.2f} ms ({(on / without - 1) * 100:+.1f}%; median of paired "
          f"differences {paired:+.2f} ms), target <= +10%: {'met' if on <= without * 1.10 else 'MISSED'}")
    cli_on, cli_off = statistics.median(cli_on_times), statistics.median(cli_off_times)
    print(f"CLI quota cost: {cli_on - cli_off:+.1f} ms ({(cli_on / cli_off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
