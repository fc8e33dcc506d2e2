"""The live sandbox's supervisor (adapters/sandbox/supervisor.py) run as a real process, as it runs
inside a sandbox: Python, the bot's uid, non-dumpable. What a spawn that fails must leave behind,
and what a bot's process beside it can reach while commands start."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.adapters.sandbox.live import supervisor_source

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
