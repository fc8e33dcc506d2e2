"""A fresh sandbox's usage without a cgroup (a normal user here, or root with the cgroups taken
away): the process that adopted orphans (`warden run` does) wait4s the sandbox's pid 1 once bwrap
is gone, and so learns the CPU of the whole reaped tree and its largest process's peak; it leaves
no zombie behind. A process that did not adopt (a long-lived server) reports nothing and takes
no orphan.

Each case runs in a child interpreter of its own: the subreaper mark is for the whole process,
and pytest's must not inherit what it does not reap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

MIB = 1 << 20
_SRC = str(Path(__file__).resolve().parents[3] / "src")

_SCRIPT = """
import dataclasses, json, os, sys, tempfile
from warden.adapters.sandbox import cgroups, runner
from warden.adapters.sandbox.host import build_spec
from warden.core.limits import Limits

# No memory cgroup, as a user without delegation has; root keeps its pids cgroup, without which
# no command starts (RLIMIT_NPROC does not hold uid 0).
no_cgroups = dataclasses.replace(cgroups.detect(), memory=None)
cgroups.detect = lambda: no_cgroups
if sys.argv[1] == "adopt":
    runner.adopt_orphans()
ws = tempfile.mkdtemp()
HEAVY = ("x = bytearray(200 << 20)\\nfor i in range(0, len(x), 4096): x[i] = 1\\n"
         "s = 0\\nfor i in range(4_000_000): s += i\\n")
def run(argv):
    spec = build_spec(ws, argv, caller_env={"PATH": "/usr/bin:/bin"}, env={})
    out = runner.run_sandboxed(spec, Limits(memory=1 << 30, timeout_s=120))
    return {"code": out.exit_code, "via": out.limits_via, "err": out.stderr[-300:],
            "usage": out.usage.to_json() if out.usage is not None else None}
heavy = run(["python3", "-c", HEAVY])
light = run(["true"])
# Two heavy processes at once: CPU adds up, memory is the largest one's.
pair = run(["sh", "-c", 'python3 -c "$0" & python3 -c "$0"; wait', HEAVY])
zombies = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            zombies.append(int(pid))
print(json.dumps({"heavy": heavy, "light": light, "pair": pair, "zombies": zombies}))
"""


def _measure(mode: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": _SRC, "LANG": "C.UTF-8"}, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_an_adopting_process_reaps_the_sandbox_init_and_reports_the_tree() -> None:
    report = _measure("adopt")
    heavy, light, pair = report["heavy"], report["light"], report["pair"]
    for run in (heavy, light, pair):
        assert run["code"] == 0, run
        # Memory from wait4 (the largest process); CPU too, unless a cgroup v2 pids group counted it.
        assert run["usage"]["memory_measured"] == "process", run
        assert run["usage"]["measured_by"] == ("cgroup" if _cpu_by_cgroup() else "rusage"), run
    assert heavy["usage"]["cpu_s"] >= 0.2, heavy
    assert heavy["usage"]["memory_peak_bytes"] >= 150 * MIB, heavy
    assert light["usage"]["cpu_s"] < 0.1 and light["usage"]["memory_peak_bytes"] < 30 * MIB, light
    # Both processes' CPU, but the peak of the largest one alone (ru_maxrss), not their sum.
    assert pair["usage"]["cpu_s"] >= 1.5 * 0.2, pair
    assert 150 * MIB <= pair["usage"]["memory_peak_bytes"] < 300 * MIB, pair
    assert report["zombies"] == []


def _cpu_by_cgroup() -> bool:
    """Whether root's pids cgroup is a v2 one, whose cpu.stat counts CPU (v1's does not)."""
    import os

    from warden.adapters.sandbox import cgroups

    pids = cgroups.detect().pids
    return os.getuid() == 0 and pids is not None and pids[0] == "v2"


def test_a_process_that_did_not_adopt_reports_no_rusage_and_keeps_no_orphan() -> None:
    report = _measure("keep")
    for run in (report["heavy"], report["light"]):
        assert run["code"] == 0, run
        assert run["usage"] is None or run["usage"]["memory_peak_bytes"] is None, run
    assert report["zombies"] == []


@pytest.mark.parametrize("adopted", [True, False])
def test_adopting_twice_is_harmless(adopted: bool) -> None:
    script = ("from warden.adapters.sandbox import runner\n"
              + ("assert runner.adopt_orphans()\n" if adopted else "")
              + "assert runner.adopt_orphans() and runner.adopt_orphans()\n"
              "import ctypes\nv = ctypes.c_int()\n"
              "assert ctypes.CDLL(None).prctl(37, ctypes.byref(v), 0, 0, 0) == 0 and v.value == 1\n")
    subprocess.run([sys.executable, "-c", script], env={"PYTHONPATH": _SRC}, check=True, timeout=60)
