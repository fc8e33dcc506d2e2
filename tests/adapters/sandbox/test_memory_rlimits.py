"""The memory limit without a memory cgroup (a normal user with no delegation): RLIMIT_DATA.

As root the memory cgroup is taken away by hand, the pids one kept (as root without a pids
cgroup every command is refused); as a normal user here there is none to take away.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable

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
