"""An exec forwarded from node B to node A, against the same exec sent to A, in the same run.

    WARDEN_TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:55432/postgres \\
        .venv/bin/python bench/nodes.py [-n 30]

Two homes (`WARDEN_NODE` node-a and node-b) on one fresh PostgreSQL database with shared keys,
two real `warden serve` processes on 127.0.0.1; a grant on A's workspace; `POST …/exec
{"cmd": ["true"]}` sent to A directly and to B (which signs it and forwards it to A). Target:
forwarding costs at most +3 ms (median). A small file read (`GET …/files/content`) is measured the
same way: with no sandbox start in it, its difference shows the hop itself with less noise.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home


def _admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "warden", *args], env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"warden {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    out = log.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "warden", "serve", "--port", "0", "--no-access-log"], env=env,
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(rb"listening on (http://127\.0\.0\.1:\d+)", log.read_bytes())
        if found:
            return proc, found.group(1).decode()
        time.sleep(0.05)
    raise SystemExit("warden serve did not start: " + log.read_text(errors="replace"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30)
    args = parser.parse_args()
    admin = os.environ.get("WARDEN_TEST_DATABASE_URL", "")
    if not admin.startswith("postgresql"):
        raise SystemExit("set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… (a server to make a database on)")
    database = "warden_bench_nodes_" + secrets.token_hex(4)
    _admin(admin, f"CREATE DATABASE {database}")
    servers: list[subprocess.Popen[bytes]] = []
    try:
        keys = {"WARDEN_TOKEN_PEPPER": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                "WARDEN_MASTER_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                "WARDEN_CLUSTER_KEY": base64.b64encode(os.urandom(32)).decode(),
                "WARDEN_DATABASE_URL": admin.rpartition("/")[0] + "/" + database}
        with tempfile.TemporaryDirectory(prefix="warden-bench-nodes-") as tmp:
            urls = {}
            envs = {}
            for node in ("node-a", "node-b"):
                _, env = bench_home(str(Path(tmp) / node))
                env = {**env, **keys, "WARDEN_NODE": node}
                envs[node] = env
                _cli(env, "init")
            _cli(envs["node-a"], "create", "benchws", "--template", "minimal")
            _cli(envs["node-a"], "bot", "register", "bencher")
            import json

            token = json.loads(_cli(envs["node-a"], "grant", "benchws", "bencher", "--permissions", "read,execute",
                                    "--ttl", "1h", "--json"))["data"]["token"]
            for node in ("node-a", "node-b"):
                proc, urls[node] = _serve(envs[node], Path(tmp) / f"{node}.log")
                servers.append(proc)
            headers = {"Authorization": f"Bearer {token}"}
            rows = []
            with httpx.Client(headers=headers, timeout=60) as client:
                def exec_on(url: str) -> object:
                    answer = client.post(f"{url}/v1/workspaces/benchws/exec", json={"cmd": ["true"]})
                    if answer.status_code != 200:
                        raise SystemExit(f"exec via {url}: {answer.status_code} {answer.text}")
                    return answer

                def read_on(url: str) -> object:
                    answer = client.get(f"{url}/v1/workspaces/benchws/files/content", params={"path": "note"})
                    if answer.status_code != 200:
                        raise SystemExit(f"read via {url}: {answer.status_code} {answer.text}")
                    return answer

                client.post(f"{urls['node-a']}/v1/workspaces/benchws/exec",
                            json={"cmd": ["sh", "-c", "echo hello > note"]}).raise_for_status()
                cases = (("exec sent to A (its node)", exec_on, "node-a"),
                         ("exec sent to B, forwarded to A", exec_on, "node-b"),
                         ("read sent to A (its node)", read_on, "node-a"),
                         ("read sent to B, forwarded to A", read_on, "node-b"))
                times: dict[str, list[float]] = {label: [] for label, _, _ in cases}
                for _label, call, node in cases:
                    call(urls[node])  # warm-up: connections, caches
                order = list(cases)
                for _ in range(args.n):  # one of each per round, in a new order each round: neither
                    random.shuffle(order)  # drift nor what ran just before favours a case
                    for label, call, node in order:
                        started = time.perf_counter()
                        call(urls[node])
                        times[label].append((time.perf_counter() - started) * 1000)
                for label, _, _ in cases:
                    got = times[label]
                    rows.append((label, statistics.median(got), statistics.quantiles(got, n=10)[-1]))
            width = max(len(r[0]) for r in rows)
            print(f"{'case':<{width}}  median ms  p90 ms")
            for label, median, p90 in rows:
                print(f"{label:<{width}}  {median:9.2f}  {p90:6.2f}")
            extra = rows[1][1] - rows[0][1]
            print(f"forwarding adds {extra:+.2f} ms to an exec (median; target <= +3 ms): "
                  f"{'ok' if extra <= 3 else 'OVER'}; {rows[3][1] - rows[2][1]:+.2f} ms to a read")
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(15)
        _admin(admin, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


if __name__ == "__main__":
    main()
