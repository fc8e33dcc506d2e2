"""Load and chaos against the real thing: a `warden serve` under 16 threads of mixed requests, and
commands (and the server) killed at random moments, after which the state must still be true.

Bounded in count and time, only to 127.0.0.1.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import Cli
from tests.support.alone import alone
from tests.support.servers import ServeProcess, cli_out, warden_environ

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]




def test_mixed_load_gives_no_server_errors(tmp_path: Path, initialised_home: Path) -> None:
    environ = {**warden_environ(initialised_home), "WARDEN_API_MAX_EXECS": "8",
               "WARDEN_API_MAX_EXECS_PER_BOT": "8"}
    cli_out(environ, "init")
    names = ["load0", "load1"]
    tokens = {}
    for name in names:
        cli_out(environ, "create", name)
        cli_out(environ, "bot", "register", f"bot-{name}")
        tokens[name] = cli_out(environ, "grant", name, f"bot-{name}", "--permissions", "read,write,execute")
    statuses: collections.Counter[int] = collections.Counter()
    failures: list[str] = []
    lock = threading.Lock()
    with ServeProcess(environ, tmp_path) as server, httpx.Client(timeout=60) as client:
        def one(i: int) -> None:
            rng = random.Random(i)
            name = rng.choice(names)
            base = f"{server.url}/v1/workspaces/{name}"
            headers = {"Authorization": f"Bearer {tokens[name]}"}
            kind = rng.choice(["exec", "write", "read", "list", "info", "health"])
            if kind == "exec":
                r = client.post(f"{base}/exec", json={"cmd": ["sh", "-c", f"echo {i} >> log.txt"]}, headers=headers)
            elif kind == "write":
                r = client.put(f"{base}/files/content", params={"path": f"/f/{i % 50}.txt"},
                               content=f"{i}\n".encode(), headers=headers)
            elif kind == "read":
                r = client.get(f"{base}/files", params={"path": "/"}, headers=headers)
            elif kind == "list":
                r = client.get(f"{server.url}/v1/workspaces", headers=headers)
            elif kind == "info":
                r = client.get(base, headers=headers)
            else:
                r = client.get(f"{server.url}/v1/health")
            with lock:
                statuses[r.status_code] += 1
                if r.status_code >= 500 and r.status_code != 503:
                    failures.append(f"{kind} {r.status_code} {r.text[:200]}")

        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(2000)))
        took = time.monotonic() - started
    assert failures == [], failures[:5]
    assert sum(statuses.values()) == 2000
    assert statuses[200] + statuses[201] > 1500, statuses
    err = (tmp_path / "serve.err").read_text()
    assert "Traceback" not in err and "Error" not in err.replace("ERROR", ""), err[-2000:]
    print(f"2000 mixed requests, 16 threads: {took:.1f} s, {dict(statuses)}")


def _ready_claims_hold(cli: Cli, home: Path) -> list[str]:
    """Workspaces that claim ready but lack what a ready workspace has."""
    wrong = []
    listed = cli("list", "--json")
    assert listed.code == 0, listed.stdout + listed.stderr
    for ws in listed.json["data"]:
        if ws["status"] == "ready":
            folder = Path(ws["path"])
            if not (folder / ".workspace_configured").is_file() or not (folder / ".workspace.json").is_file():
                wrong.append(ws["name"])
    return wrong


def test_chaos_kills_leave_true_state(cli: Cli, home: Path, tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("WARDEN_CHAOS_SEED", "7")))
    commands = [
        ["create", "c{n}"], ["run", "c{n}", "--", "sh", "-c", "echo x > f; sleep 0.2; echo y >> f"],
        ["archive", "c{n}"], ["unarchive", "c{n}"], ["destroy", "c{n}", "--yes"],
        ["fs", "c{n}", "write", "/a.txt"], ["health", "c{n}", "--repair"], ["suspend", "c{n}"],
        ["resume", "c{n}"], ["serve", "--port", "0"],
    ]
    for i in range(50):
        n = rng.randrange(3)
        argv = [part.format(n=n) for part in rng.choice(commands)]
        proc = subprocess.Popen([sys.executable, "-m", "warden", *argv], env=cli.environ,
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if argv[0] == "fs":
            assert proc.stdin is not None
            proc.stdin.write(b"chaos\n")
        if proc.stdin is not None:
            proc.stdin.close()
        time.sleep(rng.uniform(0.05, 0.6))  # the random moment of the kill: what the test does
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "Traceback" not in err, (i, argv, err)
    from warden.adapters.processes import alive
    from warden.adapters.sandbox import cgroups

    support = cgroups.detect()
    # Alone: the doctor sweeps, and the check judges, every run cgroup on the host (another
    # test's run killed meanwhile would leave one).
    with alone():
        # The next command sees the truth: nothing claims ready without its content...
        cli("doctor", "--fix")
        assert _ready_claims_hold(cli, home) == []
        # ...no run cgroup or temp file of a dead process is left...
        for spec in (support.memory, support.pids):
            if spec is not None:
                for path in Path(spec[1]).glob("warden-*-*-*"):
                    run = re.fullmatch(r"warden-(\d+)-(\d+)-\d+", path.name)  # not a live sandbox's group
                    if run is not None:
                        assert alive(int(run[1]), int(run[2])), f"leaked cgroup {path}"
    assert not list((home / "archives").glob(".*.tmp")) if (home / "archives").is_dir() else True
    # ...and every run that started has an audit row that says how it ended.
    events = cli("audit", "--limit", "100000", "--json").json["data"]
    started = {json.loads(e["detail"])["run_id"] if isinstance(e["detail"], str) else e["detail"]["run_id"]
               for e in events if e["action"] == "run.start"}
    ended = set()
    for e in events:
        if e["action"] in ("run", "run.lost"):
            detail = json.loads(e["detail"]) if isinstance(e["detail"], str) else e["detail"]
            if "run_id" in detail:
                ended.add(detail["run_id"])
    assert started <= ended, started - ended
    assert cli("audit", "verify").code == 0
