"""Processes on this host: liveness of a recorded pid, and stopping a workspace's processes.

A workspace's processes are found from /proc: every `bwrap` whose working folder is the
workspace (the runner starts it there), with all its descendants. Every bot command runs
under bwrap, so that is all of them; a person's own shell that merely sits in the workspace
folder is left alone. Killing bwrap's process tree
ends the sandbox's pid namespace as a whole.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Collection, Iterable

__all__ = [
    "HostProcesses",
    "alive",
    "cpu_time",
    "halted",
    "kill_orphan_sandboxes",
    "orphan_sandboxes",
    "start_time",
    "stop_processes",
    "workspace_processes",
]


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after comm (field 3, the state, first); None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    return data[data.rfind(b")") + 2:].split()


# This process's pid and start time once read: every run asks for its own (its lease holder,
# its in-progress row), and a read of /proc/self/stat costs ~0.15 ms on a small VM. Keyed by
# the pid, so a forked child (another pid) reads its own.
_own_start: tuple[int, int] = (0, 0)


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot): a pid plus this names one process."""
    global _own_start
    own = os.getpid()
    if pid == own == _own_start[0]:
        return _own_start[1]
    fields = _stat_fields(pid)
    try:
        started = int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None
    if pid == own and started is not None:
        _own_start = (own, started)
    return started


def halted(pid: int, started: int) -> str | None:
    """"stopped" when `pid`, still the process that started at `started`, is stopped (SIGSTOP,
    SIGTSTP: SIGCONT lets it go on), "traced" when a tracer holds it, else None."""
    fields = _stat_fields(pid)
    try:
        if fields is None or int(fields[19]) != started:
            return None
    except (IndexError, ValueError):
        return None
    return {b"T": "stopped", b"t": "traced"}.get(fields[0])


def cpu_time(pid: int, started: int) -> float | None:
    """The CPU seconds (user and system) `pid` and the children it reaped used so far, if it is
    still the process that started at `started`; None otherwise. One read of /proc/PID/stat."""
    fields = _stat_fields(pid)
    try:
        if fields is None or int(fields[19]) != started or fields[0] == b"Z":
            return None
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    except (IndexError, ValueError):
        return None
    return ticks / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# Processes asked about by pid and start time, each by a pidfd opened once it was found to be
# that process: a pidfd names one process for good (no pid reuse), and polling it costs ~2 us
# where a read of /proc/PID/stat costs ~0.03 ms idle and ~0.13 ms beside a run's other threads
# (every run asks after its live sandbox's init and supervisor). Bounded; the oldest is closed.
_PIDFDS: dict[tuple[int, int], int] = {}
_PIDFDS_MAX = 64
_pidfds_lock = threading.Lock()


def _forget_pidfds() -> None:
    """In a forked child: its copies of the descriptors are closed, the child asks afresh."""
    global _pidfds_lock
    for fd in _PIDFDS.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _PIDFDS.clear()
    _pidfds_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pidfds)


def _exited(fd: int) -> bool | None:
    """Whether the process of pidfd `fd` has ended (a zombie has); None when `fd` is no pidfd now."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    events = poller.poll(0)
    if events and events[0][1] & select.POLLNVAL:
        return None
    return bool(events)


def alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` runs (and is the same process, when its start time is given)."""
    if pid <= 0:
        return False
    if started is not None:
        with _pidfds_lock:
            fd = _PIDFDS.get((pid, started))
            if fd is not None:
                gone = _exited(fd)
                if gone is False:
                    return True
                del _PIDFDS[(pid, started)]
                if gone is not None:
                    os.close(fd)
                    return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started is None:
        return True
    fd = None
    with contextlib.suppress(OSError, AttributeError):
        fd = os.pidfd_open(pid)  # before the check below: then it names the process checked, or a dead one
    fields = _stat_fields(pid)
    try:
        same = fields is not None and int(fields[19]) == started and fields[0] != b"Z"
    except (IndexError, ValueError):
        same = False
    if fd is not None:
        if same and _exited(fd) is False:
            _keep_pidfd(pid, started, fd)
        else:
            os.close(fd)
    return same


def _keep_pidfd(pid: int, started: int, fd: int) -> None:
    with _pidfds_lock:
        old = _PIDFDS.pop((pid, started), None)
        _PIDFDS[(pid, started)] = fd
        if old is not None:
            os.close(old)
        while len(_PIDFDS) > _PIDFDS_MAX:
            os.close(_PIDFDS.pop(next(iter(_PIDFDS))))


