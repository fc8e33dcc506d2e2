"""Stop `warden run` at random moments, for real, and check what each stop leaves.

Each try starts `warden run` (the native client or `python -m warden`, with or without the home's
daemon; into a fresh sandbox, a live one, or `--detach`), sends SIGINT, SIGTERM or SIGHUP to the
client, the daemon's child serving it or the daemon itself after a random delay, then checks:
- no traceback or "Exception ignored" on the client's stderr;
- the exit status is a documented one (the command's 0, 130, 128+n, or the signal's own);
- the workspace's lease is free: the next `warden run W -- true` succeeds at once;
- no cgroup folder named after the client or a daemon child is left, no process of the home
  other than the live sandbox's and the daemon's runs on.
At the end every run the audit names has exactly one intent and one outcome, and `warden audit
verify` passes. Each case these tries found is held by a test in tests/interfaces; this finds the
next ones. Its own home in a temporary folder; it cleans up after itself.

    .venv/bin/python scripts/stress_stops.py --tries 200 --daemon --targets client,child,daemon
    .venv/bin/python scripts/stress_stops.py --tries 100 --no-daemon --live
    .venv/bin/python scripts/stress_stops.py --tries 80 --daemon --detach

Exit status 0 when no try found a problem, 1 otherwise (each problem printed as one JSON line).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup"))
COMMAND = ["sh", "-c", "echo a; sleep 0.05; echo b"]


class Home:
    def __init__(self, path: Path, client: str, daemon: bool) -> None:
        self.path, self.client = path, client
        self.env = {**os.environ, "WARDEN_HOME": str(path), "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self.env.pop("WARDEN_DAEMON", None)
        if not daemon:
            self.env["WARDEN_DAEMON"] = "0"

    def argv(self, *args: str) -> list[str]:
        if self.client == "native":
            return [str(BIN / "warden"), *args]
        return [str(BIN / "python"), "-m", "warden", *args]

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout,
                              cwd="/tmp", check=False)

    def daemon(self) -> int | None:
        for pid, argv, ppid in _processes():
            if b"warden.interfaces.cli.daemon" in argv and str(self.path).encode() in argv and ppid == 1:
                return pid
        return None

    def lingering(self) -> list[str]:
        """Processes working in this home, other than its daemon, live sandboxes and spares."""
        found = []
        for pid, argv, _ in _processes():
            if pid == os.getpid():
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            text = argv.replace(b"\0", b" ").decode(errors="replace")
            if cwd.startswith(str(self.path)) and not any(
                    keep in text for keep in ("cli.daemon", "supervisor.py", "bwrap", "sleep 600")):
                found.append(f"{pid} {text[:100]}")
        return found


def _processes() -> list[tuple[int, bytes, int]]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(name), argv, ppid))
    return found


def _children(pid: int) -> list[int]:
    return [p for p, _, ppid in _processes() if ppid == pid]


def _cgroups() -> set[Path]:
    found: set[Path] = set()
    for root in CGROUP_ROOTS:
        with contextlib.suppress(OSError):
            found |= {entry for entry in root.iterdir() if entry.name.startswith("warden-")}
    return found


def one_try(home: Home, target: str, sig: signal.Signals, delay: float, detach: bool) -> dict[str, object]:
    daemon = home.daemon()
    children_before = _children(daemon) if daemon else []
    cgroups_before = _cgroups()
    argv = ["run", "W", "--detach", "--", "sleep", "0.2"] if detach else ["run", "W", "--", *COMMAND]
    started = time.monotonic()
    client = subprocess.Popen(home.argv(*argv), env=home.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, cwd="/tmp")
    time.sleep(delay)
    to = {"client": client.pid, "daemon": daemon,
          "child": next(iter(_children(daemon)), None) if daemon else None}.get(target)
    if to:
        with contextlib.suppress(ProcessLookupError):
            os.kill(to, sig)
    try:
        _, err = client.communicate(timeout=60)
        status: object = client.returncode
    except subprocess.TimeoutExpired:
        client.kill()
        _, err = client.communicate()
        status = "hung"
    took = time.monotonic() - started
    said = err.decode(errors="replace")
    problems = []
    if "Traceback" in said or "Exception ignored" in said:
        problems.append("a traceback")
    if status not in (0, 130, 128 + sig, -sig):
        problems.append(f"exit status {status}")
    next_started = time.monotonic()
    following = home("run", "W", "--", "true", timeout=60)
    if following.returncode != 0 or time.monotonic() - next_started > 5:
        problems.append(f"the next run: {following.returncode} after {time.monotonic() - next_started:.1f} s: "
                        f"{following.stderr.strip()[:200]!r}")
    time.sleep(0.3)
    pids = {client.pid, *children_before, *(_children(daemon) if daemon else [])}
    left = [str(c) for c in _cgroups() - cgroups_before
            if (m := re.match(r"warden-(\d+)-", c.name)) and int(m.group(1)) in pids]
    if left:
        problems.append(f"cgroups left: {left}")
    lingering = home.lingering()
    if lingering:
        problems.append(f"still running: {lingering}")
    return {"target": target, "signal": sig.name, "delay_s": round(delay, 3), "detach": detach, "status": status,
            "took_s": round(took, 2), "problems": problems, "stderr": said[-1500:] if problems else said[-200:]}


_TOLD = ("pid", "stopped_by", "interrupted_by", "instance", "background", "exit_code", "signal")


def audit_problems(home: Home) -> list[str]:
    """Runs of the audit without exactly one intent and one outcome; a failed verify."""
    listed = home("audit", "--workspace", "W", "--limit", "1000000", "--json")
    events = json.loads(listed.stdout)["data"]
    runs: dict[str, list[str]] = collections.defaultdict(list)
    said: dict[str, list[str]] = collections.defaultdict(list)
    for event in events:
        detail = event.get("detail") or {}
        run_id = detail.get("run_id")
        if run_id:
            runs[run_id].append(event["action"])
            # What each event says, for a problem to be understood from a CI log alone.
            told = {k: detail[k] for k in _TOLD if k in detail}
            said[run_id].append(f"{event['action']} at {event.get('at')} by {event.get('actor')} "
                                f"({event.get('rule')}: {event.get('result')}; {told})")
    problems = [f"run {run_id}: {actions} -- {' | '.join(said[run_id])}" for run_id, actions in runs.items()
                if actions.count("run.start") != 1 or len(actions) != 2]
    verified = home("audit", "verify")
    if verified.returncode != 0:
        problems.append(f"audit verify: {verified.stdout.strip()} {verified.stderr.strip()}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=100)
    parser.add_argument("--daemon", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--targets", default="client", help="client, child, daemon (comma separated)")
    parser.add_argument("--client", choices=("native", "python"), default="native")
    parser.add_argument("--live", action="store_true", help="into a live sandbox (a detached sleep keeps one)")
    parser.add_argument("--detach", action="store_true", help="stop `run --detach` starts")
    parser.add_argument("--max-delay", type=float, default=0.3, help="seconds")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the home (its path is printed) to look into")
    args = parser.parse_args()
    targets = args.targets.split(",")
    if not set(targets) <= {"client", "child", "daemon"} or (not args.daemon and targets != ["client"]):
        parser.error("--targets: client, child, daemon; child and daemon only with --daemon")
    if args.client == "native" and not (BIN / "warden").exists():
        parser.error("no native client: run `scripts/setup --dev` first (or pass --client python)")
    chance = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="warden-stress-"))
    home = Home(folder / "home", args.client, args.daemon)
    try:
        for step in (("init",), ("create", "W", "--template", "minimal")):
            done = home(*step)
            if done.returncode != 0:
                print(f"stress_stops: `warden {' '.join(step)}` failed: {done.stderr.strip()}", file=sys.stderr)
                return 1
        if args.live or args.detach:
            home("run", "W", "--detach", "--", "sleep", "600")
        bad, statuses = 0, collections.Counter[object]()
        for _ in range(args.tries):
            record = one_try(home, chance.choice(targets), chance.choice(SIGNALS),
                             chance.uniform(0, args.max_delay), args.detach)
            statuses[record["status"]] += 1
            if record["problems"]:
                bad += 1
                print(json.dumps(record), flush=True)
        # The live sandbox's sleep ended (its outcome recorded), and what a stop left to sweep
        # (a run recorded lost) swept, before the audit is read.
        home("suspend", "W")
        home("janitor", "--once", timeout=300)
        audit = audit_problems(home)
        for problem in audit:
            print(json.dumps({"audit": problem}), flush=True)
        print(f"{args.tries} tries (exit statuses {dict(statuses)}): {bad} with problems; audit: {len(audit)} problems",
              flush=True)
        return 1 if bad or audit else 0
    finally:
        home("suspend", "W")
        daemon = home.daemon()
        if daemon:
            with contextlib.suppress(ProcessLookupError):
                os.kill(daemon, signal.SIGTERM)
        if args.keep:
            print(f"home kept: {home.path}", flush=True)
        else:
            from warden.adapters.envs.layer_store import make_writable

            make_writable(folder)  # its env layers are read-only: a normal user's rmtree left them
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
