"""The memory limit without a memory cgroup (a normal user with no delegation): RLIMIT_DATA.

As root the memory cgroup is taken away by hand, the pids one kept (as root without a pids
cgroup every command is refused); as a normal user here there is none to take away.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from warden.adapters.sandbox import cgroups
from warden.core.limits import Limits, MiB
from warden.core.runs import RunResult

Run = Callable[..., RunResult]


@pytest.fixture
def no_memory_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    support = dataclasses.replace(cgroups.detect(), memory=None)
    monkeypatch.setattr(cgroups, "detect", lambda: support)


def _limit(out: RunResult, name: str) -> str:
    line = next(x for x in out.stdout.splitlines() if x.startswith(name))
    return line[len(name):].split()[0]


@pytest.mark.usefixtures("no_memory_cgroup")
def test_the_memory_limit_is_on_private_memory_and_the_address_space_is_a_backstop(sandbox: Run) -> None:
    out = sandbox(["cat", "/proc/self/limits"], limits=Limits(memory=256 * MiB, timeout_s=30))
    assert out.exit_code == 0, out.stderr
    assert _limit(out, "Max data size") == str(256 * MiB)
    assert int(_limit(out, "Max address space")) >= 32 << 30


@pytest.mark.usefixtures("no_memory_cgroup")
def test_an_allocation_over_the_limit_is_refused(sandbox: Run) -> None:
    script = "b = bytearray(300 * 2**20); print('allocated')"
    out = sandbox(["python3", "-c", script], limits=Limits(memory=128 * MiB, timeout_s=60))
    assert out.exit_code != 0 and "MemoryError" in out.stderr and "allocated" not in out.stdout
    fits = sandbox(["python3", "-c", "b = bytearray(30 * 2**20); print('allocated')"],
                   limits=Limits(memory=128 * MiB, timeout_s=60))
    assert fits.stdout.strip() == "allocated", fits.stderr


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.usefixtures("no_memory_cgroup")
def test_node_webassembly_and_fetch_run_under_the_default_limits(sandbox: Run) -> None:
    # V8 reserves ~10 GiB of address space per wasm memory, and fetch() compiles its HTTP parser
    # to wasm: both died under an address-space limit equal to the memory limit.
    script = ("const ms = []; for (let i = 0; i < 2; i++) ms.push(new WebAssembly.Memory({initial: 16}));"
              "fetch('http://127.0.0.1:9/').catch(e => console.log('wasm', ms.length, 'fetch', e.name))")
    out = sandbox(["node", "-e", script], limits=Limits(timeout_s=60))
    assert out.exit_code == 0, out.stderr
    assert out.stdout.strip() == "wasm 2 fetch TypeError"


# The same, for real, as a user who has no cgroup at all (`nobody`, dropped to from root with
# the system interpreter): no monkeypatching, the limits Warden picks on its own.
_AS_NOBODY = """
import json, os, tempfile
from warden.adapters.sandbox.host import build_spec
from warden.adapters.sandbox.runner import run_sandboxed
from warden.core.limits import Limits

ws = tempfile.mkdtemp()
def run(argv, memory):
    spec = build_spec(ws, argv, caller_env={"PATH": "/usr/bin:/bin"}, env={})
    out = run_sandboxed(spec, Limits(memory=memory, timeout_s=120))
    return {"code": out.exit_code, "out": out.stdout.strip(), "err": out.stderr[-400:], "via": out.limits_via}
node = ("new WebAssembly.Memory({initial: 16});"
        "fetch('http://127.0.0.1:9/').catch(e => console.log('wasm fetch', e.name))")
print(json.dumps({"uid": os.getuid(), "node": run(["node", "-e", node], 1 << 30),
                  "big": run(["python3", "-c", "bytearray(300 << 20)"], 128 << 20)}))
"""


def _system_python() -> str | None:
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to nobody (as a normal user the tests "
                    "above already run without a memory cgroup)")
@pytest.mark.skipif(shutil.which("node") is None or shutil.which("setpriv") is None or _system_python() is None,
                    reason="needs node, setpriv and a system python3")
def test_as_a_user_without_cgroups_node_runs_and_memory_is_still_limited() -> None:
    src = Path(__file__).resolve().parents[3] / "src"
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp", "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1",
           "LANG": "C.UTF-8"}
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(_system_python()),
                           "-c", _AS_NOBODY], capture_output=True, text=True, timeout=600, env=env, cwd="/",
                          check=False)
    if proc.returncode != 0 and "No module named 'warden'" in proc.stderr:
        pytest.skip(f"the checkout is not readable by nobody ({src})")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["uid"] == 65534
    node, big = report["node"], report["big"]
    assert node["via"] == "rlimit" and node["code"] == 0, node
    assert node["out"] == "wasm fetch TypeError"
    assert big["code"] != 0 and "MemoryError" in big["err"], big
