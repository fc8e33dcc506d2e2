"""The Processes port (core/ports/sandbox.py) held to the same checks in its fake
(tests/support/fakes.FakeHostProcesses) and on this host's /proc (adapters/processes.HostProcesses):
a pid names a process only together with its start time, and a workspace's sandboxes are found
by the folder they work in. The host's side starts real processes (bwrap around `sleep`)."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import FakeHostProcesses
from tests.support.waiting import wait_until
from warden.adapters.processes import HostProcesses, workspace_processes
from warden.adapters.sandbox.host import bwrap_path

# A sandbox as small as bwrap allows: the system read-only, its own pid namespace, `sleep`.
# No --die-with-parent: an orphan's shell exits at once, and bwrap armed with it would die too.
BWRAP = ["bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
         "--symlink", "usr/lib64", "/lib64", "--unshare-pid", "--", "/usr/bin/sleep", "300"]


class Host(HostProcesses):
    """The real adapter, with helpers that start real processes (and end them after the test)."""

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._folders: set[str] = set()

    def _start(self, argv: list[str], folder: str) -> int:
        proc = subprocess.Popen(argv, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self._children[proc.pid] = proc
        return proc.pid

    def _running(self, folder: str) -> None:
        """Wait until the sandbox in `folder` runs its command. One stopped while bwrap still
        sets it up outlives SIGTERM (the namespace's init ignores it) until the grace ends."""
        self._folders.add(folder)
        wait_until(lambda: any(_comm(pid) == "sleep" for pid in workspace_processes(folder)),
                   message=f"the sandbox in {folder} did not start")

    def finished(self) -> int:
        """The pid of a process that ran and was reaped."""
        proc = subprocess.Popen(["true"])
        proc.wait()
        return proc.pid

    def plain(self, folder: str) -> int:
        """A process that merely works in `folder` (a person's shell), no sandbox."""
        return self._start(["sleep", "300"], folder)

    def sandbox(self, folder: str) -> int:
        """bwrap started in `folder` by this (live) process, as the runner starts it."""
        pid = self._start(BWRAP, folder)
        self._running(folder)
        return pid

    def orphan(self, folder: str) -> int:
        """bwrap started in `folder` by a shell that exits at once, as a killed Warden leaves it."""
        shell = " ".join(BWRAP) + " >/dev/null 2>&1 </dev/null & echo $!"
        done = subprocess.run(["sh", "-c", shell], cwd=folder, capture_output=True, check=True)
        self._running(folder)
        return int(done.stdout)

    def reap(self, pid: int) -> None:
        """Collect `pid`'s exit status when this process is its parent (a killed child stays a
        zombie until then, as it would in a Warden that runs it)."""
        proc = self._children.pop(pid, None)
        if proc is not None:
            proc.wait(timeout=10)

    def close(self) -> None:
        for pid in {*self._children, *(pid for folder in self._folders for pid in workspace_processes(folder))}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for proc in self._children.values():
            proc.wait()


class Fake(FakeHostProcesses):
    _pids = itertools.count(4_200_000)  # beyond any pid_max: never a pid of this machine

    def finished(self) -> int:
        return next(self._pids)

    def plain(self, folder: str) -> int:
        pid = next(self._pids)
        self.running.add(pid)
        return pid

    def sandbox(self, folder: str) -> int:
        pid = self.plain(folder)
        self.sandboxes.setdefault(folder, set()).add(pid)
        return pid

    def orphan(self, folder: str) -> int:
        pid = self.plain(folder)
        self.orphans.setdefault(folder, set()).add(pid)
        return pid

    def reap(self, pid: int) -> None:
        return None

    def close(self) -> None:
        return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.fixture(params=["fake", "host"])
def processes(request: pytest.FixtureRequest) -> Iterator[Host | Fake]:
    if request.param == "fake":
        yield Fake()
        return
    host = Host()
    try:
        yield host
    finally:
        host.close()


@pytest.fixture
def sandboxes(processes: Host | Fake) -> Host | Fake:
    """`processes`, where bwrap can run."""
    if isinstance(processes, Host) and bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    return processes


def _folder(path: Path) -> str:
    path.mkdir(parents=True)
    return str(path)


def test_this_process_is_alive_and_named_by_its_start_time(processes: Host | Fake) -> None:
    me = os.getpid()
    started = processes.start_time(me)
    assert started is not None
    assert processes.alive(me) and processes.alive(me, started)
    assert not processes.alive(me, started + 1)  # the pid reused by another process


def test_a_finished_process_is_not_alive(processes: Host | Fake) -> None:
    pid = processes.finished()
    assert not processes.alive(pid)
    assert not processes.alive(pid, 12345)
    assert processes.start_time(pid) is None
    assert not processes.alive(0) and not processes.alive(-1)


def test_stopping_a_folder_ends_its_sandboxes_only(sandboxes: Host | Fake, tmp_path: Path) -> None:
    mine, other, empty = (_folder(tmp_path / name) for name in ("w1", "w2", "w3"))
    box = sandboxes.sandbox(mine)
    box_start = sandboxes.start_time(box)
    shell = sandboxes.plain(mine)  # a person's shell in the folder is not a sandbox: left alone
    neighbour = sandboxes.sandbox(other)
    neighbour_start = sandboxes.start_time(neighbour)
    assert sandboxes.alive(box, box_start)

    stopped = sandboxes.stop_processes(mine)
    # The commands it stopped (the host names the one in bwrap, not bwrap around it).
    assert stopped and shell not in stopped and neighbour not in stopped
    sandboxes.reap(box)
    assert not sandboxes.alive(box, box_start)
    assert sandboxes.alive(shell) and sandboxes.alive(neighbour, neighbour_start)
    assert sandboxes.stop_processes(empty) == []


def test_a_sandbox_whose_warden_died_is_an_orphan(sandboxes: Host | Fake, tmp_path: Path) -> None:
    root = tmp_path / "root"
    held = sandboxes.sandbox(_folder(root / "w1"))  # its Warden (this process) is alive
    orphan = sandboxes.orphan(_folder(root / "w2"))
    orphan_start = sandboxes.start_time(orphan)
    elsewhere = _folder(tmp_path / "elsewhere")

    found = wait_until(lambda: sandboxes.orphan_sandboxes([str(root)]), message="the orphan was not found")
    assert orphan in found and held not in found
    assert sandboxes.orphan_sandboxes([elsewhere]) == set()

    killed = sandboxes.kill_orphan_sandboxes([str(root)])
    assert orphan in killed and held not in killed
    wait_until(lambda: not sandboxes.alive(orphan, orphan_start), message="the orphan is still running")
    assert sandboxes.orphan_sandboxes([str(root)]) == set()


def test_a_sandbox_kept_on_purpose_is_no_orphan(sandboxes: Host | Fake, tmp_path: Path) -> None:
    """A live sandbox outlives the Warden that started it: named in `keep`, it is neither found
    nor killed (its tree neither)."""
    root = tmp_path / "root"
    live = sandboxes.orphan(_folder(root / "w1"))
    live_start = sandboxes.start_time(live)
    wait_until(lambda: live in sandboxes.orphan_sandboxes([str(root)]), message="the sandbox was not found")
    assert sandboxes.orphan_sandboxes([str(root)], keep={live}) == set()
    assert sandboxes.kill_orphan_sandboxes([str(root)], keep={live}) == []
    assert sandboxes.alive(live, live_start)


def test_a_forked_child_reads_its_own_start_time_not_its_parents() -> None:
    """The host keeps this process's own start time once read: a child forked after (another
    pid, started later) must get its own, read from /proc, and the parent's stays right."""
    from warden.adapters import processes as host

    mine = host.start_time(os.getpid())  # read once: kept from now on
    assert mine is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        try:
            child = host.start_time(os.getpid())
            truth = int(Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()[19])
            os.write(write_end, f"{child} {truth}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as handle:
        child, truth = handle.read().split()
    os.waitpid(pid, 0)
    assert child == truth
    assert host.start_time(os.getpid()) == mine
