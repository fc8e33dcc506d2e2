"""How long a file change takes to reach a watcher, and what a run's change summary costs.

    .venv/bin/python bench/watch.py [-n 50]

Latency from a write to its event (median and p95 over `n` writes, each its own burst: the next
write waits until the event came and 150 ms more), measured in the same run for:
- raw watchfiles (Rust notify) with the same 100 ms quiet window (step 100 ms), and with its
  default step (50 ms): the baseline;
- Warden's inotify feed in process (adapters/watcher.py, what `warden watch` runs), with 1 ms of
  quiet (what the mechanism itself costs) and with the real 100 ms;
- `warden watch NAME --json` as a subprocess, reading its lines;
- `GET /v1/workspaces/NAME/events` of a `warden serve`, reading its events.
Every figure but the 1 ms row includes the quiet that ends a burst (seed 002's 100 ms debounce).

Then `Workspace.run(["true"])` (and a command writing 10 files) in a warm process, with the change
summary in its audit event and with it patched out, taking turns (same machine load).

And why the baseline is not what Warden runs: how many folders each watches for a workspace
holding a link to a folder outside it (watchfiles follows the link). `--flood N`: a bot making N
files at once, and what the watcher's memory does meanwhile (bounded: batches keep 1000 paths).
`--storm N` (`--storm-only`): a folder of N folders renamed back and forth 500 times at once, and
the CPU the feed spends on it against one walk of the tree.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home  # noqa: E402

GAP_S = 0.15  # after an event, before the next write: each write is a burst of its own


def _latencies(n: int, folder: Path, wait_event: Callable[[], object]) -> list[float]:
    """Milliseconds from each of `n` writes in `folder` to `wait_event()` returning."""
    times = []
    for i in range(n + 1):
        start = time.perf_counter()
        (folder / f"lat{i}.txt").write_text("x")
        wait_event()
        if i:  # the first is a warm-up
            times.append((time.perf_counter() - start) * 1000)
        time.sleep(GAP_S)
    return times


def _watchfiles(n: int, folder: Path, step_ms: int = 100) -> list[float]:
    from watchfiles._rust_notify import RustNotify

    notify = RustNotify([str(folder)], False, False, 300, True, False)
    try:
        return _latencies(n, folder, lambda: notify.watch(1600, step_ms, 10_000, None))
    finally:
        notify.close()


def _feed(n: int, folder: Path, debounce_s: float = 0.1) -> list[float]:
    from warden.adapters.watcher import InotifyWatcher

    with InotifyWatcher().watch(str(folder), debounce_s=debounce_s, max_wait_s=1.0, limit=1000) as feed:
        return _latencies(n, folder, lambda: feed.next(10))


def _cli(n: int, folder: Path, entry: list[str], env: dict[str, str]) -> list[float]:
    proc = subprocess.Popen([*entry, "watch", "bench", "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        proc.stderr.readline()  # "watching bench": changes count from now
        return _latencies(n, folder, proc.stdout.readline)
    finally:
        proc.terminate()
        proc.wait()


def _sse(n: int, folder: Path, url: str, token: str) -> list[float]:
    import httpx

    with httpx.stream("GET", f"{url}/v1/workspaces/bench/events", headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as response:
        lines = response.iter_lines()

        def next_change() -> None:
            for line in lines:
                if line.startswith("event: change"):
                    return

        assert next(lines) == ": watching"
        return _latencies(n, folder, next_change)


@contextlib.contextmanager
def _serve(entry: list[str], env: dict[str, str], log: Path) -> Iterator[str]:
    with open(log, "wb") as out:
        proc = subprocess.Popen([*entry, "serve", "--port", "0"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = re.search(rb"listening on (http://127\.0\.0\.1:\d+)", log.read_bytes())
            if found:
                yield found.group(1).decode()
                return
            time.sleep(0.05)
        raise SystemExit("warden serve did not start: " + log.read_text())
    finally:
        proc.terminate()
        proc.wait()


def _watched_folders(tmp: str) -> tuple[int, int]:
    """(watchfiles, Warden) folders watched for a workspace of 3 folders with a link to a folder
    outside holding 20 more."""
    from watchfiles._rust_notify import RustNotify

    from warden.adapters.watcher import InotifyWatcher

    root = Path(tmp) / "links"
    for sub in ("ws/a", "ws/b", *(f"outside/d{i}" for i in range(20))):
        (root / sub).mkdir(parents=True)
    (root / "ws" / "link").symlink_to(root / "outside")

    def watches() -> int:
        total = 0
        for fd in os.listdir("/proc/self/fdinfo"):
            with contextlib.suppress(OSError):
                total += Path(f"/proc/self/fdinfo/{fd}").read_text().count("inotify wd:")
        return total

    before = watches()
    notify = RustNotify([str(root / "ws")], False, False, 300, True, False)
    theirs = watches() - before
    notify.close()
    time.sleep(0.2)
    before = watches()
    with InotifyWatcher().watch(str(root / "ws"), debounce_s=0.1, max_wait_s=1.0, limit=1000):
        ours = watches() - before
    return theirs, ours


def _run_cost(n: int, ws: object) -> list[tuple[str, list[float]]]:
    """Workspace.run with the change summary and with it patched out, taking turns."""
    import warden.adapters.quota as quota

    real_enter, real_last = quota.Watcher.__enter__, quota.Watcher._last_events

    def enter_without(self: quota.Watcher) -> quota.Watcher:
        real_enter(self)
        if self._tree is not None:
            self._tree.on_change = None
        self.changes = None
        return self

    def without() -> None:
        quota.Watcher.__enter__ = enter_without  # type: ignore[method-assign]
        quota.Watcher._last_events = lambda self, tree: None  # type: ignore[method-assign]

    def with_summary() -> None:
        quota.Watcher.__enter__ = real_enter  # type: ignore[method-assign]
        quota.Watcher._last_events = real_last  # type: ignore[method-assign]

    # The summary's own work, without a sandbox's noise: a run's quota watch entered and left
    # (nothing changed, as for `true`), and the same with 10 files written meanwhile.
    from warden.core.quota import Quota

    folder = Path(ws.path)  # type: ignore[attr-defined]
    roomy = Quota(1 << 40, 10_000_000, 0)

    def watch_only(write: bool) -> Callable[[], None]:
        def once() -> None:
            with quota.Watcher(str(folder), roomy, home=None):
                if write:
                    for i in range(10):
                        (folder / f"m{i}").write_text("x")
        return once

    write10 = ["sh", "-c", "for i in 0 1 2 3 4 5 6 7 8 9; do echo x > w$i; done"]
    rows: dict[str, list[float]] = {}
    for write, label in ((False, "nothing changed"), (True, "10 files written")):
        for setup in (with_summary, without):
            setup()
            watch_only(write)()
        for _ in range(n * 4):
            for setup, how in ((with_summary, "with summary"), (without, "without")):
                setup()
                start = time.perf_counter()
                watch_only(write)()
                rows.setdefault(f"quota watch only, {label}, {how}", []).append((time.perf_counter() - start) * 1000)
    for argv, label in ((["true"], "true"), (write10, "10 files written")):
        for setup in (with_summary, without):
            setup()
            ws.run(argv)  # type: ignore[attr-defined]  # warm-up
        for _ in range(n):
            for setup, how in ((with_summary, "with summary"), (without, "without")):
                setup()
                start = time.perf_counter()
                ws.run(argv)  # type: ignore[attr-defined]
                rows.setdefault(f'Workspace.run {label}, {how}', []).append((time.perf_counter() - start) * 1000)
    with_summary()
    return list(rows.items())


def _flood(n: int, tmp: str) -> str:
    """What a watcher holds while a bot makes `n` files as fast as it can (peak RSS growth)."""
    import resource

    from warden.adapters.watcher import InotifyWatcher

    root = Path(tmp) / "flood"
    root.mkdir()
    with InotifyWatcher().watch(str(root), debounce_s=0.1, max_wait_s=1.0, limit=1000) as feed:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        def make() -> None:
            (root / "d").mkdir()
            for i in range(n):
                os.close(os.open(root / "d" / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))

        maker = threading.Thread(target=make)
        start = time.monotonic()
        maker.start()
        batches = counted = 0
        while True:
            batch = feed.next(1.0)
            if batch is None and not maker.is_alive():
                break
            if batch is not None:
                batches, counted = batches + 1, counted + batch.count
        grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    return (f"a flood of {n} files: {batches} batches in {time.monotonic() - start:.1f} s (count {counted}, an "
            f"upper bound past each batch's 1000 paths); the watcher's peak memory grew {grew:.1f} MiB")


def _storm(folders: int, tmp: str, renames: int = 500) -> str:
    """A bot's rename storm: `folders` folders under d/, then d↔e renamed `renames` times at once.
    The feed's CPU time (this thread) until it is quiet again, against one walk of the tree;
    and how late a `next(0.5)` returned at worst (the caller's timeout honoured)."""
    from warden.adapters.watcher import InotifyWatcher

    root = Path(tmp) / "storm"
    outer = max(1, folders // 100)
    for i in range(outer):
        for j in range(100):
            (root / "d" / str(i) / str(j)).mkdir(parents=True)
    cpu = time.thread_time()
    feed = InotifyWatcher().watch(str(root), debounce_s=0.1, max_wait_s=1.0, limit=1000)
    walk = time.thread_time() - cpu
    with feed:
        start = time.monotonic()
        for _ in range(renames // 2):
            (root / "d").rename(root / "e")
            (root / "e").rename(root / "d")
        made = time.monotonic() - start
        cpu, start, late, calls = time.thread_time(), time.monotonic(), 0.0, 0
        while True:
            began = time.monotonic()
            batch = feed.next(0.5)
            late, calls = max(late, time.monotonic() - began - 0.5), calls + 1
            if batch is None and calls > 1:
                break
        spent, took = time.thread_time() - cpu, time.monotonic() - start - 0.5
    return (f"a rename storm ({renames} renames of a folder of {outer * 100 + outer} folders in {made * 1000:.0f} ms): "
            f"the feed spent {spent * 1000:.0f} ms of CPU over {took:.2f} s (one walk of the tree: "
            f"{walk * 1000:.0f} ms); next(0.5) returned at most {late * 1000:.0f} ms late")


def _row(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return f"{name:44} {statistics.median(times):10.2f} {p95:8.2f} {len(times):4}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--flood", type=int, default=0, metavar="FILES",
                        help="also make this many files at once and report the watcher's memory")
    parser.add_argument("--storm", type=int, default=0, metavar="FOLDERS",
                        help="also rename a folder of this many folders back and forth 500 times: the CPU it costs")
    parser.add_argument("--storm-only", action="store_true", help="only the --storm measurement")
    args = parser.parse_args()
    n = args.n
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden

    script = Path(sys.executable).with_name("warden")
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "warden"]
    rows: list[tuple[str, list[float]]] = []
    if args.storm_only:
        with tempfile.TemporaryDirectory() as tmp:
            print(_storm(args.storm or 5000, tmp))
        return
    with tempfile.TemporaryDirectory() as tmp:
        home, env = bench_home(tmp)
        env = {**env, "WARDEN_DAEMON": "0"}
        with Warden.open(home, environ=env) as w:
            ws = w.create("bench", template="minimal")
            folder = home / "workspaces" / "bench"
            subprocess.run([*entry, "bot", "register", "bencher"], env=env, check=True, capture_output=True)
            token = subprocess.run([*entry, "grant", "bench", "bencher", "--permissions", "read"], env=env,
                                   check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            rows.append(("raw watchfiles (step 100 ms)", _watchfiles(n, folder)))
            rows.append(("raw watchfiles (its default step, 50 ms)", _watchfiles(n, folder, 50)))
            rows.append(("Warden inotify feed, 1 ms quiet (mechanism)", _feed(n, folder, 0.001)))
            rows.append(("Warden inotify feed, in process", _feed(n, folder)))
            rows.append(("warden watch --json (subprocess)", _cli(n, folder, entry, env)))
            with _serve(entry, env, Path(tmp) / "serve.log") as url:
                rows.append(("GET …/events (SSE, warden serve)", _sse(n, folder, url, token)))
            print(f"{'write → event':44} {'median ms':>10} {'p95 ms':>8} {'n':>4}")
            for name, times in rows:
                print(_row(name, times))
            print(f"\n{'run cost':44} {'median ms':>10} {'p95 ms':>8} {'n':>4}")
            cost = _run_cost(max(n, 30), ws)
            for name, times in cost:
                print(_row(name, times))
            medians = {name: statistics.median(times) for name, times in cost}
            for label in ("true", "10 files written"):
                extra = medians[f"Workspace.run {label}, with summary"] - medians[f"Workspace.run {label}, without"]
                print(f"summary adds to Workspace.run {label}: {extra:+.2f} ms (target <= 1 ms: "
                      f"{'met' if extra <= 1.0 else 'MISSED'})")
            for label in ("nothing changed", "10 files written"):
                extra = (medians[f"quota watch only, {label}, with summary"]
                         - medians[f"quota watch only, {label}, without"])
                print(f"summary adds to a run's quota watch, {label}: {extra * 1000:+.0f} µs")
        theirs, ours = _watched_folders(tmp)
        print(f"\nfolders watched for a workspace of 3 with a link to 21 outside: watchfiles {theirs}, Warden {ours}")
        if args.flood:
            print(_flood(args.flood, tmp))
        if args.storm:
            print(_storm(args.storm, tmp))
    print("(latencies include the 100 ms of quiet that ends a burst; watchfiles needs a second 100 ms step "
          "to see the quiet)")


if __name__ == "__main__":
    main()
