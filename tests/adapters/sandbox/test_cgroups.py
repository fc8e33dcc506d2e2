"""Per-run cgroups: thread-safe bookkeeping, and cgroups of killed runs swept by liveness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from warden.adapters.processes import start_time
from warden.adapters.sandbox import cgroups


def test_concurrent_sweeps_never_trip_over_each_other(tmp_path: Path) -> None:
    """The API server ends runs in many threads at once: each may sweep the busy cgroups."""
    paths = [str(tmp_path / f"gone-{i}") for i in range(20000)]  # already removed: each sweep drops them
    errors: list[BaseException] = []
    for _ in range(3):
        with cgroups._stale_lock:
            cgroups._stale[:] = paths

        def sweep() -> None:
            try:
                cgroups.sweep()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=sweep) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and cgroups._stale == []


@pytest.mark.alone  # another process's sweep (doctor --fix, serve's start-up) would take the stale cgroup first
def test_cgroups_of_dead_runs_are_swept_and_live_ones_kept() -> None:
    support = cgroups.detect()
    if support.pids is None:
        pytest.skip("no writable pids cgroup here")
    base = support.pids[1]
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(base, f"warden-{dead.pid}-{12345}-0")
    mine = Path(base, f"warden-{os.getpid()}-{start_time(os.getpid())}-999")
    for path in (stale, mine):
        path.mkdir()
    try:
        removed = cgroups.sweep_orphans(support)
        assert str(stale) in removed and not stale.exists()
        assert mine.exists()
    finally:
        for path in (stale, mine):
            if path.exists():
                path.rmdir()


def test_cgroups_of_dead_live_sandboxes_are_swept_and_living_ones_kept(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A live sandbox killed without its stop (or whose home was deleted) once left its cgroups
    behind for good: 96 of them after a day of tests."""
    import secrets
    import shutil
    import signal

    from warden.adapters.sandbox.live import HostLiveSandboxes
    from warden.core.limits import Limits
    from warden.core.runs import SandboxRequest

    support = cgroups.detect()
    if support.pids is None or shutil.which("bwrap") is None:
        pytest.skip("no writable pids cgroup or no bubblewrap here")
    (tmp_path / "ws").mkdir()
    host = HostLiveSandboxes(tmp_path / "run", {})
    request = SandboxRequest(str(tmp_path / "ws"), ("true",), Limits(timeout_s=60))
    living_id, dead_id, new_id = (secrets.token_hex(8) for _ in range(3))
    living = host.start(f"sbx_{living_id}", request, idle_s=60)
    dead = host.start(f"sbx_{dead_id}", request, idle_s=60)
    base = support.pids[1]
    made = [Path(base, f"warden-live-{living_id}-{'a' * 16}"),  # an uncollected command of a living one
            Path(base, f"warden-live-{dead_id}-{'b' * 16}"),  # the dead one's command
            Path(base, f"warden-live-{new_id}")]  # a sandbox being made: empty until its init joins
    for path in made:
        path.mkdir()
    try:
        os.kill(int(dead.meta["init_pid"]), signal.SIGKILL)  # type: ignore[call-overload]
        dead_dirs = [path for _, path in dead.meta["cgroups"]]  # type: ignore[union-attr]
        assert not cgroups.sweep_orphans(support) or all(Path(p).exists() for p in dead_dirs)  # young: kept
        monkeypatch.setattr(cgroups, "_LIVE_GRACE_S", -1.0)
        for _ in range(100):  # the kernel empties the killed sandbox's cgroup once its init is reaped
            if not any(cgroups._read_pids(p) for p in dead_dirs):
                break
            time.sleep(0.02)
        removed = cgroups.sweep_orphans(support)
        assert set(dead_dirs) | {str(made[1])} <= set(removed)
        assert not any(Path(p).exists() for p in dead_dirs) and not made[1].exists()
        # The living sandbox keeps its cgroups, its uncollected command's included.
        assert all(Path(p).exists() for _, p in living.meta["cgroups"])  # type: ignore[union-attr]
        assert made[0].exists()
    finally:
        for path in made:
            if path.exists():
                path.rmdir()
        from warden.core.live import LiveSandbox

        row = LiveSandbox(f"sbx_{living_id}", "w", "ws_w", "user", "none", "fp", 0, "node", living.pid,
                          living.pid_start, living.supervisor_pid, living.supervisor_start, living.socket, "t", "t",
                          living.meta)
        host.stop(row)


