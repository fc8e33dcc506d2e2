"""Per-run cgroups for the process count and memory of one sandboxed command.

RLIMIT_NPROC counts processes per user and does not bind uid 0, so it cannot stop a fork
bomb run by root; a cgroup's `pids.max` can. Each run gets its own child cgroup of the
controller's *current* cgroup (so limits set on Warden itself still apply above it), the
runner's child process moves itself in before it executes bwrap (writing "0" to the
pre-opened `cgroup.procs` moves the writer), and the cgroup is emptied and removed when the
run ends. cgroup v1 (separate memory and pids hierarchies) and v2 (unified, when the
controllers are delegated) are both handled; where neither is writable the runner falls
back to rlimits and says so.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

__all__ = ["Cgroup", "CgroupSupport", "HostCgroups", "create", "detect", "sweep", "sweep_orphans"]

_ROOT = "/sys/fs/cgroup"
# What a command's emptied cgroups may still have charged to them to serve the next one (renew).
_REUSE_MAX_CHARGED = 2 << 20
_counter = itertools.count()


@dataclass(frozen=True)
class CgroupSupport:
    """Where a run's cgroups can be made, per controller (None: not available here)."""

    memory: tuple[str, str] | None  # (version, base directory)
    pids: tuple[str, str] | None
    notes: tuple[str, ...] = ()

    @property
    def mode(self) -> str:
        parts = [f"{name}:{spec[0]}" for name, spec in (("memory", self.memory), ("pids", self.pids)) if spec]
        return ",".join(parts) or "none"


def _own_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
    except OSError:
        pass
    return paths


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _v2_base() -> tuple[str, set[str]] | None:
    for mount in (_ROOT, f"{_ROOT}/unified"):
        controllers_file = f"{mount}/cgroup.controllers"
        if os.path.exists(controllers_file):
            own = _own_paths().get("", "/")
            base = os.path.normpath(mount + own)
            try:
                with open(f"{base}/cgroup.subtree_control") as fh:
                    delegated = set(fh.read().split())
            except OSError:
                return None
            return base, delegated
    return None


@cache
def detect() -> CgroupSupport:
    """Which controllers this process may use for per-run cgroups."""
    own = _own_paths()
    notes: list[str] = []
    found: dict[str, tuple[str, str]] = {}
    for controller in ("memory", "pids"):
        mount = f"{_ROOT}/{controller}"
        if controller in own and os.path.exists(f"{mount}/cgroup.procs"):
            base = os.path.normpath(mount + own[controller])
            if _writable(base):
                found[controller] = ("v1", base)
            else:
                notes.append(f"cgroup v1 {controller} at {base} is not writable by this user")
    missing = {"memory", "pids"} - found.keys()
    if missing and (v2 := _v2_base()) is not None:
        base, delegated = v2
        for controller in sorted(missing):
            if controller in delegated and _writable(base):
                found[controller] = ("v2", base)
            else:
                notes.append(f"cgroup v2 {controller} is not delegated to {base}")
    return CgroupSupport(found.get("memory"), found.get("pids"), tuple(notes))