def _state(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[0].decode() if fields else "?"


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parents() -> dict[int, int]:
    parents = {}
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                data = handle.read()
            parents[pid] = int(data[data.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return parents


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def workspace_processes(root: str) -> set[int]:
    """Pids that belong to the workspace at `root` (never this process or its parents)."""
    own = {os.getpid(), os.getppid()}
    roots: set[int] = set()
    for pid in _pids():
        if pid in own:
            continue
        argv = _cmdline(pid)
        if not argv or not _is_bwrap(argv):
            continue
        # Warden starts bwrap in the workspace folder (its options, which name the folder, are
        # off the command line); a bwrap that names it in its argv is matched too.
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if _inside(cwd, root) or any(_inside(arg.decode(errors="replace"), root) for arg in argv[1:]):
            roots.add(pid)
    if not roots:
        return set()
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found or pid in own:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def _cmdline(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return None


def _is_bwrap(argv: list[bytes]) -> bool:
    return os.path.basename(argv[0]) == b"bwrap"


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().decode(errors="replace").strip()
    except OSError:
        return ""


def orphan_sandboxes(roots: Iterable[str], keep: Collection[int] = ()) -> set[int]:
    """Sandboxes whose Warden died before it could let them go or kill them, with their trees.

    bwrap's --die-with-parent arms itself only once bwrap runs: a Warden killed right after
    starting it leaves a bwrap that carries on (without the run's limits, which Warden applies
    after start-up), reparented to init or a session's subreaper. Found as a bwrap whose parent
    is such, working in a folder under `roots` (Warden's home, the workspaces root). Live sandboxes
    run without --die-with-parent on purpose and are found so too: `keep` names their bwraps.
    """
    own = {os.getpid(), os.getppid()}
    parents = _parents()
    found: set[int] = set()
    for pid, parent in parents.items():
        if pid in own or pid in keep or _comm(pid) != "bwrap" or not (parent == 1 or _comm(parent) == "systemd"):
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if any(_inside(cwd, root) for root in roots):
            found.add(pid)
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    todo = list(found)
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_orphan_sandboxes(roots: Iterable[str], keep: Collection[int] = ()) -> list[int]:
    """SIGKILL what `orphan_sandboxes` finds; the pids killed."""
    pids = orphan_sandboxes(roots, keep)
    _signal_all(pids, signal.SIGKILL)
    return sorted(pids)


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_processes(root: str, *, grace: float = 2.0) -> list[int]:
    """SIGTERM the workspace's processes, then SIGKILL what is left after `grace` seconds."""
    pids = workspace_processes(root)
    if not pids:
        return []
    commands = _commands(pids)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p) and _state(p) != "Z"}
        if not left:
            break
        time.sleep(0.05)
    # Kill anything still there, and anything the group forked meanwhile.
    for _ in range(3):
        left = {p for p in workspace_processes(root) | pids if alive(p) and _state(p) != "Z"}
        if not left:
            break
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
    return sorted(commands)


def _commands(pids: Iterable[int]) -> set[int]:
    """`pids` without Warden's own machinery around the commands (bwrap and its pid 1, a live
    sandbox's supervisor): what a person counts as "the processes" of a workspace."""
    from warden.core.live import SUPERVISOR_PATH

    supervisor = os.fsencode(SUPERVISOR_PATH)
    found = set()
    for pid in pids:
        argv = _cmdline(pid)
        if argv and not _is_bwrap(argv) and supervisor not in argv[:4]:
            found.add(pid)
    return found


class HostProcesses:
    """This machine's processes through /proc (core.ports.Processes)."""

    def alive(self, pid: int, started: int | None = None) -> bool:
        return alive(pid, started)

    def start_time(self, pid: int) -> int | None:
        return start_time(pid)

    def stop_processes(self, root: str, *, grace: float = 2.0) -> list[int]:
        return stop_processes(root, grace=grace)

    def orphan_sandboxes(self, roots: Iterable[str], keep: Collection[int] = ()) -> set[int]:
        return orphan_sandboxes(roots, keep)

    def kill_orphan_sandboxes(self, roots: Iterable[str], keep: Collection[int] = ()) -> list[int]:
        return kill_orphan_sandboxes(roots, keep)
