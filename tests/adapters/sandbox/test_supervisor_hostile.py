"""The live sandbox's supervisor (adapters/sandbox/supervisor.py) run as a real process, as it runs
inside a sandbox: Python, the bot's uid, non-dumpable. What a spawn that fails must leave behind,
and what a bot's process beside it can reach while commands start."""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.adapters.sandbox.live import HostLiveSandboxes, supervisor_source
from warden.core.limits import Limits
from warden.core.live import LiveSandbox
from warden.core.runs import SandboxRequest

NOBODY = 65534


def _frame(message: dict[str, object]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def _answer(sock: socket.socket) -> dict[str, object]:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        assert chunk, "the supervisor closed the connection"
        head += chunk
    (length,) = struct.unpack(">I", head)
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    answer = json.loads(body)
    assert isinstance(answer, dict)
    return answer


def _no_more_forks() -> None:  # in the supervisor's process, before exec
    # It is the only process of its user: with a limit of one, each of its forks fails (EAGAIN),
    # as when a sandbox's processes are at their limit.
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))


@pytest.fixture
def starved(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A supervisor whose every fork fails, and the path of its socket."""
    if os.geteuid() != 0:
        pytest.skip("runs the supervisor as another user (needs root)")
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 (what a sandbox runs the supervisor with)")
    path = str(tmp_path / "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    proc = subprocess.Popen([python, "-I", "-S", "-c", supervisor_source(), str(listener.fileno()), "60"],
                            pass_fds=[listener.fileno()], user=NOBODY, group=NOBODY, extra_groups=[],
                            preexec_fn=_no_more_forks, cwd="/")
    listener.close()
    try:
        yield proc, path
    finally:
        proc.kill()
        proc.wait(5)


def _req(folder: str, *argv: str) -> SandboxRequest:
    return SandboxRequest(folder, argv, Limits(timeout_s=30))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.parametrize("background", [False, True])
def test_a_spawn_that_cannot_fork_leaves_no_descriptor_behind(starved: tuple[subprocess.Popen[bytes], str],
                                                              background: bool) -> None:
    """A spawn whose fork fails once leaked its pipes (go, said, a background command's output):
    four to six descriptors a request until the supervisor could open none and its sandbox no
    longer served (a bot can hold its sandbox's processes at their limit)."""
    proc, path = starved
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(_frame({"op": "ping"}))
        assert _answer(conn) == {"ok": True}
        before = _fds(proc.pid)
        for i in range(10):
            given = [os.open(os.devnull, os.O_WRONLY) for _ in range(4)]
            passed = struct.pack("4i", *given)
            try:
                names = ["cgroup0", "cgroup1"] if background else ["stdout", "stderr", "cgroup0", "cgroup1"]
                conn.sendmsg([_frame({"op": "spawn", "id": f"{i:016d}", "argv": ["true"], "env": {}, "cwd": "/",
                                      "background": background, "timeout": 5, "fds": names})],
                             [(socket.SOL_SOCKET, socket.SCM_RIGHTS, passed[:4 * len(names)])])
            finally:
                for fd in given:
                    os.close(fd)
            answer = _answer(conn)
            assert answer["ok"] is False and "Resource temporarily unavailable" in str(answer["error"]), answer
        assert _fds(proc.pid) == before
        conn.sendall(_frame({"op": "list"}))
        assert _answer(conn) == {"ok": True, "processes": []}


# A bot's process beside the supervisor: it stops every command the supervisor starts before that
# command runs (same user: a signal it may send), and while it is stopped tries each way to a
# descriptor of another process: /proc/PID/fd (readlink, open), pidfd_getfd, and any cgroup
# `tasks` or `cgroup.procs` it can open for writing. What it reaches, it names.
THIEF = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
me, found, stopped = os.getpid(), set(), 0
deadline = time.monotonic() + float(sys.argv[1])
supervisor = os.getppid()
starters = (b'/etc/warden/rlimit-exec\0', b'/etc/warden/prlimit\0', b'/usr/bin/prlimit\0')
def cmd(pid):
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            return f.read()
    except OSError:
        return b''
top = cmd(supervisor)
def grab(pid):
    try:
        for name in os.listdir(f'/proc/{pid}/fd'):
            target = os.readlink(f'/proc/{pid}/fd/{name}')
            found.add(f'readlink {target}')
            try:
                os.close(os.open(f'/proc/{pid}/fd/{name}', os.O_WRONLY))
                found.add(f'opened {target}')
            except OSError:
                pass
    except OSError:
        pass
    pidfd = libc.syscall(434, pid, 0)
    if pidfd >= 0:
        for fd in range(3, 16):
            got = libc.syscall(438, pidfd, fd, 0)
            if got >= 0:
                found.add(f'pidfd_getfd {os.readlink(f"/proc/self/fd/{got}")}')
                os.close(got)
        os.close(pidfd)
for root, dirs, files in os.walk('/sys/fs/cgroup'):
    for name in files:
        if name in ('tasks', 'cgroup.procs'):
            try:
                os.close(os.open(os.path.join(root, name), os.O_WRONLY))
                found.add(f'writable {root}/{name}')
            except OSError:
                pass
while time.monotonic() < deadline:
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) in (me, 1):
            continue
        pid = int(entry)
        # A command forked, not yet run; or starting through Warden's launcher or prlimit, its
        # limits not yet set.
        if pid != supervisor and (cmd(pid) == top or cmd(pid).startswith(starters)):
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped += 1
            except OSError:
                continue
            grab(pid)
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:  # killed meanwhile (a command held past its start is killed)
                pass
        else:
            grab(pid)
print(f'stopped {stopped}')
hits = sorted(f for f in found if f.startswith('writable') or f.endswith(('/tasks', '/cgroup.procs')))
print('\n'.join(hits) or 'nothing')
"""


def test_a_bots_process_reaches_no_cgroup_file_of_a_command_starting_beside_it(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    folder = tmp_path / "ws"
    folder.mkdir()
    host = HostLiveSandboxes(tmp_path / "run", {"LANG": "C.UTF-8"})
    sandbox_id = f"sbx_{secrets.token_hex(8)}"
    started = host.start(sandbox_id, _req(str(folder), "true"), idle_s=60)
    row = LiveSandbox(sandbox_id, "w", "ws_w", "user", "none", "fp", 0, "node", started.pid, started.pid_start,
                      started.supervisor_pid, started.supervisor_start, started.socket, "t", "t", started.meta)
    try:
        host.spawn(row, "f" * 16, _req(str(folder), "python3", "-c", THIEF, "8"))
        time.sleep(0.5)  # it is looking
        for index in range(30):
            ran = host.run(row, f"{index:016x}", _req(str(folder), "cat", "/proc/self/cgroup"))
            assert ran.exit_code == 0, ran.stderr
            # Where it ran is a foreground command's own cgroup (its own, or the emptied one of a
            # command before it, reused), never the thief's, however late the thief let it go.
            if row.meta.get("cgroups"):
                ours = {f"-{earlier:016x}" for earlier in range(index + 1)}
                assert all(line[-17:] in ours for line in ran.stdout.splitlines()
                           if line.split(":")[1] in ("memory", "pids")), ran.stdout
        ended = host.wait(row, "f" * 16, 30)
        logs, _ = host.logs(row, "f" * 16)
        assert ended.exited is not None and ended.exited.exit_code == 0, logs.stderr
        report = logs.stdout.decode()
        assert report.startswith("stopped ") and int(report.split()[1]) > 0, report  # the attack did run
        assert report.splitlines()[1:] == ["nothing"], report
    finally:
        host.stop(row)