@dataclass
class Cgroup:
    """The cgroup directories of one run and the open `cgroup.procs` files to join them."""

    dirs: list[tuple[str, str]] = field(default_factory=list)  # (version, path)
    procs_fds: list[int] = field(default_factory=list)
    oom_seen: int = 0  # OOM kills counted in them before the current command (a reused one's)
    charged_before: int = 0  # memory still charged to them when the current command was given them
    # The limits last written to them (`create`, `renew`): a renewal writes only those that differ
    # (only Warden writes them: no sandbox has /sys).
    memory_limit: int | None = None
    pids_limit: int | None = None
    # Processes `kill` never kills besides this one: a live sandbox's supervisor, which enters a
    # command's cgroups for the moment it spawns it (killed with the command's leftovers as Warden
    # gave up on a spawn it was making, a Ctrl-C say, its whole sandbox went: a person's server).
    spare: tuple[int, ...] = ()

    def add(self, pid: int) -> None:
        """Move `pid` (the sandbox, still held before its command starts) into every cgroup."""
        for fd in self.procs_fds:
            os.write(fd, str(pid).encode())

    def join_files(self) -> list[int]:
        """Open `tasks` files of these cgroups for a process to join them by itself (writing "0"),
        or [] when that would not pay: only a v1 hierarchy moves a single thread that joins by
        itself without the kernel's global threadgroup lock, whose RCU grace period makes
        `add` of another process take ~10 ms when no move happened lately (v2 has no such
        file). The caller closes them."""
        if not self.dirs or any(version != "v1" for version, _ in self.dirs):
            return []
        fds: list[int] = []
        try:
            for _, path in self.dirs:
                fds.append(os.open(f"{path}/tasks", os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            return []
        return fds

    @contextlib.contextmanager
    def entered(self) -> Iterator[bool]:
        """The calling thread inside these cgroups while the block runs, and back in its own
        after: a process it starts meanwhile (bwrap) is born in them, where moving it after its
        start (`add`) takes the kernel's global threadgroup lock, whose RCU grace period held
        bwrap ~1.5 ms a run as it built the sandbox. True when entered: v1 alone (a thread joins by
        itself through `tasks`), and only where the thread's own cgroups' files could be opened
        first, so that it can always come back (left in, it would count in the command's limits
        and be named by its cgroup.procs). False: nothing was changed."""
        join = self.join_files()
        back = _thread_join_files(self.dirs) if join else []
        entered: list[int] = []
        try:
            if join and len(back) == len(join):
                try:
                    for fd in join:
                        os.write(fd, b"0")  # "0": this thread, without the global lock
                        entered.append(fd)
                except OSError:
                    _go_back(back[:len(entered)])
                    entered.clear()
            yield bool(entered)
        finally:
            try:
                if entered:
                    _go_back(back)
            finally:
                for fd in (*join, *back):
                    os.close(fd)

    def holds(self, pid: int) -> bool:
        """Whether `pid` is in every one of these cgroups, each in its own hierarchy (by
        /proc/PID/cgroup, as this process's cgroup namespace names them): a run's memory and pids
        folders share one name, and a process in one alone is not held."""
        try:
            places = _places(f"/proc/{pid}/cgroup")
        except OSError:
            return False
        return all(places.get(_hierarchy(version, path), "").endswith("/" + os.path.basename(path))
                   for version, path in self.dirs)

    def wait_empty(self, timeout: float = 2.0) -> bool:
        """Wait until no process is left in the cgroups (cgroup.kill only starts the killing);
        False if some still are after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while any(_read_pids(path) for _, path in self.dirs):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def kill(self) -> bool:
        """SIGKILL everything still in the cgroups (a timeout, or leftovers after exit); True when
        they were seen empty after it (else `wait_empty` tells: v2's cgroup.kill only starts it)."""
        empty = True
        for version, path in self.dirs:
            if version == "v2" and os.path.exists(f"{path}/cgroup.kill"):
                with contextlib.suppress(OSError):
                    _write(f"{path}/cgroup.kill", "1")
                empty = False
                continue
            for _ in range(50):
                # Never this process: a thread of it is in them while it starts a run (`entered`).
                pids = [pid for pid in _read_pids(path) if pid != os.getpid() and pid not in self.spare]
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.002)
            else:
                empty = False
        return empty

    def oom_killed(self) -> bool:
        """True when the memory limit made the kernel kill a process of this run."""
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        """How many processes the memory limit made the kernel kill in these cgroups so far."""
        for version, path in self.dirs:
            name = "memory.oom_control" if version == "v1" else "memory.events"
            with contextlib.suppress(OSError, ValueError):
                for line in _read(f"{path}/{name}").splitlines():
                    key, _, value = line.partition(b" ")
                    if key == b"oom_kill":
                        return int(value or 0)
        return 0

    def reusable(self) -> bool:
        """Whether these emptied cgroups can serve another command (`renew`): v1 only, where a
        command's peak can be started afresh (v2's memory.peak resets per open file), with
        little memory still charged to them (after `true`, ~0.6 MiB: kernel objects and pages
        its processes touched first). More, such as the page cache of files a command wrote,
        would count against the next command's limit until reclaimed: removing the folders
        hands it to the parent at once, where reclaiming it here (memory.force_empty) takes
        ~1 ms even when there is next to nothing, ~27 ms for 50 MiB."""
        if not self.dirs or any(version != "v1" for version, _ in self.dirs):
            return False
        for _, path in self.dirs:
            try:
                if int(_read(f"{path}/memory.usage_in_bytes", 64)) > _REUSE_MAX_CHARGED:
                    return False
            except FileNotFoundError:
                continue  # the pids hierarchy's
            except (OSError, ValueError):
                return False
        return True

    def renew(self, *, memory: int, pids: int) -> bool:
        """Ready these emptied v1 cgroups for another command: its limits `memory` and `pids`
        set, its memory peak started afresh from what is still charged to them (`reusable`:
        little), which `memory_peak` leaves out. False when that cannot be done (a folder gone,
        a process in them): new ones are made instead."""
        if not self.dirs or any(version != "v1" for version, _ in self.dirs):
            return False
        try:
            for _, path in self.dirs:
                # Emptied when kept: nothing may have come in since. Read strictly: a folder gone
                # (another process's stop, the orphan sweep) fails here, as no limit is written.
                if _read(f"{path}/cgroup.procs", 64).strip():
                    return False
                try:
                    self.charged_before = int(_read(f"{path}/memory.usage_in_bytes", 64))
                except FileNotFoundError:
                    if pids != self.pids_limit:  # the pids hierarchy's
                        _write(f"{path}/pids.max", str(pids))
                    continue
                if memory != self.memory_limit:
                    current = int(_read(f"{path}/memory.limit_in_bytes", 64))
                    # memsw (memory and swap) may never be below the memory limit: raised first
                    # when raising, lowered last when lowering. Absent without swap accounting.
                    if memory > current:
                        _write_memsw(path, memory)
                    _write(f"{path}/memory.limit_in_bytes", str(memory))
                    if memory < current:
                        _write_memsw(path, memory)
                if pids != self.pids_limit:
                    with contextlib.suppress(FileNotFoundError):  # where one hierarchy holds both controllers
                        _write(f"{path}/pids.max", str(pids))
                _write(f"{path}/memory.max_usage_in_bytes", "0")
        except (OSError, ValueError):
            self.memory_limit = self.pids_limit = None  # as they are now is not known: all written next time
            return False
        self.memory_limit, self.pids_limit = memory, pids
        return True

    def memory_peak(self) -> int | None:
        """The most memory the run's processes held together, in bytes (v1's max_usage_in_bytes,
        v2's memory.peak where the kernel has it), less what earlier commands had left charged
        to reused cgroups (`renew`); None where no memory cgroup says."""
        for version, path in self.dirs:
            name = "memory.max_usage_in_bytes" if version == "v1" else "memory.peak"
            with contextlib.suppress(OSError, ValueError):
                return max(int(_read(f"{path}/{name}", 64)) - self.charged_before, 0)
        return None

    def cpu_seconds(self) -> float | None:
        """The CPU time the run's processes used, from cgroup v2's cpu.stat (present in every v2
        cgroup); None under v1, whose memory and pids hierarchies do not count it."""
        for version, path in self.dirs:
            if version != "v2":
                continue
            with contextlib.suppress(OSError, ValueError), open(f"{path}/cpu.stat") as fh:
                for line in fh.read(4096).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
        return None

    def close(self) -> None:
        """Kill what is left, close the files and remove the directories.

        A cgroup can stay busy for a moment after its last process was reaped; rather than
        make every run wait for that, a busy directory is swept by the next run (or at exit).
        """
        for fd in self.procs_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.procs_fds.clear()
        for version, path in self.dirs:
            if not _gone(path):
                Cgroup([(version, path)]).kill()
                _remember(path)
        self.dirs.clear()


# Busy run cgroups left to remove later. The API server runs many commands at once in threads:
# every touch of the list holds the lock (two sweeps once removed one path twice: ValueError).
_stale: list[str] = []
_stale_lock = threading.Lock()
_NAME = re.compile(r"warden-(\d+)-(\d+)-\d+")
_orphans_swept = False


def _remember(path: str) -> None:
    with _stale_lock:
        _stale.append(path)


def _gone(path: str) -> bool:
    """Remove an emptied run cgroup; False while the kernel still counts it busy."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def sweep() -> None:
    """Remove the run cgroups that were still busy when their run ended."""
    with _stale_lock:
        _stale[:] = [path for path in _stale if not _gone(path)]


def sweep_orphans(support: CgroupSupport) -> list[str]:
    """Remove the run cgroups of Warden processes that are gone (killed mid-run: nothing of
    theirs swept them); returns what was removed. A run cgroup's name carries its maker's pid
    and start time, so a reused pid is not mistaken for its maker."""
    from warden.adapters.processes import alive

    removed: list[str] = []
    bases = {spec for spec in (support.memory, support.pids) if spec is not None}
    for version, base in bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            match = _NAME.fullmatch(name)
            if match is None or alive(int(match[1]), int(match[2])):
                continue
            path = f"{base}/{name}"
            if not _gone(path):
                # Still busy: what the dead run left is killed, and the kernel needs a moment to
                # release the group once its last process is reaped.
                Cgroup([(version, path)]).kill()
                for _ in range(40):
                    if _gone(path):
                        break
                    time.sleep(0.025)
            if not os.path.exists(path):
                removed.append(path)
        removed.extend(_sweep_dead_live(version, base, names))
    return removed


# A live sandbox's cgroup (`warden-live-<id>`) and its commands' (`warden-live-<id>-<process>`),
# named by the live adapter; they outlive the process that made them, as the sandbox does.
_LIVE = re.compile(r"warden-live-([0-9a-f]{16})(?:-([0-9a-f]{16}))?")
# A cgroup is empty from its mkdir to its first process: younger than this, it may be new.
_LIVE_GRACE_S = 60.0


def _sweep_dead_live(version: str, base: str, names: list[str]) -> list[str]:
    """Remove the cgroups of live sandboxes that are gone: a live sandbox's own cgroup holds
    its init while it lives, so an old empty one is a dead sandbox's (killed, or its home
    deleted with nothing to stop it), and its commands' cgroups go with it, as do those whose
    sandbox's cgroup was removed without them."""
    now = time.time()

    def old(path: str) -> bool:
        try:
            return now - os.stat(path).st_mtime > _LIVE_GRACE_S
        except OSError:
            return False

    found = [(name, match) for name in names if (match := _LIVE.fullmatch(name)) is not None]
    sandboxes = {match[1] for _, match in found if match[2] is None}
    dead = {sid for sid in sandboxes
            if not _read_pids(f"{base}/warden-live-{sid}") and old(f"{base}/warden-live-{sid}")}
    removed = []
    # The commands' cgroups first: a sandbox's own is then removed after them.
    for name, match in sorted(found, key=lambda item: item[1][2] is None):
        path = f"{base}/{name}"
        sid = match[1]
        if sid in dead or (match[2] is not None and sid not in sandboxes and old(path)):
            Cgroup([(version, path)]).kill()
            if _gone(path):
                removed.append(path)
    return removed


def _sweep_at_exit() -> None:
    for _ in range(100):
        sweep()
        with _stale_lock:
            if not _stale:
                return
        time.sleep(0.01)


atexit.register(_sweep_at_exit)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _write_memsw(path: str, memory: int) -> None:
    """The memory-and-swap limit of v1 memory cgroup `path`, where swap is accounted."""
    with contextlib.suppress(FileNotFoundError):
        _write(f"{path}/memory.memsw.limit_in_bytes", str(memory))


def _places(listing: str) -> dict[str, str]:
    """A /proc/…/cgroup file as {hierarchy: cgroup}: a v1 hierarchy by its controllers as the
    file names them ("memory", "cpu,cpuacct"), v2's as ""."""
    with open(listing) as fh:
        lines = fh.read(1 << 16).splitlines()
    return dict(line.split(":", 2)[1:] for line in lines if line.count(":") >= 2)


def _hierarchy(version: str, path: str) -> str:
    """The hierarchy cgroup folder `path` lies in, as `_places` names it."""
    return "" if version == "v2" else os.path.relpath(path, _ROOT).split("/", 1)[0]


def _thread_join_files(dirs: list[tuple[str, str]]) -> list[int]:
    """Open `tasks` files of the calling thread's own v1 cgroups in the hierarchies of `dirs`
    (in their order), for it to come back to; [] when one cannot be (the caller then does not
    leave them)."""
    try:
        places = _places("/proc/thread-self/cgroup")
    except OSError:
        return []
    fds: list[int] = []
    try:
        for version, path in dirs:
            hierarchy = _hierarchy(version, path)
            place = places.get(hierarchy)
            if version != "v1" or place is None:
                raise OSError(f"no own cgroup of this thread in {hierarchy}")
            fds.append(os.open(os.path.normpath(f"{_ROOT}/{hierarchy}/{place}") + "/tasks",
                               os.O_WRONLY | os.O_CLOEXEC))
    except OSError:
        for fd in fds:
            os.close(fd)
        return []
    return fds


def _go_back(fds: list[int]) -> None:
    """The calling thread back in the cgroups whose `tasks` files `fds` are, in all of them even
    when a stop is raised meanwhile (Ctrl-C's KeyboardInterrupt in a program that runs commands
    through the API, which nothing holds back), then that stop. Raised between two writes, it
    left the thread in a run's pids cgroup: its later processes were born there under that run's
    limit, and the run's folder could not be removed while the thread lived."""
    done = 0
    try:
        for fd in fds:  # the loop inside the `try`: a stop raised as it goes round is caught too
            os.write(fd, b"0")
            done += 1
    except OSError:
        raise  # a write refused is the caller's to see, not retried
    except BaseException:
        # Again from the one it was at (writing "0" where the thread already is changes nothing).
        _go_back(fds[done:])
        raise


def _read(path: str, size: int = 4096) -> bytes:
    """Up to `size` bytes of cgroup file `path` in one read (a cgroup file gives what it holds at
    once): a run reads several of them, and a Python file object costs several times the read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def _read_pids(path: str) -> list[int]:
    """The processes in cgroup `path` ([] where it is gone)."""
    try:
        fd = os.open(f"{path}/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        chunks = []
        while chunk := os.read(fd, 65536):  # a long list comes in several reads
            chunks.append(chunk)
    except OSError:
        return []
    finally:
        os.close(fd)
    return [int(x) for x in b"".join(chunks).split()]


def sweep_orphans_once(support: CgroupSupport) -> None:
    """`sweep_orphans`, the first time this process asks (its first run, or the home daemon's
    spare child before its request arrives): what killed runs of earlier processes left."""
    global _orphans_swept
    if not _orphans_swept:
        _orphans_swept = True
        sweep_orphans(support)


def create(support: CgroupSupport, *, memory: int, pids: int, name: str | None = None) -> Cgroup:
    """Make this run's cgroups with their limits; OSError when the kernel refuses. `name`: a
    name of the caller's (a live sandbox's `warden-live-…`, which outlives this process and is
    not swept as an orphan of it) instead of one carrying this process's pid."""
    if _stale:
        sweep()
    sweep_orphans_once(support)
    group = Cgroup()
    if name is None:
        # processes.start_time keeps this process's own by pid: a child forked after (the
        # home daemon's) names its groups with its own, never its parent's.
        from warden.adapters.processes import start_time

        name = f"warden-{os.getpid()}-{start_time(os.getpid()) or 0}-{next(_counter)}"
    made: dict[str, str] = {}
    try:
        for controller, spec in (("memory", support.memory), ("pids", support.pids)):
            if spec is None:
                continue
            version, base = spec
            path = made.get(base) or f"{base}/{name}"
            if path not in made.values():
                os.mkdir(path, 0o755)
                made[base] = path
                group.dirs.append((version, path))
            if controller == "memory":
                group.memory_limit = memory
                if version == "v1":
                    _write(f"{path}/memory.limit_in_bytes", str(memory))
                    # Swap counts too where swap accounting exists, so the limit is real.
                    with contextlib.suppress(OSError):
                        _write(f"{path}/memory.memsw.limit_in_bytes", str(memory))
                else:
                    _write(f"{path}/memory.max", str(memory))
                    with contextlib.suppress(OSError):
                        _write(f"{path}/memory.swap.max", "0")
            else:
                _write(f"{path}/pids.max", str(pids))
                group.pids_limit = pids
        for _, path in group.dirs:
            group.procs_fds.append(os.open(f"{path}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
    except BaseException:
        group.close()
        raise
    return group


class HostCgroups:
    """The run cgroups of this host (core.ports.RunCgroups)."""

    def sweep_orphans(self) -> list[str]:
        return sweep_orphans(detect())
