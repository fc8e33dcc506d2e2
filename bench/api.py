"""What the HTTP API costs, against baselines measured in the same run.

    .venv/bin/python bench/api.py [-n 30] [--reads 3000]

Rows: a raw `bwrap … true` (the floor of any bwrap sandbox); `Workspace.run(["true"])` in a
warm process; `POST /v1/workspaces/{name}/exec` of `true` through the SDK against a real
`warden serve` process (authentication, grant checks, secrets lookup, the same run, audit).
Then 4 KiB file reads per second over HTTP (`GET …/files/content`), with one client and with
four concurrent clients, against the same server. Targets (issue 5): API exec <= 3x raw
bwrap; >= 1,000 reads/s on 2 cores.
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
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(fn: Callable[[], object], n: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def raw_bwrap_argv() -> list[str]:
    """The same floor as bench/exec.py: bwrap with Warden's namespaces, nothing else."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for link in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/usr/bin/true"]


def start_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    out = open(log, "wb")  # noqa: SIM115 (the server writes to it until it is stopped)
    proc = subprocess.Popen([sys.executable, "-m", "warden", "serve", "--port", "0", "--no-access-log"],
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


def reads_per_second(url: str, token: str, clients: int, total: int) -> float:
    import httpx

    per_client = total // clients
    errors: list[str] = []

    def worker() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
            for _ in range(per_client):
                response = http.get("/v1/workspaces/bench/files/content", params={"path": "data/4k.bin"})
                if response.status_code != 200 or len(response.content) != 4096:
                    errors.append(f"{response.status_code}")
                    return

    warm = threading.Thread(target=worker)
    warm.start()
    warm.join()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise SystemExit(f"reads failed: {errors[:3]}")
    return per_client * clients / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30, help="runs of each exec row")
    parser.add_argument("--reads", type=int, default=3000, help="file reads per throughput row")
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden
    from warden.client import Client

    rows: list[tuple[str, list[float]]] = []
    raw = raw_bwrap_argv()
    rows.append(("raw bwrap ... true", measure(lambda: subprocess.run(raw, check=True), args.n)))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
        env["WARDEN_HOME"] = str(home)
        with Warden.open(home, environ=env) as w:
            ws = w.create("bench", template="minimal")
            ws.files.write_bytes("data/4k.bin", os.urandom(4096))
            identity = w.app.grants.register_bot("bench-bot").token
            token = w.app.grants.grant("bench", "bench-bot", "read,write,execute").token

            def in_process() -> None:
                assert ws.run(["true"]).exit_code == 0

            rows.append(('Workspace.run(["true"]) warm', measure(in_process, args.n)))
        server, url = start_server(env, Path(tmp) / "serve.log")
        try:
            remote = Client(url, token).workspace("bench")

            def over_http() -> None:
                assert remote.run(["true"]).exit_code == 0

            rows.append(("API exec true (SDK, keep-alive)", measure(over_http, args.n)))
            health = Client(url, identity)
            rows.append(("API GET /v1/health (floor)", measure(health.health, args.n * 10)))
            single = reads_per_second(url, token, 1, args.reads)
            multi = reads_per_second(url, token, 4, args.reads)
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
    print(f"{'1 client':34} {single:10.0f}")
    print(f"{'4 concurrent clients':34} {multi:10.0f}")
    api = statistics.median(rows[2][1])
    print(f"\ntarget API exec <= 3x raw bwrap: {api / raw_median:.2f}x ({'met' if api <= 3 * raw_median else 'MISSED'})")
    best = max(single, multi)
    print(f"target >= 1,000 reads/s on {os.cpu_count()} cores: {best:.0f}/s ({'met' if best >= 1000 else 'MISSED'})")


if __name__ == "__main__":
    main()
