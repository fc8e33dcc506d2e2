"""`POST /v1/workspaces/{name}/exec` of `true`: this tree's `warden serve` against a base commit's,
alternating with raw bwrap and the same exec in-process, in one run.

    .venv/bin/python bench/api_exec.py [--base REV] [-n 100]

One home, one workspace, one bot's grant; two `warden serve` processes on that home, one running
the base commit's `src/` (taken from git into a temporary folder), one this tree's. Every exec, in
process or over HTTP, is the bot's: it runs in the bot's live sandbox (started by the first, then
shared by the key workspace + grant + network: the bench checks it is up at the end), so the
rows differ only by what stands between the request and that sandbox.

Rows, taken in turns call by call (in a new order each turn) so all see the same machine load:
a raw `bwrap … true` (the floor of any sandbox); the bot's exec in-process
(`BotRequestService.exec`: authentication, grant, secrets, the run, audit; no HTTP, so no exec
slot and no `api.exec` event); each server through the SDK (keep-alive) and through
`http.client` (the lightest client: the server's share); `GET /v1/health` of each (the floor of
an HTTP request). Columns: median, p10, p90, x raw bwrap, and the HTTP cost beyond the
in-process exec. Then each server's own CPU time per exec (all its threads, from /proc: what the
machine's load does to wall times does not count), over 2n more execs through `http.client`.
Issue #11's target: HTTP exec <= 0.75x raw bwrap.
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home, raw_bwrap_argv  # noqa: E402
from api import start_server  # noqa: E402
from exec_ab import tree_of  # noqa: E402


def _alternate(n: int, rows: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Each callable `n` times, taking turns in a new order each turn (what an exec leaves to do
    after its answer, such as the server's log line, slows whichever call comes next), after two
    warm-up calls each."""
    for fn in rows.values():
        fn()
        fn()
    times: dict[str, list[float]] = {name: [] for name in rows}
    order = random.Random(11)
    names = list(rows)
    for _ in range(n):
        order.shuffle(names)
        for name in names:
            start = time.perf_counter()
            rows[name]()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def _cpu_ms(pid: int) -> float:
    """The CPU time (user + system, all its threads) process `pid` has used, in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _plain_exec(url: str, token: str) -> Callable[[], None]:
    """An exec of `true` over one keep-alive `http.client` connection."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    body = json.dumps({"cmd": ["true"]}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def run() -> None:
        conn.request("POST", "/v1/workspaces/bench/exec", body=body, headers=headers)
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 200 and answer["exit_code"] == 0, answer

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="18bd317", help="the commit to compare with")
    parser.add_argument("-n", type=int, default=100, help="turns (each row once a turn)")
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    from warden import Warden
    from warden.client import Client
    from warden.services.bot_requests import Command

    raw = raw_bwrap_argv()
    with tempfile.TemporaryDirectory() as tmp:
        base_src = tree_of(args.base, Path(tmp) / "base")
        compileall.compile_dir(str(base_src / "warden"), quiet=1)
        home, env = bench_home(tmp)
        env["WARDEN_DAEMON"] = "0"  # the servers and the check below run themselves
        with Warden.open(home, environ=env) as w:
            w.create("bench", template="minimal")
            w.app.grants.register_bot("bench-bot")
            token = w.app.grants.grant("bench", "bench-bot", "read,write,execute").token
            servers = {}
            try:
                for label, src in ((f"base {args.base}", base_src), ("this tree", REPO / "src")):
                    servers[label] = start_server({**env, "PYTHONPATH": str(src)}, Path(tmp) / f"{label}.log")

                def in_process() -> None:
                    principal = w.app.auth.authenticate(token)
                    assert w.app.bot_requests.exec(principal, "bench", Command(argv=("true",))).exit_code == 0

                rows: dict[str, Callable[[], object]] = {
                    "raw bwrap ... true": lambda: subprocess.run(raw, check=True),
                    "bot exec in-process (live)": in_process,
                }
                for label, (_, url) in servers.items():
                    remote = Client(url, token).workspace("bench")
                    rows[f"API exec, SDK ({label})"] = lambda remote=remote: remote.run(["true"])
                    rows[f"API exec, http.client ({label})"] = _plain_exec(url, token)
                for label, (_, url) in servers.items():
                    rows[f"API GET /v1/health ({label})"] = Client(url, token).health
                times = _alternate(args.n, rows)
                # The servers' own CPU per exec (the clock ticks of all their threads: no wait counted).
                execs = {label: _plain_exec(url, token) for label, (_, url) in servers.items()}
                used = {label: -_cpu_ms(proc.pid) for label, (proc, _) in servers.items()}
                for _ in range(args.n * 2):
                    for run in execs.values():
                        run()
                cpu = {label: (used[label] + _cpu_ms(proc.pid)) / (args.n * 2) for label, (proc, _) in servers.items()}
                with w.app.registry.transaction(write=False) as tx:
                    live = [s for s in tx.sandboxes.of_workspace("bench") if s.principal.startswith("bot:bench-bot@")]
            finally:
                for proc, _ in servers.values():
                    proc.terminate()
                    proc.wait(10)
    if len(live) != 1:
        raise SystemExit(f"expected the bot's one live sandbox up, found {len(live)}: the rows are not comparable")
    raw_median = statistics.median(times["raw bwrap ... true"])
    in_proc = statistics.median(times["bot exec in-process (live)"])
    print(f"{'what':44} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'x raw bwrap':>12} {'HTTP ms':>8}")
    for name, values in times.items():
        ordered = sorted(values)
        med = statistics.median(values)
        beyond = f"{med - in_proc:8.2f}" if name.startswith("API exec") else ""
        print(f"{name:44} {med:10.2f} {ordered[len(values) // 10]:8.2f} {ordered[int(len(values) * 0.9) - 1]:8.2f} "
              f"{med / raw_median:12.2f} {beyond:>8}")
    print()
    for label, per_exec in cpu.items():
        print(f"server CPU per exec ({label}): {per_exec:.2f} ms")
    ours = statistics.median(times["API exec, SDK (this tree)"])
    base = statistics.median(times[f"API exec, SDK (base {args.base})"])
    print(f"\nthis tree's SDK exec vs base: {ours - base:+.2f} ms ({ours / base:.2f}x); all in the bot's live sandbox")
    print(f"target API exec <= 0.75x raw bwrap (issue #11): {ours / raw_median:.2f}x "
          f"({'met' if ours <= 0.75 * raw_median else 'MISSED'})")


if __name__ == "__main__":
    main()
