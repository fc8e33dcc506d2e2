"""`processes.alive(pid, start)` by pidfd: a process found to be itself is asked after by a
pidfd from then on (no read of /proc/PID/stat a run), with the same answers as by /proc: a
zombie is not alive, a pid whose start time differs is another process, and a forked child
asks afresh. Real processes of this host."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from warden.adapters import processes
from warden.adapters.processes import alive, start_time


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_process_found_alive_is_then_asked_after_by_its_pidfd(sleeper: subprocess.Popen[bytes]) -> None:
    started = start_time(sleeper.pid)
    assert started is not None
    assert alive(sleeper.pid, started)
    assert (sleeper.pid, started) in processes._PIDFDS
    assert alive(sleeper.pid, started)


def test_a_killed_process_is_not_alive_as_a_zombie_and_its_pidfd_is_let_go(
        sleeper: subprocess.Popen[bytes]) -> None:
    started = start_time(sleeper.pid)
    assert started is not None and alive(sleeper.pid, started)
    os.kill(sleeper.pid, signal.SIGKILL)
    # Not reaped yet: a zombie, which /proc called "Z" and the pidfd calls ended.
    os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)
    assert not alive(sleeper.pid, started)
    assert (sleeper.pid, started) not in processes._PIDFDS
    assert not alive(sleeper.pid, started)


def test_another_start_time_is_another_process_and_keeps_no_pidfd(sleeper: subprocess.Popen[bytes]) -> None:
    started = start_time(sleeper.pid)
    assert started is not None
    assert not alive(sleeper.pid, started + 1)
    assert (sleeper.pid, started + 1) not in processes._PIDFDS


def test_a_forked_child_keeps_none_of_its_parents_pidfds(sleeper: subprocess.Popen[bytes]) -> None:
    started = start_time(sleeper.pid)
    assert started is not None and alive(sleeper.pid, started)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.write(write_end, b"%d" % len(processes._PIDFDS))
        os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 16) == b"0"
    os.close(read_end)
    os.waitpid(child, 0)
    assert (sleeper.pid, started) in processes._PIDFDS


def test_the_pidfds_kept_are_bounded() -> None:
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(processes._PIDFDS_MAX + 5)]
    try:
        for proc in procs:
            started = start_time(proc.pid)
            assert started is not None and alive(proc.pid, started)
        assert len(processes._PIDFDS) <= processes._PIDFDS_MAX
        assert all(alive(proc.pid, start_time(proc.pid)) for proc in procs)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
