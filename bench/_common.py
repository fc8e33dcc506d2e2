"""Helpers the benchmarks share: timing a callable, the floor any bwrap run pays, a home's daemon."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def measure(fn: Callable[[], object], n: int) -> list[float]:
    """Milliseconds of `n` calls of `fn`, after one warm-up call."""
    fn()  # warm-up
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def raw_bwrap_argv() -> list[str]:
    """bwrap with Warden's namespaces and nothing else: the floor of every sandboxed run."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for link in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/usr/bin/true"]


def bench_home(tmp: str) -> tuple[Path, dict[str, str]]:
    """A fresh Warden home under `tmp` and the small environment the benchmarks run it with."""
    home = Path(tmp) / "home"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
    env["WARDEN_HOME"] = str(home)
    return home, env


@contextlib.contextmanager
def bot_exec(tmp: str) -> Iterator[tuple[Any, Callable[[], None]]]:
    """A home under `tmp` (no daemon) with workspace `bench` and bot `bench-bot` granted read,
    write and execute: the open Warden, and a call that runs `true` as that bot in-process (authentication, grant,
    the run in its live sandbox, audit)."""
    from warden import Warden
    from warden.services.bot_requests import Command

    home, env = bench_home(tmp)
    env["WARDEN_DAEMON"] = "0"
    with Warden.open(home, environ=env) as w:
        w.create("bench", template="minimal")
        w.app.grants.register_bot("bench-bot")
        token = w.app.grants.grant("bench", "bench-bot", "read,write,execute").token
        command = Command(argv=("true",))

        def run() -> None:
            principal = w.app.auth.authenticate(token)
            assert w.app.bot_requests.exec(principal, "bench", command).exit_code == 0

        yield w, run


def stop_daemon(home: Path) -> None:
    """End the benchmark home's daemon and wait for it and its children (its spare, which may
    be opening the registry) to be gone, so the home's folder can go with the temporary folder."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = False
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"warden.interfaces.cli.daemon" in argv and os.fsencode(str(home)) in argv:
                    found = True
                    with contextlib.suppress(OSError):
                        os.kill(int(entry), signal.SIGTERM)
        if not found:
            return
        time.sleep(0.05)
