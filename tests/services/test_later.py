"""services/later: what a process must do later, on one timer thread, each job in a thread of its own."""

from __future__ import annotations

import os
import threading
import time

from warden.services import later


def test_a_job_runs_once_when_due_and_a_cancelled_one_never() -> None:
    ran: list[str] = []
    done = threading.Event()
    cancel_b = later.call(0.05, lambda: ran.append("b"))
    later.call(0.02, lambda: ran.append("a"))
    later.call(0.1, lambda: (ran.append("c"), done.set()))
    cancel_b()
    assert done.wait(5)
    time.sleep(0.05)
    assert ran == ["a", "c"]


def test_a_job_held_up_delays_no_other() -> None:
    """A renewal stuck on a locked registry must not hold up a registration due meanwhile."""
    release, second = threading.Event(), threading.Event()
    later.call(0.0, lambda: release.wait(5))
    later.call(0.02, second.set)
    try:
        assert second.wait(2)
    finally:
        release.set()


def test_cancelling_after_it_ran_keeps_nothing() -> None:
    done = threading.Event()
    cancel = later.call(0.0, done.set)
    assert done.wait(5)
    cancel()
    assert later._LATER._cancelled == set() or all(n in later._LATER._pending for n in later._LATER._cancelled)


def test_a_forked_child_gets_a_timer_of_its_own() -> None:
    later.ready()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the parent's timer thread is not here: a job must still come due
        try:
            fired = threading.Event()
            later.call(0.01, fired.set)
            os.write(write, b"1" if fired.wait(5) else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
