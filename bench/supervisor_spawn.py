"""The live sandbox's supervisor alone: one command's spawn, from request to exit, this tree's
supervisor against an earlier commit's, alternating, in one run.

    .venv/bin/python bench/supervisor_spawn.py [--base REV] [-n 300]

Both supervisors run as plain processes of this user (as tests/adapters/sandbox/test_supervisor_spawn.py
starts them), with their launcher pointed at the one scripts/setup built (.venv/libexec) and the
kernel's seal read as on, so each starts `true` the way it does in a sandbox: through the launcher,
not held. What is timed is what Warden waits for per command in a live sandbox beyond its own
bookkeeping: the request with its descriptors, the spawn, the exit event. Rows: p10, median and
p90 per tree (on a busy machine the p10 shows the cost, the median mostly the wait for a core),
and this tree's median and p10 as ratios of the base's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = "src/warden/adapters/sandbox/supervisor.py"
LAUNCHER = Path(sys.prefix) / "libexec" / "warden-rlimit-exec"  # the venv's, as scripts/setup builds it


def _source(rev: str | None) -> str:
    if rev is None:
        return (REPO / SOURCE).read_text()
    return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{SOURCE}"], capture_output=True, text=True,
                          check=True).stdout


def _pointed(source: str, seal: Path) -> str:
    """`source` with its launcher the venv's and the kernel's seal read from `seal`."""
    for constant, ours in (("RLIMIT_EXEC", LAUNCHER), ("SUID_DUMPABLE", seal)):
        start = source.index(f"{constant} = ")
        end = source.index("\n", start)
        source = source[:start] + f'{constant} = "{ours}"' + source[end:]
    return source


def _start(python: str, source: str, where: str) -> subprocess.Popen[bytes]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(where)
    listener.listen(8)
    try:
        return subprocess.Popen([python, "-I", "-S", "-c", source, str(listener.fileno()), "600"],
                                pass_fds=[listener.fileno()], cwd="/")
    finally:
        listener.close()


def _frame(sock: socket.socket) -> dict[str, object]:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                raise RuntimeError("the supervisor hung up")
            data += chunk
        return data

    (length,) = struct.unpack(">I", exactly(4))
    answer = json.loads(exactly(length))
    assert isinstance(answer, dict)
    return answer


def _spawn_true(where: str, null: int) -> float:
    """Milliseconds from connecting to the exit event of `true`, its stdio /dev/null."""
    body = json.dumps({"op": "spawn", "id": os.urandom(8).hex(), "argv": ["true"], "env": {"PATH": "/usr/bin:/bin"},
                       "cwd": "/tmp", "background": False, "timeout": 30, "fds": ["stdin", "stdout", "stderr"],
                       "hold": False, "rlimits": {"cpu": [7, 8], "nofile": [256, 256]}}).encode()
    start = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(where)
        conn.sendmsg([struct.pack(">I", len(body)) + body],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", null, null, null))])
        started = _frame(conn)
        ended = _frame(conn)
    took = (time.perf_counter() - start) * 1000
    assert started.get("ok") is True and ended.get("exit_code") == 0, (started, ended)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    # 6f3dd31: the supervisor by posix_spawn, measured here against Popen and reverted (no gain seen).
    parser.add_argument("--base", default="6f3dd31", help="the commit to compare with")
    parser.add_argument("-n", type=int, default=300)
    opts = parser.parse_args()
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None or not LAUNCHER.exists():
        sys.exit("needs a system python3 and the launcher scripts/setup builds (.venv/libexec/warden-rlimit-exec)")
    with tempfile.TemporaryDirectory() as tmp:
        seal = Path(tmp) / "suid_dumpable"
        seal.write_text("0\n")
        trees = {f"base {opts.base}": _source(opts.base), "this tree": _source(None)}
        procs, wheres = [], {}
        try:
            for index, (name, source) in enumerate(trees.items()):
                wheres[name] = str(Path(tmp) / f"s{index}")
                procs.append(_start(python, _pointed(source, seal), wheres[name]))
            time.sleep(0.5)
            null = os.open(os.devnull, os.O_RDWR)
            times: dict[str, list[float]] = {name: [] for name in trees}
            for name in trees:  # warm-up
                _spawn_true(wheres[name], null)
            for _ in range(opts.n):
                for name in trees:
                    times[name].append(_spawn_true(wheres[name], null))
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(5)
    def p10(values: list[float]) -> float:
        return sorted(values)[len(values) // 10]

    base = times[f"base {opts.base}"]
    print(f"{'supervisor spawn of true, request to exit':<44}{'p10 ms':>8}{'median ms':>10}{'p90 ms':>8}"
          f"{'x base':>8}{'x base p10':>11}")
    for name, values in times.items():
        values.sort()
        median = statistics.median(values)
        print(f"{name:<44}{p10(values):>8.3f}{median:>10.3f}{values[int(len(values) * 0.9)]:>8.3f}"
              f"{median / statistics.median(base):>8.2f}{p10(values) / p10(base):>11.2f}")


if __name__ == "__main__":
    main()
