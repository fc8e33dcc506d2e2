"""Live sandboxes on this host (adapters/sandbox/live.py and supervisor.py), with real bubblewrap:
commands share one sandbox yet keep their own limits and timeouts; background output is kept in
bounded rings; stopping ends everything; nothing inside reaches the supervisor; and a supervisor
that answers what the protocol does not allow (huge, malformed, nothing) costs Warden a bounded
wait and an error, never more."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.hangup import hang_up
from tests.support.launcher import build_launcher
from tests.support.waiting import wait_until
from warden.adapters.processes import alive
from warden.adapters.sandbox import cgroups
from warden.adapters.sandbox import live as live_module
from warden.adapters.sandbox.live import HostLiveSandboxes
from warden.core.errors import Unavailable
from warden.core.limits import Limits
from warden.core.live import RING_BYTES, HungUpFirst, LiveProcess, LiveSandbox
from warden.core.runs import SandboxRequest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# Its own per test process: a live sandbox's cgroup is named after its id, machine-wide.
SBX = f"sbx_{secrets.token_hex(8)}"


@pytest.fixture
def folder(tmp_path: Path) -> str:
    ws = tmp_path / "ws"
    ws.mkdir()
    return str(ws)


@pytest.fixture
def host(tmp_path: Path) -> HostLiveSandboxes:
    return HostLiveSandboxes(tmp_path / "run", {"LANG": "C.UTF-8"})


def _row(sandbox_id: str, started: object) -> LiveSandbox:
    s = started
    return LiveSandbox(sandbox_id, "w", "ws_w", "user", "none", "fp", 0, "node", s.pid, s.pid_start,  # type: ignore[attr-defined]
                       s.supervisor_pid, s.supervisor_start, s.socket, "t", "t", s.meta)  # type: ignore[attr-defined]


@pytest.fixture
def sandbox(host: HostLiveSandboxes, folder: str) -> Iterator[LiveSandbox]:
    started = host.start(SBX, SandboxRequest(folder, ("true",), Limits(timeout_s=60)), idle_s=60)
    row = _row(SBX, started)
    yield row
    host.stop(row)


@pytest.fixture(scope="module")
def built_launcher(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_launcher(tmp_path_factory.mktemp("launcher") / "warden-rlimit-exec"))


@pytest.fixture(params=["rlimit-exec", "prlimit"])
def through(request: pytest.FixtureRequest, host: HostLiveSandboxes, folder: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, LiveSandbox]]:
    """A live sandbox whose commands start through Warden's launcher, or (none built: no C
    compiler) through prlimit; with the name of the program sealed in at /etc/warden/."""
    launcher = request.getfixturevalue("built_launcher") if request.param == "rlimit-exec" else "/no/launcher"
    monkeypatch.setattr(live_module, "HOST_RLIMIT_EXEC", launcher)
    started = host.start(SBX, SandboxRequest(folder, ("true",), Limits(timeout_s=60)), idle_s=60)
    row = _row(SBX, started)
    yield request.param, row
    host.stop(row)


@pytest.fixture
def through_prlimit(host: HostLiveSandboxes, folder: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveSandbox]:
    """A live sandbox whose commands start through prlimit: Warden's launcher was not built."""
    monkeypatch.setattr(live_module, "HOST_RLIMIT_EXEC", "/no/launcher")
    started = host.start(SBX, SandboxRequest(folder, ("true",), Limits(timeout_s=60)), idle_s=60)
    row = _row(SBX, started)
    yield row
    host.stop(row)


def _req(folder: str, *argv: str, **limits: object) -> SandboxRequest:
    return SandboxRequest(folder, argv, Limits(**{"timeout_s": 30, **limits}))  # type: ignore[arg-type]


def _process(sandbox: LiveSandbox, process_id: str, meta: dict[str, object]) -> LiveProcess:
    return LiveProcess(process_id, sandbox.id, "w", "user", "", ("x",), "running", None, None, False, "t", None,
                       "node", meta)


def test_foreground_commands_share_it_with_their_own_limits(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                            folder: str) -> None:
    first = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "ulimit -t; ulimit -n; echo x > shared.txt",
                                             cpu_seconds=7, open_files=99))
    assert (first.exit_code, first.stdout) == (0, "7\n99\n")
    second = host.run(sandbox, "b" * 16, _req(folder, "sh", "-c", "ulimit -t; cat shared.txt; echo $$ > /tmp/pid",
                                              cpu_seconds=11))
    assert (second.exit_code, second.stdout) == (0, "11\nx\n")
    # /tmp is the sandbox's own, kept between its commands.
    assert host.run(sandbox, "c" * 16, _req(folder, "cat", "/tmp/pid")).stdout.strip().isdigit()
    assert second.seccomp is True


def test_what_a_foreground_command_leaves_behind_is_killed(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                           folder: str) -> None:
    left = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"))
    pid = left.stdout.strip()
    assert left.exit_code == 0 and pid.isdigit()
    # Gone or a zombie (dead, waiting for the supervisor to reap it): `kill -0` alone counts a
    # zombie as there. Killed as the command was reaped, it may not have run to its end yet on a
    # busy machine (met in CI as a normal user, where no cgroup kills it at once): a few seconds.
    probe = host.run(sandbox, "b" * 16, _req(folder, "sh", "-c",
                                             "for i in $(seq 50); do "
                                             f"s=$(awk '/^State/ {{print $2}}' /proc/{pid}/status 2>/dev/null); "
                                             "{ [ -z \"$s\" ] || [ \"$s\" = Z ]; } && { echo gone; exit; }; "
                                             "sleep 0.1; done; echo alive"))
    assert probe.stdout == "gone\n"


# Alone: it fills memory and forks to a limit, like the escape lab's bombs (the pids limit here
# depends on the sandbox's cgroup, which a parallel run's sweeps and bombs have disturbed).
@pytest.mark.alone
def test_memory_and_process_limits_hold_per_command(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                    folder: str) -> None:
    hog = host.run(sandbox, "a" * 16, _req(folder, "python3", "-c", "x = bytearray(400 << 20); print('got it')",
                                           memory=64 << 20))
    assert hog.exit_code != 0 and "got it" not in hog.stdout
    forks = host.run(sandbox, "b" * 16, _req(folder, "sh", "-c",
                                             "for i in $(seq 40); do sleep 5 & done 2>/dev/null; wait; echo done",
                                             pids=8))
    assert "fork" in forks.stderr.lower() or "resource" in forks.stderr.lower() or forks.exit_code != 0
    fine = host.run(sandbox, "c" * 16, _req(folder, "python3", "-c", "x = bytearray(100 << 20); print('ok')"))
    assert fine.stdout == "ok\n"  # the next command has its own limits again