def _v1_group() -> cgroups.Cgroup:
    support = cgroups.detect()
    specs = [spec for spec in (support.memory, support.pids) if spec is not None]
    if not specs or any(version != "v1" for version, _ in specs):
        pytest.skip("no cgroup v1 hierarchy this process may use (only there does a thread enter one by itself)")
    return cgroups.create(support, memory=256 << 20, pids=64)


def _thread_cgroups() -> str:
    return Path("/proc/thread-self/cgroup").read_text()


def test_a_thread_that_enters_a_runs_cgroups_starts_its_process_in_them_and_comes_back() -> None:
    """bwrap is started from inside its run's cgroups, not moved there after (a move takes the
    kernel's global lock and held bwrap ~1.5 ms): the starting thread comes back to its own."""
    group = _v1_group()
    own = _thread_cgroups()
    proc = None
    try:
        with group.entered() as entered:
            assert entered
            inside = _thread_cgroups()
            proc = subprocess.Popen(["sleep", "30"])
        assert _thread_cgroups() == own != inside
        assert group.holds(proc.pid)
        assert not group.holds(threading.get_native_id())  # this thread, back
        assert group.kill() or group.wait_empty()
        assert proc.wait(10) == -9
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        group.close()


def test_a_kill_of_a_runs_cgroups_spares_the_process_whose_thread_is_in_them() -> None:
    """While its thread starts the run, this process is named by the run's cgroup.procs: a kill
    then (a stop, a timeout) must end the run's processes and never Warden itself."""
    group = _v1_group()
    try:
        with group.entered() as entered:
            assert entered
            assert all(os.getpid() in cgroups._read_pids(path) for _, path in group.dirs)
            assert group.kill()  # still here to tell
    finally:
        group.close()


def test_a_thread_that_could_not_come_back_does_not_enter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own cgroups' files are opened before it leaves them; where they cannot be, it stays."""
    group = _v1_group()
    own = _thread_cgroups()
    monkeypatch.setattr(cgroups, "_thread_join_files", lambda dirs: [])
    try:
        before = len(os.listdir("/proc/self/fd"))
        with group.entered() as entered:
            assert not entered and _thread_cgroups() == own
        assert len(os.listdir("/proc/self/fd")) == before  # the run's `tasks` files closed again
    finally:
        group.close()


def test_a_ctrl_c_as_the_thread_comes_back_leaves_it_in_none_of_the_runs_cgroups() -> None:
    """Ctrl-C in a program that runs commands through the API (Python's own handler: nothing
    holds it back) lands between the writes that bring the thread back from a run's memory and
    pids cgroups: left in one, the thread's later processes were born there under that run's
    limits, and the run's folder could never be removed. It comes back, then the stop is raised."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers on the main thread only")
    group = _v1_group()
    if len(group.dirs) < 2:
        group.close()
        pytest.skip("one hierarchy: no write between two to land in")
    own = _thread_cgroups()
    back_written: list[int] = []

    def ctrl_c_after_first_write_back(frame: object, event: str, arg: object) -> None:
        # A real SIGINT at the moment the first write back returns: its KeyboardInterrupt is
        # raised at the next instruction that checks for one, before the second write.
        if event == "c_return" and arg is os.write and getattr(frame, "f_code", None) is cgroups._go_back.__code__:
            back_written.append(1)
            if len(back_written) == 1:
                os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), group.entered() as entered:
            assert entered
            sys.setprofile(ctrl_c_after_first_write_back)
        sys.setprofile(None)
        assert back_written
        assert _thread_cgroups() == own
    finally:
        sys.setprofile(None)
        signal.signal(signal.SIGINT, previous)
        group.close()


def test_a_process_in_one_of_a_runs_cgroups_alone_is_not_held_by_them() -> None:
    """A run's memory and pids folders share one name: a process in the memory one alone (moved
    there, not into the pids one) is not held by the run's cgroups, so Warden moves it into both."""
    group = _v1_group()
    if len(group.dirs) < 2:
        group.close()
        pytest.skip("memory and pids are not two hierarchies here")
    proc = subprocess.Popen(["sleep", "30"])
    try:
        cgroups._write(f"{group.dirs[0][1]}/cgroup.procs", str(proc.pid))  # into the first alone
        assert cgroups.Cgroup([group.dirs[0]]).holds(proc.pid)
        assert not group.holds(proc.pid)
        group.add(proc.pid)
        assert group.holds(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        group.close()
