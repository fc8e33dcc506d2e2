"""Argument lists the kernel cannot take (E2BIG): bad input with the fix, nothing left behind."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from warden.adapters.sandbox import cgroups, runner
from warden.core.errors import InvalidInput
from warden.core.limits import Limits
from warden.core.runs import RunResult

Run = Callable[..., RunResult]


def _our_cgroups() -> set[str]:
    support = cgroups.detect()
    found = set()
    for spec in (support.memory, support.pids):
        if spec is not None and os.path.isdir(spec[1]):
            found |= {f"{spec[1]}/{d}" for d in os.listdir(spec[1]) if d.startswith(f"warden-{os.getpid()}-")}
    return found


def _opened_since(fds: set[str]) -> dict[str, str]:
    found = {}
    for fd in set(os.listdir("/proc/self/fd")) - fds:
        with contextlib.suppress(OSError):
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


@pytest.fixture
def nothing_left_behind() -> Iterator[None]:
    """The test leaves no descriptor open and no cgroup of this process behind."""
    fds = set(os.listdir("/proc/self/fd"))
    groups = _our_cgroups()
    yield
    # Another test's thread still ending in this worker (a server, a kept connection) may hold
    # a descriptor for a moment (CI as root once saw one); what the run left stays.
    deadline = time.monotonic() + 3
    while (extra := _opened_since(fds)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not extra, f"descriptors left open: {extra}"
    assert _our_cgroups() <= groups


def test_one_argument_over_the_kernels_limit_is_invalid_input(sandbox: Run, nothing_left_behind: None) -> None:
    with pytest.raises(InvalidInput) as info:
        sandbox(["echo", "x" * (200 * 1024)])
    message = info.value.message
    assert "too long" in message and "stdin or a file" in message and "\n" not in message
    assert f"{200 * 1024 + 1} bytes" in message and str(32 * os.sysconf("SC_PAGE_SIZE")) in message
    assert info.value.code == "invalid"


def test_a_command_line_over_the_total_limit_is_invalid_input(sandbox: Run, nothing_left_behind: None) -> None:
    pieces = os.sysconf("SC_ARG_MAX") // (100 * 1024) + 2
    with pytest.raises(InvalidInput, match="the command line and environment are too long"):
        sandbox(["true", *(["y" * (100 * 1024)] * pieces)])
    with pytest.raises(InvalidInput, match="too long"):  # the environment counts too
        sandbox(["true"], env={f"V{i}": "z" * (100 * 1024) for i in range(pieces)})


def test_e2big_from_the_kernel_is_invalid_input_too(monkeypatch: pytest.MonkeyPatch, sandbox: Run,
                                                    nothing_left_behind: None) -> None:
    # Were the up-front check wrong for some kernel, execve's own E2BIG says the same; the
    # cgroup made for the run and every descriptor are gone all the same.
    original = runner.too_long_for_exec
    asked: list[bool] = []

    def only_after_the_kernel(argv: list[str], environ: dict[str, str], *, always: bool = False) -> object:
        asked.append(always)
        return original(argv, environ, always=True) if always else None

    monkeypatch.setattr(runner, "too_long_for_exec", only_after_the_kernel)
    with pytest.raises(InvalidInput, match=r"^an argument .* too long .*; pass data through stdin or a file$"):
        sandbox(["echo", "x" * (200 * 1024)], limits=Limits(timeout_s=30))
    assert asked == [False, True]  # Popen was tried and failed with E2BIG


def test_long_arguments_under_the_limit_still_run(sandbox: Run, workspace: Path) -> None:
    out = sandbox(["sh", "-c", 'echo "${#1} $#"', "_", "a" * 100_000, *(["b" * 100_000] * 8)])
    assert out.exit_code == 0, out.stderr
    assert out.stdout == "100000 9\n"