def test_a_command_joins_its_own_cgroups_itself_where_that_spares_the_kernels_lock(
        host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On cgroup v1 the command writes "0" to its cgroups' `tasks` files before it runs: Warden's
    own move of it would wait ~10 ms for an RCU grace period when commands come spaced out
    (bench/exec.py --spaced). It is in them, and Warden moved nothing."""
    support = cgroups.detect()
    specs = [spec for spec in (support.memory, support.pids) if spec is not None]
    if not specs or any(version != "v1" for version, _ in specs) or not sandbox.meta.get("cgroups"):
        pytest.skip("no cgroup v1 hierarchies this process may use")

    def moved(self: cgroups.Cgroup, pid: int) -> None:
        raise AssertionError("Warden moved the command into its cgroup")

    monkeypatch.setattr(cgroups.Cgroup, "add", moved)
    shown = host.run(sandbox, "d" * 16, _req(folder, "cat", "/proc/self/cgroup"))
    assert shown.exit_code == 0, shown.stderr
    # Inside its cgroup namespace (rooted at the sandbox's own cgroup) the command's cgroup is a
    # sibling; its name ends with the process id either way.
    lines = [line for line in shown.stdout.splitlines() if line.split(":")[1] in ("memory", "pids")]
    assert len(lines) == len(specs) and all(line.endswith("-" + "d" * 16) for line in lines), shown.stdout


def test_a_supervisor_saying_it_joined_when_it_did_not_gets_its_command_moved_by_warden(
        host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not sandbox.meta.get("cgroups"):
        pytest.skip("no cgroups this process may use")
    # No files to join by, yet the answer says it joined: Warden checks, and moves it itself.
    monkeypatch.setattr(cgroups.Cgroup, "join_files", lambda self: [])
    real = live_module.parse_spawned
    monkeypatch.setattr(live_module, "parse_spawned", lambda data: real(data)._replace(joined=True))
    shown = host.run(sandbox, "e" * 16, _req(folder, "cat", "/proc/self/cgroup"))
    assert shown.exit_code == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if line.split(":")[1] in ("memory", "pids")]
    assert lines and all(line.endswith("-" + "e" * 16) for line in lines), shown.stdout


def test_stdin_timeouts_and_missing_programs(host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str) -> None:
    fed = host.run(sandbox, "a" * 16, SandboxRequest(folder, ("wc", "-c"), Limits(timeout_s=30),
                                                     stdin=b"x" * 300_000))
    assert fed.stdout.strip() == "300000"
    started = time.monotonic()
    slow = host.run(sandbox, "b" * 16, _req(folder, "sleep", "60", timeout_s=1))
    assert (slow.exit_code, slow.timed_out) == (124, True) and time.monotonic() - started < 10
    missing = host.run(sandbox, "c" * 16, _req(folder, "no-such-program"))
    assert missing.exit_code == 127 and "execvp no-such-program" in missing.stderr
    # An argument no exec can pass fails the command as a fork's child would, not the sandbox.
    unpassable = host.run(sandbox, "d" * 16, _req(folder, "echo", "a\0b"))
    assert unpassable.exit_code == 126


def _ops(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The ops Warden sends the supervisor from now on."""
    sent: list[object] = []
    real = live_module._Channel.send

    def spy(self: object, message: dict[str, object], fds: list[int] | None = None) -> None:
        sent.append(message.get("op"))
        real(self, message, fds)  # type: ignore[arg-type]

    monkeypatch.setattr(live_module._Channel, "send", spy)
    return sent


def test_a_command_starts_with_its_limits_without_warden_holding_it(host: HostLiveSandboxes,
                                                                    through: tuple[str, LiveSandbox], folder: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No fork of the supervisor and no `go` round trip: the supervisor starts the command through
    its sealed launcher, else its sealed copy of `prlimit` (bench/exec.py's live rows). The limits
    are hard ones all the same, every signal is at its default and no descriptor of the
    supervisor's is left open."""
    sealed_name, sandbox = through
    other = "prlimit" if sealed_name == "rlimit-exec" else "rlimit-exec"
    sent = _ops(monkeypatch)
    shown = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "ulimit -Ht; ulimit -Hn; ulimit -Hc; "
                                             "grep -E '^Sig(Blk|Ign)' /proc/self/status; ls /proc/$$/fd",
                                             cpu_seconds=7, open_files=99))
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout == ("8\n99\n0\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n0\n1\n2\n"), shown.stdout
    assert sent == ["spawn"]
    # Its copy of the program may be run, not read; the other is not there.
    sealed = host.run(sandbox, "b" * 16, _req(folder, "sh", "-c", f"stat -c %A /etc/warden/{sealed_name}; "
                                              f"cat /etc/warden/{sealed_name} >/dev/null; ls /etc/warden"))
    assert sealed.stdout == f"---x--x--x\n{sealed_name}\nsupervisor.py\n", sealed.stdout + sealed.stderr
    assert "Permission denied" in sealed.stderr and other not in sealed.stdout, sealed.stderr


# In the sandbox: prlimit or Warden's launcher started with a full pipe as its stdout and stderr
# (prlimit prints its table, the launcher its usage line, and blocks writing it), then every way
# in to it a process of the same user has (it runs before the command's limits are set: a bot's
# process writing into it would start its command without them).
REACH = r"""
import os, subprocess, sys
r, w = os.pipe()
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b"x" * 65536)
except BlockingIOError:
    pass
os.set_blocking(w, True)
for program in sys.argv[1:]:
    p = subprocess.Popen([program], stdout=w, stderr=w)
    while open(f"/proc/{p.pid}/comm").read().strip() != os.path.basename(program):
        pass
    try:
        os.close(os.open(f"/proc/{p.pid}/mem", os.O_RDWR))
        print(program, "open")
    except PermissionError:
        print(program, "closed")
    p.kill()
    p.wait()
"""


def test_no_process_of_the_sandbox_reaches_into_its_launcher(host: HostLiveSandboxes,
                                                             through: tuple[str, LiveSandbox], folder: str) -> None:
    sealed_name, sandbox = through
    # A readable copy, as a bot could make of a program it may read (the host's prlimit is one).
    readable = "/usr/bin/prlimit"
    if sealed_name == "rlimit-exec":
        readable = f"{folder}/rlimit-exec"
        shutil.copy(live_module.HOST_RLIMIT_EXEC, readable)
    tried = host.run(sandbox, "a" * 16, _req(folder, "python3", "-c", REACH, readable, f"/etc/warden/{sealed_name}"))
    # The readable copy shows the way in is there (no Yama on this kernel); the sealed one is shut.
    if tried.stdout.startswith(f"{readable} closed"):
        pytest.skip("this kernel keeps /proc/PID/mem of a process's siblings closed anyway (Yama)")
    assert tried.stdout == f"{readable} open\n/etc/warden/{sealed_name} closed\n", tried.stdout + tried.stderr


def test_the_loaders_variables_never_reach_prlimit(host: HostLiveSandboxes, through_prlimit: LiveSandbox,
                                                   folder: str) -> None:
    """LD_PRELOAD would run the bot's code in `prlimit` before it set the limits: such a command
    is forked, and sets them itself. (ld.so complains once per process it could not preload for:
    once for the command alone, twice had prlimit run with it.)"""
    ran = host.run(through_prlimit, "a" * 16, SandboxRequest(folder, ("sh", "-c", "ulimit -Ht"),
                                                             Limits(timeout_s=30, cpu_seconds=7),
                                                             env={"LD_PRELOAD": "/no/such.so"}))
    assert ran.stdout == "8\n"
    assert ran.stderr.count("cannot be preloaded") == 1, ran.stderr


def test_a_script_whose_interpreter_is_missing_reads_as_in_a_fresh_sandbox(
        host: HostLiveSandboxes, through: tuple[str, LiveSandbox], folder: str) -> None:
    """A script whose `#!` names no program here (a venv made on the host, say) fails with bwrap's
    words, which Warden explains, not with those of the sealed launcher or `prlimit` that would
    have run it."""
    _, sandbox = through
    script = Path(folder) / "tool"
    script.write_text("#!/no/such/interpreter\necho ran\n")
    script.chmod(0o755)
    ran = host.run(sandbox, "a" * 16, _req(folder, "./tool"))
    assert (ran.exit_code, ran.stderr) == (127, "bwrap: execvp ./tool: No such file or directory\n"), ran.stderr
    # Its interpreter there, it runs (through the sealed program, its limits hard all the same).
    script.write_text("#!/bin/sh\nulimit -Ht\n")
    ran = host.run(sandbox, "b" * 16, _req(folder, "./tool", cpu_seconds=7))
    assert (ran.exit_code, ran.stdout) == (0, "8\n"), ran.stderr


def test_prlimits_own_library_never_writes_into_a_commands_output(host: HostLiveSandboxes,
                                                                  through_prlimit: LiveSandbox, folder: str) -> None:
    """libsmartcols, which `prlimit` links, prints debug lines into the command's stderr for
    LIBSMARTCOLS_DEBUG (before the limits are set): such a command is forked, and gets the variable."""
    ran = host.run(through_prlimit, "a" * 16, SandboxRequest(folder, ("sh", "-c",
                                                                      "ulimit -Ht; echo $LIBSMARTCOLS_DEBUG"),
                                                             Limits(timeout_s=30, cpu_seconds=7),
                                                             env={"LIBSMARTCOLS_DEBUG": "all"}))
    assert (ran.exit_code, ran.stdout, ran.stderr) == (0, "8\nall\n", ""), ran.stderr


def test_a_background_server_is_reached_and_its_output_kept_in_a_ring(host: HostLiveSandboxes,
                                                                      sandbox: LiveSandbox, folder: str) -> None:
    meta = host.spawn(sandbox, "a" * 16, _req(folder, "python3", "-u", "-m", "http.server", "8000",
                                              "--bind", "127.0.0.1", timeout_s=120))
    server = _process(sandbox, "a" * 16, meta)
    probe = ("import urllib.request, time\nfor i in range(100):\n    try:\n"
             "        print(urllib.request.urlopen('http://127.0.0.1:8000/').status); break\n"
             "    except OSError: time.sleep(0.05)")
    assert host.run(sandbox, "b" * 16, _req(folder, "python3", "-c", probe)).stdout == "200\n"
    wait_until(lambda: b"GET / HTTP" in host.logs(sandbox, "a" * 16)[0].stderr, message="the request was not logged")
    flood = host.spawn(sandbox, "c" * 16, _req(folder, "python3", "-c",
                                               "import sys; sys.stdout.write('y' * (3 << 20)); print('end')"))
    done = host.wait(sandbox, "c" * 16, 30)
    assert done.exited is not None and done.exited.exit_code == 0
    logs, ended = host.logs(sandbox, "c" * 16)
    assert ended is not None and len(logs.stdout) <= RING_BYTES and logs.stdout.endswith(b"end\n")
    assert logs.dropped_stdout >= (3 << 20) - RING_BYTES
    host.release(_process(sandbox, "c" * 16, flood))
    host.signal(sandbox, server, 15)
    stopped = host.wait(sandbox, "a" * 16, 10)
    assert stopped.exited is not None and stopped.exited.signal == 15
    assert host.release(server) is False


def test_a_background_timeout_kills_it(host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str) -> None:
    host.spawn(sandbox, "a" * 16, _req(folder, "sleep", "60", timeout_s=1))
    ended = host.wait(sandbox, "a" * 16, 20)
    assert ended.exited is not None and ended.exited.timed_out



def test_a_signal_right_after_the_start_is_never_lost(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                       folder: str) -> None:
    # Sent before the forked child had put its handlers back to their defaults, a SIGTERM once
    # reached the supervisor's Python handler in the child and was dropped: `sleep` ran on.
    # Busy loops beside it make the child late to run, as on a loaded machine.
    for index in range(4):
        host.spawn(sandbox, f"{index:016x}".replace("0", "f"), _req(folder, "sh", "-c", "while :; do :; done"))
    for index in range(25):
        process_id = f"{index:016x}"
        meta = host.spawn(sandbox, process_id, _req(folder, "sleep", "300", timeout_s=300))
        host.signal(sandbox, _process(sandbox, process_id, meta), 15)
        ended = host.wait(sandbox, process_id, 10)
        assert ended.exited is not None and ended.exited.signal == 15, (index, ended)
        host.forget(sandbox, process_id)


def test_a_sandbox_whose_socket_was_removed_ends_at_once_with_its_processes(host: HostLiveSandboxes,
                                                                            folder: str) -> None:
    """Its Warden home removed (`rm -rf ~/.warden`, here its run folder), nothing can reach the
    supervisor again: it ran on, and a background process with it, for six idle periods (or for
    good while that process ran). It sees its socket's file unlinked and ends, killing them."""
    started = host.start(SBX, _req(folder, "true"), idle_s=600)
    row = _row(SBX, started)
    try:
        meta = host.spawn(row, "a" * 16, _req(folder, "sleep", "300", timeout_s=300))
        pid, start = meta["host_pid"], meta["host_start"]
        assert isinstance(pid, int) and isinstance(start, int) and alive(pid, start)
        shutil.rmtree(host.run_root)
        wait_until(lambda: not alive(pid, start) and not host.alive(row), timeout=15,
                   message="the sandbox outlived its removed socket")
    finally:
        host.stop(row)


def test_stopping_ends_every_process_in_it(host: HostLiveSandboxes, folder: str) -> None:
    started = host.start(SBX, _req(folder, "true"), idle_s=60)
    row = _row(SBX, started)
    meta = host.spawn(row, "a" * 16, _req(folder, "sleep", "300", timeout_s=300))
    pid, start = meta["host_pid"], meta["host_start"]
    assert isinstance(pid, int) and isinstance(start, int) and alive(pid, start)
    host.stop(row)
    wait_until(lambda: not alive(pid, start) and not host.alive(row), message="the sandbox outlived its stop")
    assert not os.path.exists(host.run_root / SBX)
    # Nor is a cgroup of it or of its uncollected background process left behind.
    assert [path for _, path in meta.get("cgroups") or [] if os.path.exists(path)] == []  # type: ignore[attr-defined]
    assert [path for _, path in started.meta.get("cgroups") or [] if os.path.exists(path)] == []  # type: ignore[attr-defined]


def test_an_idle_sandbox_ends_by_itself(host: HostLiveSandboxes, folder: str) -> None:
    row = _row(SBX, host.start(SBX, _req(folder, "true"), idle_s=1))
    try:
        wait_until(lambda: not host.alive(row), timeout=20, message="the idle sandbox did not end")
    finally:
        host.stop(row)


def _served_by(sandbox: LiveSandbox) -> set[int]:
    """The inodes of the connections the sandbox's supervisor holds open: its Unix sockets in
    the connected state (/proc/net/unix of this network namespace, where Warden bound its
    listener), found among its descriptors."""
    held = set()
    try:
        fds = os.listdir(f"/proc/{sandbox.supervisor_pid}/fd")
    except FileNotFoundError:
        fds = []
    except PermissionError:  # not root: a supervisor is not dumpable, so its descriptors are root's to list
        pytest.skip("listing a supervisor's descriptors takes root")
    for fd in fds:
        with contextlib.suppress(FileNotFoundError):
            target = os.readlink(f"/proc/{sandbox.supervisor_pid}/fd/{fd}")
            if target.startswith("socket:["):
                held.add(int(target[8:-1]))
    with open("/proc/net/unix") as listing:
        rows = [line.split() for line in listing.read().splitlines()[1:]]
    # Num RefCount Protocol Flags Type St Inode [Path]; St 03: connected (a listener's is 01).
    return {int(row[6]) for row in rows if len(row) >= 7 and row[5] == "03" and int(row[6]) in held}


def test_an_idle_sandbox_ends_by_itself_after_a_command(host: HostLiveSandboxes, folder: str) -> None:
    """Warden keeps the connection a command ended on for the next command: held open, it does
    not keep an unused sandbox from ending when idle (the supervisor counted any open connection
    as activity, so such a sandbox never ended)."""
    row = _row(SBX, host.start(SBX, _req(folder, "true"), idle_s=1))
    try:
        assert host.run(row, "a" * 16, _req(folder, "true")).exit_code == 0
        assert _served_by(row), "no connection was kept for the next command"
        wait_until(lambda: not host.alive(row), timeout=20, message="the idle sandbox did not end")
        # A command after it fails as before (the service starts a new sandbox), not by a hang.
        with pytest.raises(Unavailable):
            host.run(row, "b" * 16, _req(folder, "true"))
    finally:
        host.stop(row)


def test_commands_one_after_another_share_one_connection(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                        folder: str) -> None:
    """The connection a foreground command ended on serves the next one (no connect, accept and
    close each: ~0.3 ms a command); one that did not end cleanly (a timeout) is not kept."""
    assert host.run(sandbox, "a" * 16, _req(folder, "true")).exit_code == 0
    first = _served_by(sandbox)
    assert len(first) == 1, first
    result = host.run(sandbox, "b" * 16, _req(folder, "sh", "-c", "echo out; echo err >&2; exit 3"))
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert _served_by(sandbox) == first
    assert host.run(sandbox, "c" * 16, _req(folder, "sleep", "30", timeout_s=0.5)).timed_out
    wait_until(lambda: first.isdisjoint(_served_by(sandbox)), timeout=10,
               message="the connection of a command that timed out was kept")
    assert host.run(sandbox, "d" * 16, _req(folder, "true")).exit_code == 0


def test_connections_kept_to_sandboxes_that_ended_elsewhere_do_not_use_up_the_bound(
        host: HostLiveSandboxes, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept connection whose sandbox ended without this process asking it again (idle, or
    stopped by another Warden process: `warden stop`, a revoke from the CLI) was never let go:
    once a long-running `warden serve` held IN_ALL of them, no connection was kept again, each
    holding a descriptor, until it restarted (found attacking, attack24)."""
    monkeypatch.setattr(live_module._Kept, "IN_ALL", 1)
    first = _row(SBX, host.start(SBX, _req(folder, "true"), idle_s=1))
    other = f"sbx_{secrets.token_hex(8)}"
    second = None
    try:
        assert host.run(first, "a" * 16, _req(folder, "true")).exit_code == 0
        assert live_module._KEPT._count == 1
        wait_until(lambda: not host.alive(first), timeout=20, message="the idle sandbox did not end")
        second = _row(other, host.start(other, _req(folder, "true"), idle_s=60))
        assert host.run(second, "b" * 16, _req(folder, "true")).exit_code == 0
        assert live_module._Kept.key(second) in live_module._KEPT._kept, "the ended sandbox's connection took its place"
        assert live_module._Kept.key(first) not in live_module._KEPT._kept
    finally:
        host.stop(first)
        if second is not None:
            host.stop(second)


def test_connections_kept_to_sandboxes_that_ended_elsewhere_make_room(host: HostLiveSandboxes, folder: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept connections are dropped by this process's own stop of their sandbox; those to one
    that ended otherwise (idle, another process's stop or sweep, a supervisor killed) stayed in
    the pool until a command of that very sandbox came, which never did: a long-lived server's
    pool filled with dead ones (32) and kept none after that. They make room for a live one."""
    if not os.access(f"/proc/{os.getpid()}/fd", os.R_OK) or os.geteuid() != 0:
        pytest.skip("listing a supervisor's descriptors takes root")
    monkeypatch.setattr(live_module._Kept, "IN_ALL", 1)
    first = _row("sbx_" + "e" * 16, host.start("sbx_" + "e" * 16, _req(folder, "true"), idle_s=60))
    second = _row("sbx_" + "f" * 16, host.start("sbx_" + "f" * 16, _req(folder, "true"), idle_s=60))
    try:
        assert host.run(first, "a" * 16, _req(folder, "true")).exit_code == 0
        assert _served_by(first), "no connection was kept"
        os.kill(first.supervisor_pid, signal.SIGKILL)  # ended, not by this process's stop
        wait_until(lambda: not host.alive(first), timeout=10, message="the first sandbox did not end")
        assert host.run(second, "b" * 16, _req(folder, "true")).exit_code == 0
        assert _served_by(second), "a dead connection held the only place"
    finally:
        host.stop(first)
        host.stop(second)


@pytest.mark.skipif(os.geteuid() != 0, reason="shutting a supervisor's sockets from the host takes root")
def test_a_supervisor_that_hangs_up_before_any_answer_ran_nothing(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                   folder: str) -> None:
    """A kept connection (or a new one) that the supervisor closes, or refuses, before a word of
    answer to the spawn: HungUpFirst, which the service takes for a sandbox ending (an idle stop
    meeting the command) and runs the command in a fresh one; nothing ran here."""
    assert host.run(sandbox, "a" * 16, _req(folder, "true")).exit_code == 0
    assert hang_up(sandbox.supervisor_pid) >= 2  # its listener, and the connection kept for us
    try:
        with pytest.raises(HungUpFirst):
            host.run(sandbox, "b" * 16, _req(folder, "touch", "ran"))
        assert not os.path.exists(os.path.join(folder, "ran"))
    finally:
        os.kill(sandbox.supervisor_pid, signal.SIGKILL)


ATTACK = r"""
import ctypes, glob, os, socket, sys
found = []
me = os.getpid()
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for what in ('fd', 'environ', 'mem', 'cmdline'):
        path = f'/proc/{pid}/{what}'
        try:
            if what == 'fd':
                for fd in os.listdir(path):
                    target = os.readlink(f'{path}/{fd}')
                    if 'socket' in target and int(pid) != me:
                        s = socket.socket(fileno=os.open(f'{path}/{fd}', os.O_RDWR))
                        found.append(f'opened socket {pid}/{fd}')
            else:
                with open(path, 'rb') as handle:
                    data = handle.read(4096)
                if b'supervisor' in data and what != 'cmdline':
                    found.append(f'read {path}')
        except OSError:
            pass
libc = ctypes.CDLL(None, use_errno=True)
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != me]:
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        found.append(f'ptraced {pid}')
for path in sys.argv[1:]:
    if os.path.exists(path):
        found.append(f'sees {path}')
print('\n'.join(found) or 'nothing')
"""


def test_no_command_reaches_the_supervisor(host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str) -> None:
    result = host.run(sandbox, "a" * 16, _req(folder, "python3", "-c", ATTACK, sandbox.socket,
                                              str(host.run_root)))
    assert result.stdout == "nothing\n", result.stdout + result.stderr
    # The supervisor is still there and still answers.
    assert host.listing(sandbox) == []


# -- a supervisor that answers what it should not -------------------------------------------------
class Hostile:
    """A Unix socket server in place of a supervisor, answering every request with `reply`."""

    def __init__(self, path: Path, reply: Callable[[socket.socket], None]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Through the folder's descriptor, as Warden binds its own: a pytest-xdist worker's tmp
        # path can pass the 107 bytes a Unix socket address may hold.
        folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
        try:
            self.server.bind(f"/proc/self/fd/{folder}/{path.name}")
        finally:
            os.close(folder)
        self.server.listen(8)
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    self.reply(conn)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


REPLIES: dict[str, Callable[[socket.socket], None]] = {
    "a huge frame": lambda c: c.sendall(struct.pack(">I", 0xFFFFFFF0) + b"x" * 65536),
    "not json": lambda c: c.sendall(_frame(b"\xff" * 1000)),
    "the wrong shape": lambda c: c.sendall(_frame(b'{"ok": 1, "processes": {"a": 1}, "pid": -5}')),
    "a cut frame": lambda c: c.sendall(struct.pack(">I", 1000) + b"{"),
    "four megabytes of junk": lambda c: c.sendall(_frame(b"[" * ((4 << 20) - 8))),
}


@pytest.mark.parametrize("kind", sorted(REPLIES))
def test_a_hostile_answer_is_an_error_in_bounded_time(tmp_path: Path, folder: str, kind: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_module, "_ANSWER_TIMEOUT", 2.0)
    # The row names no cgroups: as root, the process-limit refusal (made before anything is sent)
    # would come first; the answers are what this test is about.
    monkeypatch.setattr(live_module, "check_process_limit", lambda *_: None)
    host = HostLiveSandboxes(tmp_path / "run", {})
    path = tmp_path / "run" / SBX / "supervisor.sock"
    hostile = Hostile(path, REPLIES[kind])
    me = os.getpid()
    row = LiveSandbox(SBX, "w", "ws_w", "user", "none", "fp", 0, "node", me, 0, me, 0, str(path), "t", "t",
                      {"pidns": 0})
    try:
        for call in (lambda: host.listing(row), lambda: host.logs(row, "a" * 16),
                     lambda: host.wait(row, "a" * 16, 0.5), lambda: host.forget(row, "a" * 16),
                     lambda: host.spawn(row, "a" * 16, _req(folder, "true")),
                     lambda: host.run(row, "a" * 16, _req(folder, "true"))):
            started = time.monotonic()
            with pytest.raises(Unavailable) as caught:
                call()
            assert caught.value.rule in ("live.bad_answer", "live.unreachable")
            assert time.monotonic() - started < 8
            assert len(caught.value.message) < 400
    finally:
        hostile.close()


def test_a_silent_supervisor_costs_a_bounded_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_module, "_ANSWER_TIMEOUT", 1.0)
    host = HostLiveSandboxes(tmp_path / "run", {})
    path = tmp_path / "run" / SBX / "supervisor.sock"
    hostile = Hostile(path, lambda c: time.sleep(30))
    me = os.getpid()
    row = LiveSandbox(SBX, "w", "ws_w", "user", "none", "fp", 0, "node", me, 0, me, 0, str(path), "t", "t", {})
    try:
        started = time.monotonic()
        with pytest.raises(Unavailable, match="in time"):
            host.listing(row)
        assert time.monotonic() - started < 5
    finally:
        hostile.close()


def test_a_row_naming_another_socket_is_refused(tmp_path: Path) -> None:
    host = HostLiveSandboxes(tmp_path / "run", {})
    row = LiveSandbox(SBX, "w", "ws_w", "user", "none", "fp", 0, "node", 1, 0, 1, 0, "/run/docker.sock", "t", "t", {})
    with pytest.raises(Unavailable, match="another socket"):
        host.listing(row)
    with pytest.raises(Unavailable, match="bad live sandbox id"):
        host.listing(row._replace(id="../../etc"))


def test_a_sandbox_with_network_has_its_proxy_beside_it_until_it_stops(host: HostLiveSandboxes, folder: str) -> None:
    from warden.core.network import NetworkPolicy

    request = SandboxRequest(folder, ("true",), Limits(timeout_s=30), network=NetworkPolicy.parse(["example.com"]))
    row = _row(SBX, host.start(SBX, request, idle_s=60))
    pid, start, net_dir = row.meta["proxy_pid"], row.meta["proxy_start"], row.meta["net_dir"]
    assert isinstance(pid, int) and isinstance(start, int) and isinstance(net_dir, str)
    try:
        assert alive(pid, start) and os.path.exists(os.path.join(net_dir, "proxy.sock"))
        proxied = host.run(row, "a" * 16, _req(folder, "sh", "-c", "echo $HTTPS_PROXY"))
        assert proxied.stdout.startswith("http://127.0.0.1:")  # the relay inside, in front of the proxy
        refused = host.run(row, "b" * 16, _req(folder, "python3", "-c",
                                                "import urllib.request; urllib.request.urlopen('http://example.org/')"))
        assert refused.exit_code == 1
        events, dropped = host.net_events(row)
        assert [(e.host, e.allowed) for e in events] == [("example.org", False)] and dropped == 0
        assert host.net_events(row) == ([], 0)  # each decision is handed over once
    finally:
        host.stop(row)
    wait_until(lambda: not alive(pid, start), message="the proxy outlived its sandbox")
    assert not os.path.exists(net_dir)


# Asks the proxy (through the relay at $HTTPS_PROXY) for a host it refuses, N times.
_ASK = """
import os, socket, sys
host, port = os.environ["HTTPS_PROXY"].rsplit("/", 1)[-1].rsplit(":", 1)
for i in range(int(sys.argv[1])):
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"CONNECT refused-%d.example.org:443 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % i)
        assert s.recv(4096).startswith(b"HTTP/1.1 403"), i
"""


def test_a_proxy_filled_with_refusals_still_hands_over_later_ones_and_counts_the_rest(
        host: HostLiveSandboxes, folder: str) -> None:
    """The live proxy wrote at most 1 MiB of decisions for the sandbox's whole life: a bot that
    first filled it with junk refusals went unaudited for every later attempt, for as long as
    the sandbox lived. The file is emptied as Warden takes it; what passed the bound (or the
    1,000 a run keeps) is counted, never lost from the sum."""
    from warden.core.network import NetworkPolicy

    request = SandboxRequest(folder, ("true",), Limits(timeout_s=120), network=NetworkPolicy.parse(["example.com"]))
    row = _row(SBX, host.start(SBX, request, idle_s=60))
    try:
        flood = host.run(row, "c" * 16, _req(folder, "python3", "-c", _ASK, "6000"))
        assert flood.exit_code == 0, flood.stderr
        first, dropped_first = host.net_events(row)
        assert len(first) == 1000 and all(not e.allowed for e in first)
        later = host.run(row, "d" * 16, _req(folder, "python3", "-c", _ASK, "1"))
        assert later.exit_code == 0, later.stderr
        second, dropped_second = host.net_events(row)
        assert [(e.host, e.allowed) for e in second] == [("refused-0.example.org", False)]
        assert len(first) + dropped_first + dropped_second == 6000  # every decision of the flood counted
    finally:
        host.stop(row)


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds every user but root")
def test_as_root_a_command_without_its_pids_cgroup_never_starts(host: HostLiveSandboxes, tmp_path: Path,
                                                                folder: str) -> None:
    # A cgroup the kernel will not make (here: its name taken) once left the command under an
    # rlimit that does not bind root: 40 forks in a sandbox limited to 8.
    support = cgroups.detect()
    if support.pids is None:
        pytest.skip("no writable pids cgroup")
    sandbox_id = f"sbx_{secrets.token_hex(8)}"
    taken = f"{support.pids[1]}/warden-live-{sandbox_id[4:]}"
    os.mkdir(taken)
    try:
        with pytest.raises(Unavailable, match="process limit cannot be enforced"):
            host.start(sandbox_id, _req(folder, "true"), idle_s=60)
    finally:
        os.rmdir(taken)
    assert not (host.run_root / sandbox_id).exists()
    row = _row(sandbox_id, host.start(sandbox_id, _req(folder, "true"), idle_s=60))
    try:
        taken = f"{support.pids[1]}/warden-live-{sandbox_id[4:]}-{'d' * 16}"
        os.mkdir(taken)
        try:
            with pytest.raises(Unavailable, match="process limit cannot be enforced"):
                host.run(row, "d" * 16, _req(folder, "touch", "ran"))
        finally:
            os.rmdir(taken)
        assert not (Path(folder) / "ran").exists()
        assert host.run(row, "e" * 16, _req(folder, "true")).exit_code == 0  # the sandbox still serves
    finally:
        host.stop(row)


def test_the_supervisors_command_line_is_short_and_its_file_read_only(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                       folder: str) -> None:
    # Its whole source was its argv: pages of it in every `ps` of the host.
    cmdline = Path(f"/proc/{sandbox.supervisor_pid}/cmdline").read_bytes()
    assert len(cmdline) < 300 and b"supervisor.py" in cmdline, cmdline[:300]
    out = host.run(sandbox, "f" * 16, _req(folder, "sh", "-c", "echo x >> /etc/warden/supervisor.py || echo refused"))
    assert "refused" in out.stdout


def test_two_collectors_keeping_one_process_output_at_once_both_succeed(host: HostLiveSandboxes) -> None:
    """Two Warden processes (or a server's threads) that look at a sandbox as a process ends both
    collect it and both keep its output. With one temporary name for both, the first's rename
    took the file from under the second, whose `warden ps` failed with a FileNotFoundError."""
    from warden.core.live import Logs

    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def keep() -> None:
        start.wait()
        for _ in range(300):
            try:
                host.keep_logs("0123456789abcdef", Logs(b"out\n", b"err\n"))
            except OSError as exc:
                failures.append(exc)
                return

    threads = [threading.Thread(target=keep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert host.kept_logs("0123456789abcdef") == Logs(b"out\n", b"err\n")
    assert sorted(p.name for p in (host.run_root / "logs").iterdir()) == ["0123456789abcdef.dropped",
                                                                           "0123456789abcdef.err",
                                                                           "0123456789abcdef.out"]


# What a command reopens through /proc/1/fd: bwrap, the sandbox's init, is dumpable and keeps
# its stdout and stderr (what it says should the start fail) open for the sandbox's life.
INTO_BWRAP_OUTPUT = """
for fd in 1 2; do
    timeout 1 sh -c "head -c 1048576 /dev/zero | tr '\\\\0' x >> /proc/1/fd/$fd" 2>/dev/null
    timeout 1 sh -c "head -c 1048576 /dev/zero | tr '\\\\0' x 1<> /proc/1/fd/$fd" 2>/dev/null
done
echo tried
"""


def test_no_command_writes_into_wardens_home_through_bwraps_output(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                    folder: str) -> None:
    """bwrap's output went to a file in Warden's home (run/sbx_…/sandbox.log), which a command
    reopened through /proc/1/fd/1 and filled up to its file size limit (100 MiB by default), on
    the host, outside its workspace and its quota. It is a pipe now, read only while bwrap
    starts: a command that reopens it can put at most a pipe's buffer in it, in memory."""
    result = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", INTO_BWRAP_OUTPUT))
    assert result.stdout == "tried\n", result.stdout + result.stderr
    written = sum(path.stat().st_size for path in host.run_root.rglob("*") if path.is_file())
    assert written < 65536, sorted(str(p) for p in host.run_root.rglob("*"))
    # The sandbox lives on and still answers.
    assert host.listing(sandbox) == []


def test_a_sandbox_that_cannot_start_says_what_bwrap_said(host: HostLiveSandboxes, folder: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    gone = str(tmp_path / "gone")
    options = live_module.bwrap_options
    monkeypatch.setattr(live_module, "bwrap_options", lambda spec: [*options(spec), "--ro-bind", gone, "/gone"])
    with pytest.raises(Unavailable, match=f"could not be set up \\(bwrap: .*{gone}"):
        host.start(SBX, SandboxRequest(folder, ("true",), Limits(timeout_s=60)), idle_s=60)
    assert not (host.run_root / SBX).exists()


def test_a_command_holds_its_three_descriptors_and_nothing_of_the_supervisors(
        through: tuple[str, LiveSandbox], host: HostLiveSandboxes, folder: str) -> None:
    """The supervisor starts commands by posix_spawn, which passes on every descriptor not
    closed on exec: its listening socket, other commands' connections, a background process's
    output pipes, the cgroup files a request brings. A command started while a background one
    runs (its pipes held by the supervisor) gets its 0, 1 and 2 only, and every signal at its
    default, none blocked."""
    _, sandbox = through
    host.spawn(sandbox, "b" * 16, _req(folder, "sleep", "60"))
    look = ("ls /proc/self/fd | sort -n | tr '\\n' ' '; echo; "
            "grep -E '^Sig(Blk|Ign)' /proc/self/status | tr -s '\\t' ' '")
    # `ls` holds one more of its own: the folder it lists.
    result = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", f"exec 2>&1; {look}"))
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["0", "1", "2", "3"], result.stdout
    assert lines[1:] == ["SigBlk: 0000000000000000", "SigIgn: 0000000000000000"], result.stdout


def _v1_cgroups(sandbox: LiveSandbox) -> None:
    support = cgroups.detect()
    specs = [spec for spec in (support.memory, support.pids) if spec is not None]
    if not specs or any(version != "v1" for version, _ in specs) or not sandbox.meta.get("cgroups"):
        pytest.skip("no cgroup v1 hierarchies this process may use (only there are a command's cgroups reused)")


def _cgroup_names(result_stdout: str) -> set[str]:
    """The names of a command's memory and pids cgroups, from its /proc/self/cgroup."""
    return {line.rsplit("/", 1)[-1] for line in result_stdout.splitlines()
            if line.count(":") >= 2 and line.split(":")[1] in ("memory", "pids")}


def test_a_foreground_commands_emptied_cgroups_serve_the_next_one(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                   folder: str) -> None:
    """Made and removed, a command's cgroups cost it ~0.5 ms (and the kernel's teardown more):
    the next foreground command of the sandbox in this process is born in the emptied ones."""
    _v1_cgroups(sandbox)
    first = host.run(sandbox, "a" * 16, _req(folder, "cat", "/proc/self/cgroup"))
    second = host.run(sandbox, "b" * 16, _req(folder, "cat", "/proc/self/cgroup"))
    assert _cgroup_names(first.stdout) == _cgroup_names(second.stdout) == {f"warden-live-{SBX[4:]}-{'a' * 16}"}


# Alone: it fills memory up to its limits, as the test above of limits per command.
@pytest.mark.alone
def test_reused_cgroups_keep_each_commands_own_limits_and_readings(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                   folder: str) -> None:
    _v1_cgroups(sandbox)
    alloc = "import sys; x = bytearray(int(sys.argv[1]) << 20); x[::4096] = b'x' * len(x[::4096]); print('ok')"
    big = host.run(sandbox, "a" * 16, _req(folder, "python3", "-c", alloc, "150", memory=512 << 20))
    assert big.stdout == "ok\n" and not big.oom_killed
    assert big.usage is not None and (big.usage.memory_peak_bytes or 0) >= 150 << 20
    # Reused, with a lower memory limit: the same allocation is killed, and said to be.
    hog = host.run(sandbox, "b" * 16, _req(folder, "python3", "-c", alloc, "150", memory=64 << 20))
    assert hog.exit_code != 0 and "ok" not in hog.stdout and hog.oom_killed
    # Reused again: an OOM kill of the command before is not this one's, nor its peak.
    small = host.run(sandbox, "c" * 16, _req(folder, "sh", "-c", "cat /proc/self/cgroup", memory=512 << 20))
    assert small.exit_code == 0 and not small.oom_killed
    assert small.usage is not None and (small.usage.memory_peak_bytes or 0) < 32 << 20
    assert _cgroup_names(small.stdout) == {f"warden-live-{SBX[4:]}-{'a' * 16}"}
    forks = host.run(sandbox, "d" * 16, _req(folder, "sh", "-c",
                                             "for i in $(seq 40); do sleep 5 & done 2>/dev/null; wait; echo done",
                                             pids=8))
    assert "fork" in forks.stderr.lower() or "resource" in forks.stderr.lower() or forks.exit_code != 0


def test_cgroups_still_charged_with_a_commands_files_are_not_reused(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                     folder: str) -> None:
    """Its files' pages stay charged to a command's memory cgroup after it ended; reclaiming
    them for the next command costs ~27 ms for 50 MiB, where new cgroups cost ~0.5 ms."""
    _v1_cgroups(sandbox)
    host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "head -c 20000000 /dev/zero > big; cat /proc/self/cgroup"))
    after = host.run(sandbox, "b" * 16, _req(folder, "cat", "/proc/self/cgroup"))
    assert _cgroup_names(after.stdout) == {f"warden-live-{SBX[4:]}-{'b' * 16}"}


def test_a_spare_whose_folders_went_is_replaced_and_a_stop_removes_the_spares(host: HostLiveSandboxes,
                                                                               sandbox: LiveSandbox,
                                                                               folder: str) -> None:
    _v1_cgroups(sandbox)
    host.run(sandbox, "a" * 16, _req(folder, "true"))
    kept = live_module._SPARES._kept[SBX]
    assert len(kept) == 1
    for _, path in kept[0].dirs:
        os.rmdir(path)  # as another process's stop of the sandbox, or the orphan sweep, removes them
    again = host.run(sandbox, "b" * 16, _req(folder, "cat", "/proc/self/cgroup"))
    assert again.exit_code == 0 and _cgroup_names(again.stdout) == {f"warden-live-{SBX[4:]}-{'b' * 16}"}
    spare_dirs = [path for _, path in live_module._SPARES._kept[SBX][0].dirs]
    assert spare_dirs and all(os.path.isdir(path) for path in spare_dirs)
    host.stop(sandbox)
    assert SBX not in live_module._SPARES._kept
    assert not any(os.path.exists(path) for path in spare_dirs)


def test_a_live_sandbox_is_born_in_its_cgroups_and_its_starting_thread_comes_back(
        host: HostLiveSandboxes, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its bwrap is started from inside the sandbox's cgroups, not moved there (a move after its
    start waited for the kernel's lock): bwrap, its init and the supervisor are in them, the
    thread in its own."""
    support = cgroups.detect()
    if not any(spec is not None and spec[0] == "v1" for spec in (support.memory, support.pids)):
        pytest.skip("no cgroup v1 hierarchies this process may use (only there is bwrap born in them)")
    own = Path("/proc/thread-self/cgroup").read_text()
    moved: list[int] = []
    add = cgroups.Cgroup.add
    monkeypatch.setattr(cgroups.Cgroup, "add", lambda self, pid: (moved.append(pid), add(self, pid))[1])
    started = host.start(SBX, SandboxRequest(folder, ("true",), Limits(timeout_s=60)), idle_s=60)
    row = _row(SBX, started)
    try:
        assert moved == []
        assert Path("/proc/thread-self/cgroup").read_text() == own
        group = cgroups.Cgroup(list(row.meta["cgroups"]))  # type: ignore[arg-type]
        for pid in (row.pid, row.meta["init_pid"], row.supervisor_pid):
            assert group.holds(pid), pid  # type: ignore[arg-type]
        assert host.run(row, "a" * 16, _req(folder, "true")).exit_code == 0
    finally:
        host.stop(row)


def test_a_command_that_stops_its_supervisor_still_ends_as_it_ended(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                                      folder: str) -> None:
    """The supervisor runs with the bot's rights: a command may stop it (`kill -STOP $PPID`,
    `pkill -STOP python`), which then says neither the command's end nor anything else; the run
    waited for its whole timeout. Warden lets it go on (SIGCONT) as soon as it sees it stopped."""
    started = time.monotonic()
    result = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "kill -STOP $PPID; echo done; exit 3", timeout_s=60))
    assert (result.exit_code, result.stdout, result.timed_out) == (3, "done\n", False), result
    assert time.monotonic() - started < 20  # not its 60 s timeout
    os.kill(sandbox.supervisor_pid, signal.SIGSTOP)  # stopped between two commands, the next one's spawn waits
    started = time.monotonic()
    assert host.run(sandbox, "b" * 16, _req(folder, "echo", "next")).stdout == "next\n"
    assert time.monotonic() - started < 5  # not the 10 s a supervisor has to answer


# A tracer of the test's own (as a debugger of the same user would be): it seizes the process,
# stops it (PTRACE_INTERRUPT), says so, and holds it until killed; the tracee goes on as it ends.
_TRACER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
pid = int(sys.argv[1])
for request in (0x4206, 0x4207):  # PTRACE_SEIZE, PTRACE_INTERRUPT
    if libc.ptrace(request, pid, None, None) != 0:
        print("refused", ctypes.get_errno(), flush=True)
        sys.exit(2)
os.waitpid(pid, 0x40000000)  # __WALL: its stop, which puts it in the tracing stop
print("held", flush=True)
time.sleep(300)
"""


@contextlib.contextmanager
def _traced(pid: int) -> Iterator[None]:
    """`pid` held by a tracer while the block runs (skips where this user may not trace it)."""
    tracer = subprocess.Popen([sys.executable, "-c", _TRACER, str(pid)], stdout=subprocess.PIPE, text=True)
    try:
        said = tracer.stdout.readline().strip() if tracer.stdout is not None else ""
        if said != "held":
            pytest.skip(f"this user may not trace the supervisor here ({said or 'no word'})")
        yield
    finally:
        tracer.kill()
        tracer.wait()


def test_a_supervisor_a_tracer_holds_ends_its_command_at_once(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                              folder: str) -> None:
    """A tracer that holds the supervisor (a debugger of the bot's user on the host; inside, the
    seccomp filter refuses ptrace) cannot be let go on as a stopped one is: the command it ran
    is ended (137) rather than waited for to its timeout, and a next command's spawn is refused
    at once (live.unreachable), not after the 10 s a supervisor has to answer."""
    started = time.monotonic()
    outcome: list[object] = []

    def run() -> None:
        outcome.append(host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "touch started; sleep 2; exit 3",
                                                       timeout_s=60)))

    running = threading.Thread(target=run)
    running.start()
    wait_until(lambda: os.path.exists(os.path.join(folder, "started")), message="the command did not start")
    with _traced(sandbox.supervisor_pid):
        running.join(30)
        assert outcome and outcome[0].exit_code == 137, outcome  # type: ignore[attr-defined]
        assert time.monotonic() - started < 20  # not its 60 s timeout
        started = time.monotonic()
        with pytest.raises(Unavailable) as refused:
            host.run(sandbox, "b" * 16, _req(folder, "echo", "next"))
        assert refused.value.rule == "live.unreachable" and "tracer" in refused.value.message
        assert time.monotonic() - started < 5


def test_a_spawn_given_up_while_the_supervisor_is_in_the_commands_cgroups_spares_the_supervisor(
        host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor enters a command's cgroups for the moment it spawns it. A run that gave up
    the spawn then (a Ctrl-C before the answer: 3 `warden run` in 60 into a person's live sandbox
    with a server in it) removed the command's cgroups, killing what was in them: the supervisor
    too, and with it the sandbox and the person's server. Here the supervisor is put in them as
    the answer comes and the run is interrupted there: the command is killed, the supervisor not."""
    _v1_cgroups(sandbox)
    made: list[cgroups.Cgroup] = []
    original_cgroup, original_frame = live_module._command_cgroup, live_module._Channel.frame

    def command_cgroup(*args: object, **kwargs: object) -> cgroups.Cgroup:
        made.append(original_cgroup(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    def frame(self: object, timeout: float | None = None) -> bytes:
        original_frame(self, timeout)  # type: ignore[arg-type]  # spawned: the supervisor back in its own
        made[-1].add(sandbox.supervisor_pid)  # as it is while it spawns
        # The command running when the stop comes (the answer can come before its first line runs).
        wait_until(lambda: os.path.exists(os.path.join(folder, "started")), message="the command did not start")
        raise KeyboardInterrupt

    monkeypatch.setattr(live_module, "_command_cgroup", command_cgroup)
    monkeypatch.setattr(live_module._Channel, "frame", frame)
    with pytest.raises(KeyboardInterrupt):
        host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "touch started; exec sleep 30"))
    monkeypatch.undo()
    assert host.alive(sandbox), "the supervisor was killed with the command"
    for _, path in sandbox.meta["cgroups"]:  # type: ignore[attr-defined]
        # Back where it lives, as it goes itself after a spawn.
        Path(path, "cgroup.procs").write_text(str(sandbox.supervisor_pid))
    left = [Path(path, "cgroup.procs").read_text().split() for _, path in made[-1].dirs if os.path.isdir(path)]
    assert not any(left), f"the command outlived its run: {left}"
    assert host.run(sandbox, "b" * 16, _req(folder, "echo", "next")).stdout == "next\n"


def test_a_command_that_ends_after_its_sandboxs_stop_began_keeps_no_spare(host: HostLiveSandboxes,
                                                                          sandbox: LiveSandbox, folder: str) -> None:
    """A stop drops this process's spares, then removes the sandbox's cgroup folders: a command
    of another thread that ended in between kept its cgroups as a spare whose folders then went,
    holding their descriptors until this process ended."""
    _v1_cgroups(sandbox)
    results: list[object] = []

    def run() -> None:
        results.append(host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "touch started; sleep 0.5")))

    running = threading.Thread(target=run)
    running.start()
    wait_until(lambda: os.path.exists(os.path.join(folder, "started")), message="the command did not start")
    live_module._SPARES.drop(SBX, stopped=True)  # the stop's first step, in this thread, as the command runs
    running.join(30)
    assert results and results[0].exit_code == 0  # type: ignore[attr-defined]
    assert SBX not in live_module._SPARES._kept
    assert not any(name.startswith(f"warden-live-{SBX[4:]}-") for _, path in sandbox.meta["cgroups"]  # type: ignore[attr-defined]
                   for name in os.listdir(os.path.dirname(path)))
    host.stop(sandbox)


def test_foreground_commands_leave_no_descriptor_behind(host: HostLiveSandboxes, sandbox: LiveSandbox,
                                                        folder: str) -> None:
    """Each command's cgroup.procs files were left open: two descriptors a command, for good (a
    server ran out after some hundreds)."""
    for index in range(3):
        host.run(sandbox, f"{index:016x}", _req(folder, "true"))
    before = len(os.listdir("/proc/self/fd"))
    for index in range(3, 23):
        assert host.run(sandbox, f"{index:016x}", _req(folder, "true")).exit_code == 0
    assert len(os.listdir("/proc/self/fd")) <= before


def test_a_commands_kill_that_comes_after_its_end_spares_the_next_command_in_its_cgroups(
        host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str) -> None:
    """A run's kill can come late (its quota watcher's, an abandoned client's): by then its
    cgroups may serve the sandbox's next command, which that kill must not reach."""
    _v1_cgroups(sandbox)
    kills: list[Callable[[], None]] = []
    first = host.run(sandbox, "a" * 16, replace(_req(folder, "true"), on_started=kills.append))
    assert first.exit_code == 0 and len(kills) == 1
    results: list[object] = []

    def run_second() -> None:
        try:
            results.append(host.run(sandbox, "b" * 16, _req(
                folder, "sh", "-c", "cat /proc/self/cgroup; touch started; sleep 1; echo alive")))
        except BaseException as exc:  # reported below, not lost in the thread
            results.append(exc)

    second = threading.Thread(target=run_second)
    second.start()
    wait_until(lambda: os.path.exists(os.path.join(folder, "started")), message="the second command did not start")
    kills[0]()  # the first run's, late
    second.join(30)
    ran = results[0]
    assert ran.exit_code == 0 and ran.stdout.endswith("alive\n"), ran  # type: ignore[attr-defined]
    assert _cgroup_names(ran.stdout) == {f"warden-live-{SBX[4:]}-{'a' * 16}"}  # type: ignore[attr-defined]


def test_a_commands_disk_quota_is_kept_by_the_loop_that_waits_on_it(
        host: HostLiveSandboxes, sandbox: LiveSandbox, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quota's watch is kept by the runner as it waits on the command, not handed to a thread
    and back (on a busy 2-core machine that handoff was ~1.5 ms of an exec of `true`); a command
    writing past the quota is still stopped as it writes."""
    from warden.adapters import quota as quota_module
    from warden.core.quota import DISK_KEY, Quota

    handed: list[object] = []

    def run(loop: Callable[[], None]) -> threading.Event:
        handed.append(loop)  # never run: the command would go unwatched
        done = threading.Event()
        done.set()
        return done

    monkeypatch.setattr(quota_module._THREADS, "run", run)
    quota = Quota(max_bytes=5 << 20, max_files=10_000, min_free=0)
    with quota_module.Watcher(folder, quota) as quick:
        result = host.run(sandbox, "0" * 16, replace(_req(folder, "true"), watch=quick, on_started=quick.arm))
    assert result.exit_code == 0 and quick.breach is None
    writer = "i=0; while [ $i -lt 200 ]; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done"
    started = time.monotonic()
    with quota_module.Watcher(folder, quota) as watcher:
        result = host.run(sandbox, "1" * 16, replace(_req(folder, "sh", "-c", writer), watch=watcher,
                                                     on_started=watcher.arm))
    assert handed == []
    assert watcher.breach == DISK_KEY and result.exit_code == 137, (result, watcher.breach)
    assert len([name for name in os.listdir(folder) if name.startswith("f")]) < 100
    assert time.monotonic() - started < 20



def _masked(host: HostLiveSandboxes, folder: str, *, denied: tuple[str, ...] = (),
            protected: tuple[str, ...] = ()) -> LiveSandbox:
    request = SandboxRequest(folder, ("true",), Limits(timeout_s=60), denied=denied, protected=protected)
    return _row(SBX, host.start(SBX, request, idle_s=60))


def _saved_over(path: Path, text: str) -> None:
    """What an editor's save does on the host: a new file renamed over the old one."""
    new = path.with_name(path.name + ".new")
    new.write_text(text)
    new.rename(path)


def test_a_denied_file_saved_over_on_the_host_is_seen_and_the_sandbox_is_no_longer_intact(
        host: HostLiveSandboxes, folder: str) -> None:
    # The kernel takes a mount away in every other namespace when its name is renamed over or
    # removed: the mask over a denied file no longer hides the new one in a running sandbox.
    # Nothing here prevents that; `intact` says so, and services/live.py stops the sandbox.
    secret = Path(folder) / "secret.txt"
    secret.write_text("old")
    sandbox = _masked(host, folder, denied=(str(secret),))
    try:
        assert host.intact(sandbox)
        assert host.run(sandbox, "a" * 16, _req(folder, "cat", "secret.txt")).exit_code != 0
        secret.write_text("written in place")  # the mask holds: still intact
        assert host.intact(sandbox)
        _saved_over(secret, "new secret")
        assert not host.intact(sandbox)
        assert host.run(sandbox, "b" * 16, _req(folder, "cat", "secret.txt")).stdout == "new secret"  # why
    finally:
        host.stop(sandbox)


def test_a_denied_path_made_after_the_start_and_a_protected_file_rewritten_are_seen(
        host: HostLiveSandboxes, folder: str) -> None:
    later = Path(folder) / "later.txt"
    kept = Path(folder) / "kept.json"
    kept.write_text("{}")
    sandbox = _masked(host, folder, denied=(str(later),), protected=(str(kept),))
    try:
        assert host.intact(sandbox)
        later.write_text("the person's, made while the sandbox runs")
        assert not host.intact(sandbox)
        later.unlink()
        assert host.intact(sandbox)
        _saved_over(kept, '{"rewritten": true}')  # atomically, as Warden writes its own files
        assert not host.intact(sandbox)
        # Its read-only bind went with the old file: the new one is writable inside.
        assert host.run(sandbox, "c" * 16, _req(folder, "sh", "-c", "echo x >> kept.json")).exit_code == 0
    finally:
        host.stop(sandbox)


def test_a_sandbox_started_without_the_record_is_not_intact(host: HostLiveSandboxes, sandbox: LiveSandbox) -> None:
    assert host.intact(sandbox)
    older = sandbox._replace(meta={k: v for k, v in sandbox.meta.items() if k not in ("mounts", "unmasked")})
    assert not host.intact(older)  # an older Warden's: never compared, so started again once


def test_the_daemons_look_reads_the_sandboxs_folder_and_passes_over_one_that_ended(
        host: HostLiveSandboxes, folder: str, tmp_path: Path) -> None:
    from warden.adapters.sandbox.held_mounts import HELD, intact_in

    secret = Path(folder) / "secret.txt"
    secret.write_text("old")
    sandbox = _masked(host, folder, denied=(str(secret),))
    own = tmp_path / "run" / SBX
    try:
        assert (own / HELD).is_file() and intact_in(own)
        _saved_over(secret, "new secret")
        assert not intact_in(own)  # the daemon sweeps at once
    finally:
        host.stop(sandbox)
    # A folder a killed Warden left, its sandbox gone: nothing to see (a sweep a second forked for it else).
    left = tmp_path / "left"
    left.mkdir()
    (left / HELD).write_text(json.dumps({"pid": sandbox.meta["init_pid"], "start": 1, "mounts": [["/x", 1, 2]],
                                         "unmasked": []}))
    assert intact_in(left)


def test_the_way_to_a_denied_path_that_did_not_exist_is_watched_and_cannot_be_moved(
        host: HostLiveSandboxes, folder: str) -> None:
    # A command that makes `a/b/` and, once the person wrote the denied `a/b/token` there, moves
    # `a` away (taking the file, leaving no denied path to see) before Warden looks: `a` is pinned,
    # and `a/b` appearing is enough to stop the sandbox.
    (Path(folder) / "a").mkdir()
    sandbox = _masked(host, folder, denied=(f"{folder}/a/b/token",))
    try:
        assert sandbox.meta["unmasked"] == [f"{folder}/a/b"]
        assert host.intact(sandbox)
        moved = host.run(sandbox, "a" * 16, _req(folder, "sh", "-c", "mv a c 2>&1; echo $?"))
        assert moved.stdout.strip().endswith("1") and (Path(folder) / "a").is_dir()
        assert host.intact(sandbox)
        assert host.run(sandbox, "b" * 16, _req(folder, "mkdir", "a/b")).exit_code == 0
        assert not host.intact(sandbox)
    finally:
        host.stop(sandbox)
