"""What the HTTP API costs, against baselines measured in the same run.

    .venv/bin/python bench/api.py [-n 30] [--reads 3000]

Rows, taking turns call by call so all see the same machine load: a raw `bwrap … true` (the
floor of any bwrap sandbox); `Workspace.run(["true"])` in a warm process (the person's command:
a fresh sandbox each time); the bot's exec in-process (`BotRequestService.exec` with the bot's
grant: its live sandbox); `POST /v1/workspaces/{name}/exec` of `true` through the SDK against a
real `warden serve` process (authentication, grant checks, secrets lookup, the exec slot, the
same run, audit). A bot's commands run in its live sandbox (started by its first), so the API row
compares with the bot's in-process row, not with the person's: the bench checks that the bot's
live sandbox is up at the end. bench/api_exec.py compares this tree's server with an earlier
commit's. Then 4 KiB file reads per second over HTTP (`GET …/files/content`): one server process
with one client and with four concurrent clients, and `--workers 2` with four clients. Targets:
API exec <= 3x raw bwrap; >= 1,000 reads/s on 2 cores.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home, measure, raw_bwrap_argv  # noqa: E402


def start_server(env: dict[str, str], log: Path, workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    out = open(log, "wb")  # noqa: SIM115 (the server writes to it until it is stopped)
    proc = subprocess.Popen([sys.executable, "-m", "warden", "serve", "--port", "0", "--no-access-log",
                             "--workers", str(workers)],
                            stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(rb"listening on (http://127\.0\.0\.1:\d+)", log.read_bytes())
        if match:
            import httpx

            url = match.group(1).decode()
            try:
                if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("warden serve did not start:\n" + log.read_text(errors="replace"))


def _reader(url: str, token: str, count: int, start: Any, results: Any) -> None:
    """One client process: `count` keep-alive GETs of the 4 KiB file (http.client: the lightest
    client in the standard library, so the clients leave the cores to the server)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"}
    target = "/v1/workspaces/bench/files/content?path=data/4k.bin"
    for _ in range(20):  # warm-up
        conn.request("GET", target, headers=headers)
        conn.getresponse().read()
    start.wait()
    ok = 0
    for _ in range(count):
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        if response.status == 200 and len(response.read()) == 4096:
            ok += 1
    results.put(ok)


def reads_per_second(url: str, token: str, clients: int, total: int) -> float:
    """Aggregate 4 KiB reads per second of `clients` client processes."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    results = ctx.Queue()
    per_client = total // clients
    procs = [ctx.Process(target=_reader, args=(url, token, per_client, start, results)) for _ in range(clients)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # every client connected and warmed up
    began = time.perf_counter()
    start.set()
    done = sum(results.get(timeout=300) for _ in procs)
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    if done != per_client * clients:
        raise SystemExit(f"only {done} of {per_client * clients} reads succeeded")
    return done / elapsed


def _alternate(n: int, fns: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Milliseconds of `n` calls of each, taking turns, after one warm-up call each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30, help="runs of each exec row")
    parser.add_argument("--reads", type=int, default=3000, help="file reads per throughput row")
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden
    from warden.client import Client
    from warden.services.bot_requests import Command

    raw = raw_bwrap_argv()
    with tempfile.TemporaryDirectory() as tmp:
        home, env = bench_home(tmp)
        with Warden.open(home, environ=env) as w:
            ws = w.create("bench", template="minimal")
            ws.files.write_bytes("data/4k.bin", os.urandom(4096))
            identity = w.app.grants.register_bot("bench-bot").token
            token = w.app.grants.grant("bench", "bench-bot", "read,write,execute").token
        server, url = start_server(env, Path(tmp) / "serve.log")
        try:
            with Warden.open(home, environ=env) as w:
                ws = w.get("bench")
                remote = Client(url, token).workspace("bench")

                def in_process() -> None:
                    assert ws.run(["true"]).exit_code == 0

                def bot_in_process() -> None:
                    principal = w.app.auth.authenticate(token)
                    assert w.app.bot_requests.exec(principal, "bench", Command(argv=("true",))).exit_code == 0

                def over_http() -> None:
                    assert remote.run(["true"]).exit_code == 0

                execs = {"raw bwrap ... true": lambda: subprocess.run(raw, check=True),
                         'Workspace.run(["true"]) warm': in_process,
                         "bot exec in-process (live)": bot_in_process,
                         "API exec true (SDK, keep-alive)": over_http}
                rows = list(_alternate(args.n, execs).items())
                with w.app.registry.transaction(write=False) as tx:
                    live = [s for s in tx.sandboxes.of_workspace("bench") if s.principal.startswith("bot:bench-bot@")]
            if len(live) != 1:
                raise SystemExit(f"the bot's live sandbox is not up ({len(live)}): the API row ran elsewhere")
            health = Client(url, identity)
            rows.append(("API GET /v1/health (floor)", measure(health.health, args.n * 10)))
            # (The client processes are forked from here, with no registry open in this process.)
            reads = [("1 worker, 1 client", reads_per_second(url, token, 1, args.reads)),
                     ("1 worker, 2 concurrent clients", reads_per_second(url, token, 2, args.reads))]
        finally:
            server.terminate()
            server.wait(10)
        server, url = start_server(env, Path(tmp) / "serve2.log", workers=2)
        try:
            reads.append(("2 workers, 2 concurrent clients", reads_per_second(url, token, 2, args.reads)))
            reads.append(("2 workers, 4 concurrent clients", reads_per_second(url, token, 4, args.reads)))
        finally:
            server.terminate()
            server.wait(10)
    raw_median = statistics.median(rows[0][1])
    print(f"{'what':34} {'median ms':>10} {'p90 ms':>8} {'x raw bwrap':>12}")
    for name, times in rows:
        med = statistics.median(times)
        p90 = sorted(times)[int(len(times) * 0.9) - 1]
        print(f"{name:34} {med:10.2f} {p90:8.2f} {med / raw_median:12.2f}")
    print(f"\n{'4 KiB reads over HTTP':34} {'reads/s':>10}")
    for name, rate in reads:
        print(f"{name:34} {rate:10.0f}")
    api = statistics.median(rows[3][1])
    verdict = "met" if api <= 3 * raw_median else "MISSED"
    print(f"\ntarget API exec <= 3x raw bwrap: {api / raw_median:.2f}x ({verdict})")
    best = max(rate for _, rate in reads)
    print(f"target >= 1,000 reads/s on {os.cpu_count()} cores: {best:.0f}/s ({'met' if best >= 1000 else 'MISSED'})")


if __name__ == "__main__":
    main()
