"""Live sandboxes on this host (core.ports.LiveSandboxes): a bwrap sandbox that outlives the
Warden process starting it, with our supervisor (supervisor.py) inside, and the client side of
the supervisor's protocol.

Starting one: Warden binds a listening Unix socket in `$WARDEN_HOME/run/<id>/` (folder 0700,
socket 0600) and hands its descriptor to bwrap, which passes it to the supervisor; the path is
never mounted in the sandbox. bwrap runs without --die-with-parent, in a session of its own and
in the workspace folder (so `Processes.stop_processes` finds it like any sandbox of the
workspace), under the sandbox's cgroup `warden-live-<id>` (a name the orphan sweep of run
cgroups leaves alone). The sandbox's mounts, seccomp filter and synthesized /etc files are the
fresh sandbox's (runner.py's helpers build them).

Running a command in it: Warden gives the supervisor the command, its rlimits and the `tasks`
files of a cgroup of its own (v1); the command starts with them in place, by Warden's static
launcher (rlimit_exec.c, which scripts/setup builds into the venv where it finds a C compiler)
or else a copy of util-linux's `prlimit`, either readable by no one (/etc/warden/rlimit-exec,
/etc/warden/prlimit: so not dumpable while it sets them), or by a forked child of the
supervisor (supervisor.py). Where Warden must move it (v2), or the
child could not join, the child is held
before exec: Warden finds it among the supervisor's children by its pid in the sandbox's pid
namespace (NSpid), applies the rlimits, moves it, and only then says `go` — the handshake
bwrap's --block-fd gives a fresh sandbox. A foreground command's output
comes through pipes Warden passed (SCM_RIGHTS), read here as the fresh runner reads bwrap's.

Everything the supervisor says is bounded and parsed by core/live.py before use; a socket that
does not answer in time, or answers badly, is `Unavailable` (rule `live.unreachable` or
`live.bad_answer`), and the service stops that sandbox.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import resource
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from warden.adapters.atomic import naming
from warden.adapters.processes import alive, cpu_time, halted, start_time
from warden.adapters.sandbox import cgroups, held_mounts
from warden.adapters.sandbox.execlimits import too_long_for_exec
from warden.adapters.sandbox.host import build_spec, bwrap_path, check_env, python3_path
from warden.adapters.sandbox.runner import (
    _MAX_CAPTURE,
    MISSING_BWRAP,
    _Control,
    _forwarder_source,
    _Held,
    _memfd_with,
    _Output,
    _read_info,
    _rlimits,
    _setup_failed,
    _with_data_files,
    _with_pinned_sources,
    _with_seccomp,
    check_process_limit,
)
from warden.core import stops
from warden.core.bwrap_argv import PROXY_SOCKET, SandboxSpec, bwrap_environ, bwrap_options, sandbox_path
from warden.core.errors import Unavailable
from warden.core.live import (
    FRAME_HEADER,
    RING_BYTES,
    SANDBOX_ID,
    SUPERVISOR_PATH,
    BadAnswer,
    Chunk,
    Exited,
    Full,
    HungUpFirst,
    LiveProcess,
    LiveSandbox,
    Logs,
    StartedSandbox,
    Supervised,
    check_process_id,
    decode_frame_length,
    encode_frame,
    parse_chunk_event,
    parse_connected,
    parse_exit_event,
    parse_listing,
    parse_logs,
    parse_ok,
    parse_spawned,
    parse_waited,
    too_many_background,
)
from warden.core.runs import NetEvent, RunResult, RunWatch, SandboxRequest, Usage, usage_of

if TYPE_CHECKING:
    import socket

__all__ = ["HostLiveSandboxes", "keep_no_spares", "supervisor_source"]

T = TypeVar("T")

_SOCKET = "supervisor.sock"
_ANSWER_TIMEOUT = 10.0  # seconds a supervisor has to answer one request
_STALL_CHECK = 0.25  # seconds between looks at whether a supervisor that has not answered yet is stopped
_START_TIMEOUT = 20.0  # seconds a new live sandbox has to answer its first ping
_DRAIN = 2.0  # seconds to read what a command left in its pipes after it ended
_ERR_TAIL = 4096
_STOP_WAIT_S = 5.0  # seconds stop() waits for a killed sandbox to be gone
# Warden's launcher, built from rlimit_exec.c by scripts/setup into the venv Warden runs from
# (none without a C compiler, or where Warden was installed otherwise: prlimit instead).
HOST_RLIMIT_EXEC = os.path.join(sys.prefix, "libexec", "warden-rlimit-exec")
RLIMIT_EXEC_PATH = "/etc/warden/rlimit-exec"  # its copy inside a live sandbox (supervisor.py's RLIMIT_EXEC)
HOST_PRLIMIT = "/usr/bin/prlimit"  # util-linux, in Debian's and Ubuntu's essential set
PRLIMIT_PATH = "/etc/warden/prlimit"  # its copy inside a live sandbox (supervisor.py's PRLIMIT)
_MAX_PROGRAM = 8 << 20
_FD_SIZE = 4  # bytes of one descriptor in SCM_RIGHTS (a C int)
# Seconds a `connect` may take: the supervisor's own bound (its DIAL_TIMEOUT, 5 s), and the answer's.
_CONNECT_TIMEOUT = 10.0


# What a supervisor this code starts understands beyond the first protocol (in its sandbox's
# row): 2, a command joins the cgroups whose `tasks` files come with its spawn; 3, a spawn sets
# the rlimits it is given and is held for `go` only when asked to (or when it could not start
# the command so). A sandbox an older Warden started keeps being spoken to as it understands.
# What a supervisor knows besides is a flag of its own in the row ("connects", "idle_ignores_open"):
# a new number would send an older Warden sharing the home (a `warden serve` not yet restarted)
# to the first protocol with a sandbox this code started, each of its commands held and moved.
SUPERVISOR_PROTOCOL = 3


@cache
def supervisor_source() -> str:
    return Path(__file__).with_name("supervisor.py").read_text()


@contextlib.contextmanager
def _reachable(path: str) -> Iterator[str]:
    """`path`, or for one past a Unix socket address's 108 bytes (a deep $WARDEN_HOME) the same
    file through its folder's descriptor, /proc/self/fd/N/NAME, which bind and connect follow."""
    if len(os.fsencode(path)) < 100:
        yield path
        return
    fd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


class _HungUp(Unavailable):
    """The supervisor refused the connection or closed it (rule `live.unreachable`, as any
    unreachable one): told apart where nothing was answered yet (`HungUpFirst`)."""


class _Channel:
    """One connection to a supervisor: frames out, bounded frames in, every read with a deadline."""

    def __init__(self, path: str, timeout: float | None = None, stalled: Callable[[], bool] | None = None) -> None:
        """`stalled`: whether the supervisor is held where it cannot answer (asked while an answer
        is awaited; `_stalled`)."""
        import socket  # here, not above: `warden run` imports this module and needs no socket without one

        self.sock: socket.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(_ANSWER_TIMEOUT if timeout is None else timeout)
        try:
            with _reachable(path) as address:
                self.sock.connect(address)
        except OSError as exc:
            self.sock.close()
            raise _HungUp(f"the live sandbox does not answer ({exc.strerror or exc})",
                          rule="live.unreachable") from None
        self.buffer = bytearray()
        self._stalled = stalled
        # Descriptors that came with what was read, when asked for (`take_fd`): at most one is
        # ever kept; the kernel closes those past the control buffer's room for one.
        self.take_fd = False
        self.fds: list[int] = []
        self.exit_said = False  # a foreground command's end came on it (`_exit_from`)
        self.heard = False  # anything read on it (a kept one: since its command began)

    def send(self, message: Mapping[str, object], fds: list[int] | None = None) -> None:
        data = encode_frame(message)
        try:
            if fds:
                import array
                import socket

                sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                self.sock.sendall(data[sent:])
            else:
                self.sock.sendall(data)
        except OSError as exc:
            raise _HungUp(f"the live sandbox stopped listening ({exc.strerror or exc})",
                          rule="live.unreachable") from None

    def _fill(self, size: int, deadline: float) -> None:
        while len(self.buffer) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Quiet("the live sandbox did not answer in time", rule="live.unreachable")
            # A supervisor one of its commands stopped would answer nothing until the timeout:
            # looked at every so often (`_stalled`).
            self.sock.settimeout(min(left, _STALL_CHECK) if self._stalled is not None else left)
            try:
                chunk = self._recv(min(max(size - len(self.buffer), 65536), 1 << 20))
            except TimeoutError:
                if self.stalled():
                    raise Unavailable("the live sandbox's supervisor is held by a tracer, so the sandbox is ended; "
                                      "run the command again: a new one starts", rule="live.unreachable") from None
                continue
            except OSError as exc:
                raise _HungUp(f"the live sandbox hung up ({exc.strerror or exc})",
                              rule="live.unreachable") from None
            if not chunk:
                raise _HungUp("the live sandbox hung up", rule="live.unreachable")
            self.buffer += chunk
            self.heard = True

    def _recv(self, size: int) -> bytes:
        if not self.take_fd:
            # A descriptor the supervisor sends along is closed by the kernel: no room for it.
            return self.sock.recv(size)
        import socket

        data, ancdata, flags, _ = self.sock.recvmsg(size, socket.CMSG_SPACE(_FD_SIZE), socket.MSG_CMSG_CLOEXEC)
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                whole = len(payload) - len(payload) % _FD_SIZE
                self.fds += [int.from_bytes(payload[i:i + _FD_SIZE], sys.byteorder, signed=True)
                             for i in range(0, whole, _FD_SIZE)]
        if len(self.fds) > 1 or flags & socket.MSG_CTRUNC:
            self.close_fds()
            raise _bad(BadAnswer("more than the one descriptor a connect answers with"))
        return data

    def close_fds(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []

    def frame(self, timeout: float | None = None) -> bytes:
        """The next frame's body; Unavailable when none comes in `timeout`, or it is bad."""
        deadline = time.monotonic() + (_ANSWER_TIMEOUT if timeout is None else timeout)
        self._fill(FRAME_HEADER, deadline)
        try:
            length = decode_frame_length(bytes(self.buffer[:FRAME_HEADER]))
        except BadAnswer as exc:
            raise _bad(exc) from None
        self._fill(FRAME_HEADER + length, deadline)
        body = bytes(self.buffer[FRAME_HEADER:FRAME_HEADER + length])
        del self.buffer[:FRAME_HEADER + length]
        return body

    def pop(self) -> bytes | None:
        """A whole frame already read, or None."""
        if len(self.buffer) < FRAME_HEADER:
            return None
        try:
            length = decode_frame_length(bytes(self.buffer[:FRAME_HEADER]))
        except BadAnswer as exc:
            raise _bad(exc) from None
        if len(self.buffer) < FRAME_HEADER + length:
            return None
        body = bytes(self.buffer[FRAME_HEADER:FRAME_HEADER + length])
        del self.buffer[:FRAME_HEADER + length]
        return body

    def stalled(self) -> bool:
        """Whether the supervisor is held where it cannot answer (`_stalled`); False if not known."""
        return self._stalled is not None and self._stalled()

    def clean(self) -> bool:
        """Whether the connection is still open with nothing unread, as a kept one must be before
        its next request (looked at without waiting)."""
        import socket

        if self.buffer or self.fds:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True  # nothing to read: open, and quiet
        except OSError:
            return False
        return False  # something unasked for, or b"": the supervisor closed it

    def ask(self, message: Mapping[str, object], timeout: float | None = None) -> bytes:
        self.send(message)
        return self.frame(timeout)

    def close(self) -> None:
        self.close_fds()
        with contextlib.suppress(OSError):
            self.sock.close()


def _stalled(sandbox: LiveSandbox) -> bool:
    """Whether the sandbox's supervisor cannot answer: a command of the sandbox stopped it (`kill
    -STOP 2`, `pkill -STOP python`: it runs with the bot's rights), and it is let go on here
    (SIGCONT: Warden's own process, found by its start time), so False; or a tracer holds it."""
    state = halted(sandbox.supervisor_pid, sandbox.supervisor_start)
    if state == "stopped":
        with contextlib.suppress(OSError):
            os.kill(sandbox.supervisor_pid, signal.SIGCONT)
    return state == "traced"


class _Quiet(Unavailable):
    """No frame in the time given (a followed process printing nothing, or a supervisor that hangs)."""


def _bad(exc: BadAnswer) -> Unavailable:
    return Unavailable(f"the live sandbox answered what Warden does not accept ({exc}); it is stopped",
                       rule="live.bad_answer")


def _parsed(parse: Callable[[bytes], T], data: bytes) -> T:
    """`parse(data)`; a BadAnswer as Unavailable (`live.bad_answer`)."""
    try:
        return parse(data)
    except BadAnswer as exc:
        raise _bad(exc) from None


def _log(fd: int) -> bytes:
    """The end of what bwrap said into pipe `fd` before it failed: until the pipe's end (bwrap
    gone), or a second of silence (bwrap still there)."""
    said = b""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    deadline = time.monotonic() + 1.0
    with contextlib.suppress(OSError):
        while waiting.poll(max(deadline - time.monotonic(), 0.0) * 1000):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            said = (said + chunk)[-_ERR_TAIL:]
    return said


def _not_a_connection(fd: int, port: int) -> str | None:
    """Why descriptor `fd` is not a TCP connection to `port` of a loopback address; None when it
    is. Asked of what a supervisor hands over, before Warden relays anything through it."""
    import ipaddress
    import socket
    import stat

    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return "a descriptor that is not a socket"
        # Options read on the descriptor itself: socket.socket(fileno=…) would take its word for them.
        probe = socket.socket(fileno=os.dup(fd))
        try:
            kind = probe.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
            domain = probe.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
            protocol = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL)
            listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            if kind != socket.SOCK_STREAM or domain not in (socket.AF_INET, socket.AF_INET6):
                return "a socket that is not a TCP stream"
            if protocol != socket.IPPROTO_TCP or listening:
                return "a socket that is not a TCP connection"
            peer = probe.getpeername()
        finally:
            probe.close()
    except OSError as exc:  # ENOTCONN: not connected (any more)
        return f"a socket Warden cannot use ({exc.strerror or exc})"
    if not ipaddress.ip_address(peer[0]).is_loopback or peer[1] != port:
        return "a connection to another address than the sandbox's own port"
    return None


def _bwrap_alive(proc: subprocess.Popen[bytes], init: int) -> None:
    """ProcessLookupError, with the sandbox's init killed, when bwrap itself has ended as the
    sandbox started: a lifecycle change's drain (archive, destroy) kills the processes in the
    workspace's folder, and bwrap's init, not bound to die with it (the sandbox outlives Warden),
    went on to start the supervisor of a sandbox for a workspace no longer there to use."""
    if proc.poll() is None:
        return
    with contextlib.suppress(OSError):
        os.kill(init, signal.SIGKILL)
    raise ProcessLookupError(f"bwrap ended as the sandbox started ({proc.returncode})")


def _children(pid: int) -> list[int]:
    """The children of `pid` (its main thread's), from /proc; by a scan of every ppid without
    /proc/PID/task/TID/children (kernels built without CONFIG_PROC_CHILDREN)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(x) for x in handle.read().split()]
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            return []
    except (OSError, ValueError):
        return []
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
                if int(data[data.rfind(b")") + 2:].split()[1]) == pid:
                    found.append(int(name))
    return found


def _ns_pid(pid: int) -> tuple[int | None, int | None]:
    """(the pid namespace's inode, the innermost pid) of host process `pid`."""
    try:
        inode = os.stat(f"/proc/{pid}/ns/pid").st_ino
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return inode, int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None, None


def _find_host_pid(parent: int, ns_pid: int, pidns: int) -> int | None:
    """The host's pid of the child of `parent` that is `ns_pid` in pid namespace `pidns`, if one is."""
    for child in _children(parent):
        if _ns_pid(child) == (pidns, ns_pid):
            return child
    return None


def _host_pid(parent: int, ns_pid: int, pidns: int, timeout: float = 5.0) -> int:
    """`_find_host_pid`, waiting `timeout` seconds for it (/proc may lag the fork)."""
    deadline = time.monotonic() + timeout
    while True:
        found = _find_host_pid(parent, ns_pid, pidns)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise Unavailable("the live sandbox named a process that is not its own", rule="live.bad_answer")
        time.sleep(0.001)


def _with_launcher(spec: SandboxSpec, held: _Held) -> SandboxSpec:
    """Warden's launcher as a sealed program of the sandbox (RLIMIT_EXEC_PATH), else the host's
    `prlimit` (PRLIMIT_PATH): the supervisor starts commands through it (without either, it
    forks them). One of them only: the supervisor never uses prlimit where the launcher is."""
    for host_path, inside in ((HOST_RLIMIT_EXEC, RLIMIT_EXEC_PATH), (HOST_PRLIMIT, PRLIMIT_PATH)):
        program = _program(host_path)
        if program is not None:
            return replace(spec, sealed_programs=((held.keep(_memfd_with(program)), inside),))
    return spec


def _program(path: str) -> bytes | None:
    """The bytes of the executable at `path`, or None (none there, or too big)."""
    if not os.access(path, os.X_OK):
        return None
    try:
        with open(path, "rb") as handle:
            program = handle.read(_MAX_PROGRAM + 1)
    except OSError:
        return None
    return program if len(program) <= _MAX_PROGRAM else None


def _pidns(sandbox: LiveSandbox) -> int:
    pidns = sandbox.meta.get("pidns")
    return pidns if isinstance(pidns, int) else 0


class _Started(NamedTuple):
    """A command the supervisor started: its pid in the sandbox, its host pid when Warden had to
    find it (held, or moved into its cgroup), and its own cgroup."""

    pid: int
    host_pid: int | None
    group: cgroups.Cgroup | None


# The rlimits a command gets, by the names the supervisor knows them by (its RLIMIT_* numbers are its own).
_RLIMIT_NAMES = {resource.RLIMIT_AS: "as", resource.RLIMIT_CPU: "cpu", resource.RLIMIT_NOFILE: "nofile",
                 resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_CORE: "core", resource.RLIMIT_DATA: "data",
                 resource.RLIMIT_NPROC: "nproc"}


def _command_env(workspace: str, caller_env: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The environment of one command, as build_spec makes a fresh sandbox's."""
    base = {"PATH": sandbox_path(workspace), "HOME": workspace, "LANG": caller_env.get("LANG") or "C.UTF-8",
            "TERM": caller_env.get("TERM") or "dumb"}
    if caller_env.get("TZ"):
        base["TZ"] = caller_env["TZ"]
    return {**base, **check_env(env)}


def _cgroup_of(meta: Mapping[str, object]) -> cgroups.Cgroup | None:
    """A process's (or sandbox's) cgroup from its registry record, its folders checked."""
    dirs = []
    for item in meta.get("cgroups") or ():  # type: ignore[attr-defined]
        if (isinstance(item, list | tuple) and len(item) == 2 and item[0] in ("v1", "v2")
                and isinstance(item[1], str) and item[1].startswith("/sys/fs/cgroup/")
                and os.path.basename(item[1]).startswith("warden-live-") and ".." not in item[1]):
            dirs.append((str(item[0]), str(item[1])))
    return cgroups.Cgroup(dirs) if dirs else None


class _Spares:
    """Emptied cgroups of finished foreground commands, kept per live sandbox for the next one
    this process runs there (cgroups.Cgroup.renew): a command's cgroups made and removed cost
    ~0.5 ms of its own, and the kernel's teardown of each memory cgroup more on the side. Never
    shared between sandboxes; a few per sandbox (the API server runs commands at once), a few
    dozen in all; removed by the sandbox's stop (any process's: it removes `warden-live-<id>-*`),
    at this process's exit, and not inherited by a forked child."""

    PER_SANDBOX = 2
    IN_ALL = 32
    STOPPED_KEPT = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, list[cgroups.Cgroup]] = {}
        self._count = 0
        self.wanted = True  # False in a process that runs one command (`keep_no_spares`)
        # How often this process stopped each sandbox, newest last (bounded): a command that ends
        # after a stop dropped its sandbox's spares keeps none (its folders go with the stop, or
        # went). Counted, not flagged: a sandbox started again under its id (tests do) keeps them.
        self._stops: dict[str, int] = {}

    def stops(self, sandbox_id: str) -> int:
        """How often this process stopped `sandbox_id`: given back to `keep` by a command."""
        with self._lock:
            return self._stops.get(sandbox_id, 0)

    def take(self, sandbox_id: str) -> cgroups.Cgroup | None:
        with self._lock:
            kept = self._kept.get(sandbox_id)
            if not kept:
                return None
            self._count -= 1
            group = kept.pop()
            if not kept:  # none kept (or its own evicted, as the oldest): no empty entry left
                self._kept.pop(sandbox_id, None)
            return group

    def keep(self, sandbox_id: str, group: cgroups.Cgroup, stops: int) -> None:
        """Keep `group` (emptied) for `sandbox_id`'s next command, or remove it past the bounds or
        when the sandbox was stopped since its command started (`stops`, as `stops` said then)."""
        evicted = [group]
        with self._lock:
            kept = self._kept.setdefault(sandbox_id, [])
            if self.wanted and len(kept) < self.PER_SANDBOX and self._stops.get(sandbox_id, 0) == stops:
                kept.append(group)
                self._count += 1
                evicted = []
                while self._count > self.IN_ALL:  # the oldest sandbox's first
                    oldest = next(iter(self._kept))
                    evicted.append(self._kept[oldest].pop(0))
                    self._count -= 1
                    if not self._kept[oldest]:
                        del self._kept[oldest]
            if not kept:  # none kept (or its own evicted, as the oldest): no empty entry left
                self._kept.pop(sandbox_id, None)
        for old in evicted:
            _remove_cgroup(old)

    def drop(self, sandbox_id: str, *, stopped: bool = False) -> None:
        """Remove the spares of `sandbox_id`; `stopped`: it is being stopped, so none is kept after."""
        with self._lock:
            dropped = self._kept.pop(sandbox_id, [])
            self._count -= len(dropped)
            if stopped:
                self._stops[sandbox_id] = self._stops.pop(sandbox_id, 0) + 1
                while len(self._stops) > self.STOPPED_KEPT:
                    del self._stops[next(iter(self._stops))]
        for group in dropped:
            _remove_cgroup(group)

    def drop_all(self) -> None:
        for sandbox_id in list(self._kept):
            self.drop(sandbox_id)

    def forget(self) -> None:
        """In a forked child: the parent's spares are the parent's (their files closed here)."""
        for kept in self._kept.values():
            for group in kept:
                for fd in group.procs_fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        self._kept = {}
        self._count = 0
        self._stops = {}
        self._lock = threading.Lock()


_SPARES = _Spares()
os.register_at_fork(after_in_child=_SPARES.forget)
atexit.register(_SPARES.drop_all)


class _Kept:
    """Connections to supervisors that a foreground command ended on cleanly (its exit said,
    nothing else pending), kept for this process's next command in the same sandbox: a connect,
    the supervisor's accept and both sides' close cost ~0.3 ms a command, and a hand-off between
    the two processes each. Only to a supervisor that does not count a connection merely open as
    activity ("idle_ignores_open" in its row: it still ends when idle). Keyed by the supervisor's
    pid and start time as well as the sandbox's id: never handed to another supervisor. A few per
    sandbox (the API server runs commands at once), a few dozen in all; not inherited by a fork."""

    PER_SANDBOX = 2
    IN_ALL = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, int, int], list[_Channel]] = {}
        self._count = 0

    @staticmethod
    def key(sandbox: LiveSandbox) -> tuple[str, int, int]:
        return sandbox.id, sandbox.supervisor_pid, sandbox.supervisor_start

    def take(self, sandbox: LiveSandbox) -> _Channel | None:
        """A kept connection to `sandbox`'s supervisor that is still open and has nothing unread
        (looked at without waiting: a supervisor that ended, idle, closed it); None if none."""
        key = self.key(sandbox)
        while True:
            with self._lock:
                kept = self._kept.get(key)
                if not kept:
                    return None
                channel = kept.pop()
                self._count -= 1
                if not kept:
                    del self._kept[key]
            if channel.clean():
                return channel
            channel.close()

    def keep(self, sandbox: LiveSandbox, channel: _Channel) -> bool:
        """Keep `channel` for the sandbox's next command; False (the caller closes it) past the
        bounds, or where this process keeps none (`keep_no_spares`)."""
        if not _SPARES.wanted:
            return False
        key = self.key(sandbox)
        stale: list[_Channel] = []
        with self._lock:
            if self._count >= self.IN_ALL:
                # Those of sandboxes that ended without this process asking them again (idle, or
                # stopped by another Warden process) are let go here: else, once IN_ALL of them
                # were held, a long-running server kept no connection again until it restarted.
                stale = self._unclean()
            kept = self._kept.setdefault(key, [])
            full = len(kept) >= self.PER_SANDBOX or self._count >= self.IN_ALL
            if full:
                if not kept:
                    del self._kept[key]
                accepted = False
            else:
                kept.append(channel)
                self._count += 1
                accepted = True
        for old in stale:
            old.close()
        return accepted

    def _unclean(self) -> list[_Channel]:
        """Take out (under the lock) the kept connections no longer open and quiet (`clean`)."""
        stale: list[_Channel] = []
        for key in list(self._kept):
            kept = self._kept[key]
            stale += [channel for channel in kept if not channel.clean()]
            kept[:] = [channel for channel in kept if channel not in stale]
            if not kept:
                del self._kept[key]
        self._count -= len(stale)
        return stale

    def drop(self, sandbox_id: str) -> None:
        """Close the kept connections to `sandbox_id` (it is being stopped)."""
        with self._lock:
            dropped = [channel for key in [k for k in self._kept if k[0] == sandbox_id]
                       for channel in self._kept.pop(key)]
            self._count -= len(dropped)
        for channel in dropped:
            channel.close()

    def forget(self) -> None:
        """In a forked child: the parent's connections are the parent's (this copy closed)."""
        for kept in self._kept.values():
            for channel in kept:
                channel.close()
        self._kept = {}
        self._count = 0
        self._lock = threading.Lock()


_KEPT = _Kept()
os.register_at_fork(after_in_child=_KEPT.forget)


def keep_no_spares() -> None:
    """Keep no cgroups for a next command in this process: it runs one (the home daemon's child),
    and removes its command's as the run ends rather than as it exits (some children ended
    without, leaving a folder behind until the sandbox stopped). No connection is kept either."""
    _SPARES.wanted = False


def _command_cgroup(sandbox: LiveSandbox, process_id: str, request: SandboxRequest,
                    support: cgroups.CgroupSupport, *, background: bool) -> cgroups.Cgroup:
    """The command's own cgroups: a foreground command's are a spare of its sandbox's when one
    can be renewed, else made; OSError when the kernel refuses."""
    limits = request.limits
    group = None
    while group is None and not background and (spare := _SPARES.take(sandbox.id)) is not None:
        if spare.renew(memory=limits.memory, pids=limits.pids):
            group = spare
        else:
            _remove_cgroup(spare)  # its folder gone with a stop, say: another spare, or new ones
    if group is None:
        group = cgroups.create(support, memory=limits.memory, pids=limits.pids,
                               name=f"warden-live-{sandbox.id[4:]}-{process_id}")
    group.spare = (sandbox.supervisor_pid,)  # it enters them to spawn the command (protocol 3)
    return group


def _remove_cgroup(group: cgroups.Cgroup, tries: int = 40) -> None:
    """Kill what is left in `group` and remove its folders (a busy one is retried briefly). An
    empty one, as after a command that left nothing, is removed at once. Its `cgroup.procs`
    files are closed: left open, each foreground command cost the process two descriptors for
    good (a server ran out after some hundreds)."""
    for fd in group.procs_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    group.procs_fds.clear()
    for version, path in group.dirs:
        for attempt in range(tries):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:  # busy: something is left in it
                cgroups.Cgroup([(version, path)], spare=group.spare).kill()
                if attempt:
                    time.sleep(0.025)


# What the proxy's own process needs of Warden's environment: to start this Python and import
# Warden, and its locale. Nothing else: it parses what a sandboxed command sends, on the host, and
# Warden's environment may hold WARDEN_CLUSTER_KEY, the pepper, a database password, cloud keys.
_PROXY_ENVIRON = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


def _proxy_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: environ[name] for name in _PROXY_ENVIRON if name in environ}


class _Proxy:
    """The filtering proxy of a live sandbox with network: live_proxy.py in a process of its own,
    its socket in a short folder of the system's temporary directory (a Unix socket's path is
    bounded), its decisions appended to `net-events.jsonl` in the sandbox's folder."""

    _PREFIX = "warden-live-net-"

    def __init__(self, proc: subprocess.Popen[bytes], folder: str) -> None:
        self.proc = proc
        self.folder = folder
        self.socket = os.path.join(folder, "proxy.sock")

    @classmethod
    def start(cls, policy: Mapping[str, object], sandbox_folder: Path, environ: Mapping[str, str]) -> _Proxy:
        import json
        import select
        import sys
        import tempfile

        folder = tempfile.mkdtemp(prefix=cls._PREFIX)
        proc = subprocess.Popen(
            [sys.executable, "-m", "warden.adapters.sandbox.live_proxy", os.path.join(folder, "proxy.sock"),
             str(sandbox_folder / "net-events.jsonl")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            start_new_session=True, env=_proxy_environ(environ))
        proxy = cls(proc, folder)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(dict(policy)).encode() + b"\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], _START_TIMEOUT)
            if not ready or proc.stdout.readline().strip() != b"ready":
                raise Unavailable("the network proxy of the live sandbox did not start", rule="sandbox.setup_failed")
        except BaseException:
            proxy.kill()
            raise
        threading.Thread(target=proc.wait, name="warden-live-proxy-reaper", daemon=True).start()
        return proxy

    def watch(self, pid: int) -> None:
        """Tell the proxy the sandbox's bwrap: it ends when that ends."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(f"{pid}\n".encode())
            self.proc.stdin.close()

    def meta(self) -> dict[str, object]:
        return {"proxy_pid": self.proc.pid, "proxy_start": start_time(self.proc.pid) or 0, "net_dir": self.folder}

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._remove(self.folder)

    @classmethod
    def end(cls, meta: Mapping[str, object]) -> None:
        """End a sandbox's proxy (it ends by itself once the sandbox has) and remove its folder."""
        pid, start, folder = meta.get("proxy_pid"), meta.get("proxy_start"), meta.get("net_dir")
        if isinstance(pid, int) and isinstance(start, int) and pid > 1 and alive(pid, start):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if isinstance(folder, str):
            cls._remove(folder)

    @classmethod
    def _remove(cls, folder: str) -> None:
        import shutil
        import tempfile

        # Only a folder of ours: the registry's copy of the path is compared, never trusted.
        if (os.path.dirname(folder) == tempfile.gettempdir() and os.path.basename(folder).startswith(cls._PREFIX)
                and not os.path.islink(folder)):
            shutil.rmtree(folder, ignore_errors=True)


class HostLiveSandboxes:
    """Live sandboxes of this host, their folders under `run_root` ($WARDEN_HOME/run); `environ`
    is Warden's own environment (LANG, TERM and TZ pass into commands from it)."""

    def __init__(self, run_root: Path, environ: Mapping[str, str]) -> None:
        self.run_root = run_root
        self._environ = environ

    # -- paths ------------------------------------------------------------------------------
    def _folder(self, sandbox_id: str) -> Path:
        if not SANDBOX_ID.match(sandbox_id):
            raise Unavailable(f"bad live sandbox id {sandbox_id[:40]!r} in the registry", rule="live.bad_row")
        return self.run_root / sandbox_id

    def _channel(self, sandbox: LiveSandbox, timeout: float | None = None) -> _Channel:
        # The path is Warden's own, made from the id; the row's copy is only compared with it.
        path = str(self._folder(sandbox.id) / _SOCKET)
        if sandbox.socket != path:
            raise Unavailable("the registry names another socket for this live sandbox", rule="live.bad_row")
        return _Channel(path, timeout, lambda: _stalled(sandbox))

    def _logs_file(self, process_id: str, stream: str) -> Path:
        return self.run_root / "logs" / f"{check_process_id(process_id)}.{stream}"

    # -- starting ---------------------------------------------------------------------------
    def start(self, sandbox_id: str, request: SandboxRequest, *, idle_s: float) -> StartedSandbox:
        """Start a live sandbox with `request`'s mounts and network (its argv is not run)."""
        bwrap, python = bwrap_path(), python3_path()
        if bwrap is None:
            raise Unavailable(MISSING_BWRAP, rule="sandbox.bwrap_missing")
        if python is None:
            raise Unavailable("a live sandbox needs a system python3 (/usr/bin/python3) for its supervisor: "
                              "apt-get install python3-minimal", rule="sandbox.no_python3")
        folder = self._folder(sandbox_id)
        self.run_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
        path = str(folder / _SOCKET)
        import shutil
        import socket

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held = _Held()
        group: cgroups.Cgroup | None = None
        proc: subprocess.Popen[bytes] | None = None
        proxy: _Proxy | None = None
        log: int | None = None  # bwrap's output, read should it fail to start
        beacon: int | None = None  # the socket's file, which the supervisor watches
        try:
            # Not by the umask: it is the whole process's, and a server starts sandboxes in several
            # threads at once (another's folder made meanwhile came out 0600, unsearchable, and its
            # bind failed). The folder is this user's alone (0700), so the socket's mode until the
            # chmod below opens it to nobody else.
            with _reachable(path) as address:
                listener.bind(address)
            os.chmod(path, 0o600)
            listener.listen(64)
            # The socket's file itself (O_PATH: no open, read or write of anything through it),
            # for the supervisor to see it unlinked (its link count 0) and end: its home removed
            # (`rm -rf ~/.warden`) or its folder here, no Warden can reach it again, and it ran
            # on, a dev server with it, for six idle periods, or for good while that one ran.
            beacon = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            # The supervisor's source as a read-only file of the sandbox, not its command line
            # (all of it in every `ps` of the host otherwise); -I keeps its folder off sys.path.
            command: tuple[str, ...] = (python, "-I", "-S", SUPERVISOR_PATH, str(listener.fileno()),
                                        f"{idle_s:g}", str(beacon))
            if request.network is not None:
                # The proxy outside (a process of its own: it outlives this one, as the sandbox does)
                # and, inside, the relay that execs the supervisor with the proxy variables set.
                proxy = _Proxy.start(request.network.to_json(), folder, self._environ)
                command = (python, "-I", "-S", "-c", _forwarder_source(), PROXY_SOCKET, "--", *command)
            spec = build_spec(request.workspace, command, caller_env=self._environ, env={},
                              ro_paths=request.ro_paths, extra_binds=request.binds, bind_fds=request.bind_fds,
                              ro_zones=request.ro_zones, keep_zones=request.keep_zones, denied=request.denied,
                              protected=request.protected,
                              network=proxy is not None, tmp_size=request.limits.memory)
            spec = replace(spec, die_with_parent=False, proxy_socket=proxy.socket if proxy is not None else None)
            spec = _with_seccomp(spec, held)
            spec = _with_data_files(spec, held, [(SUPERVISOR_PATH, supervisor_source().encode())])
            spec = _with_launcher(spec, held)
            spec = _with_pinned_sources(spec, held)
            borrowed = [fd for _, fd in spec.bind_fds if fd not in held.fds]
            control = _Control.open(held)
            options_fd = held.keep(_memfd_with(b"\0".join(os.fsencode(o) for o in bwrap_options(spec)) + b"\0"))
            argv = [bwrap, "--args", str(options_fd), "--info-fd", str(control.info_write), "--block-fd",
                    str(control.block_read), "--", *spec.command]
            support = cgroups.detect()
            if support.memory or support.pids:
                try:
                    group = cgroups.create(support, memory=request.limits.memory, pids=request.limits.pids,
                                           name=f"warden-live-{sandbox_id[4:]}")
                except OSError as exc:
                    held.notes.append(f"cgroup not usable ({exc}); limits by rlimit")
            check_process_limit(group, support, held.notes)
            # A person's stop (SIGTERM, SIGHUP) while bwrap starts is raised once `proc` is known,
            # to be ended below: raised inside Popen, past the fork, it left a sandbox that does not
            # die with Warden, its command started without its limits as --block-fd closed.
            starting = stops.Whole()
            # bwrap's output into a pipe read only while it starts, not a file of Warden's home:
            # bwrap, the sandbox's init, keeps it open for the sandbox's life and any command may
            # reopen it through /proc/1/fd/1, which filled such a file up to the command's file
            # size limit, on the host and outside the workspace's quota. Reopened, a pipe with no
            # reader takes one buffer (64 KiB, in memory) at most.
            log, log_write = os.pipe2(os.O_CLOEXEC)
            # Born in its cgroups where it can be (cgroups.Cgroup.entered): a move takes the kernel's lock.
            born_in = group.entered() if group is not None else contextlib.nullcontext(False)
            try:
                with starting, born_in as entered:
                    proc = subprocess.Popen(
                        argv, stdin=subprocess.DEVNULL, stdout=log_write, stderr=log_write, env=bwrap_environ(spec),
                        close_fds=True, start_new_session=True, cwd=spec.workspace,
                        pass_fds=(*(fd for fd in held.fds if fd not in control.ours), *borrowed, listener.fileno(),
                                  beacon))
            finally:
                os.close(log_write)
            starting.raise_held()
            # Reaped by a thread of this process while it lives; by init once it has gone.
            threading.Thread(target=proc.wait, name="warden-live-reaper", daemon=True).start()
            if proxy is not None:
                proxy.watch(proc.pid)
            held.close_handed(keep=control.ours)
            listener.close()
            started = self._release(proc, control, group, support, folder, log, born_in=entered)
            # What it mounts over names of the host's folders (masks, read-only zones and files,
            # pins) as its own namespace holds them now, and the denied paths it had nothing to
            # mount over: `intact` compares both at each use.
            init = started.meta.get("init_pid")
            mounts = held_mounts.held(init)
            if mounts is None or not isinstance(init, int):
                raise Unavailable("the live sandbox ended as it started; run the command again",
                                  rule="live.unreachable")
            held_mounts.record(folder, init, mounts, list(spec.unmasked_denied))
            return started._replace(socket=path, meta={**started.meta, "seccomp": held.seccomp,
                                                       "mounts": mounts, "unmasked": list(spec.unmasked_denied),
                                                       "notes": held.notes[:5], "protocol": SUPERVISOR_PROTOCOL,
                                                       "connects": True,  # its supervisor knows `connect`
                                                       # and ends when idle with connections open (`_Kept`)
                                                       "idle_ignores_open": True,
                                                       **(proxy.meta() if proxy is not None else {})})
        except BaseException:
            if proc is not None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            if proxy is not None:
                proxy.kill()
            if group is not None:
                _remove_cgroup(group)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            listener.close()
            if log is not None:
                os.close(log)
            if beacon is not None:
                os.close(beacon)
            held.close()
            if group is not None:
                for fd in group.procs_fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                group.procs_fds.clear()

    def _release(self, proc: subprocess.Popen[bytes], control: _Control, group: cgroups.Cgroup | None,
                 support: cgroups.CgroupSupport, folder: Path, log: int, *, born_in: bool) -> StartedSandbox:
        """Limits on the sandbox's init, its cgroup, "go"; then the supervisor found and pinged.
        `log`: the pipe bwrap writes its errors into; `born_in`: bwrap was started in `group`."""
        if group is not None and not born_in:
            with contextlib.suppress(OSError):
                group.add(proc.pid)
        init = _read_info(control.info_read).get("child-pid")
        if not isinstance(init, int):
            raise _setup_failed(_log(log), proc.wait(5))
        try:
            # The supervisor keeps Warden's own limits but for core dumps; each command gets its
            # own before it may start (prlimit lowers, which any user may).
            resource.prlimit(init, resource.RLIMIT_CORE, (0, 0))
            if group is not None and not (born_in and group.holds(init)):
                group.add(init)
            _bwrap_alive(proc, init)
            os.write(control.block_write, b"go")
        except (ProcessLookupError, BrokenPipeError):
            raise _setup_failed(_log(log), proc.wait(5)) from None
        deadline = time.monotonic() + _START_TIMEOUT
        supervisor = None
        while supervisor is None:
            found = _children(init)
            supervisor = found[0] if found else None
            if supervisor is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise _setup_failed(_log(log), proc.poll())
                time.sleep(0.002)
        pidns, _ = _ns_pid(supervisor)
        channel = _Channel(str(folder / _SOCKET), _START_TIMEOUT)
        try:
            _parsed(parse_ok, channel.ask({"op": "ping"}, timeout=max(deadline - time.monotonic(), 1.0)))
            _bwrap_alive(proc, init)
        except (Unavailable, ProcessLookupError):
            raise _setup_failed(_log(log), proc.poll()) from None
        finally:
            channel.close()
        limits_via = f"cgroup {support.mode}" if group is not None else "rlimit"
        return StartedSandbox(proc.pid, start_time(proc.pid) or 0, supervisor, start_time(supervisor) or 0, "",
                              {"init_pid": init, "init_start": start_time(init) or 0, "pidns": pidns or 0,
                               "cgroups": [list(d) for d in group.dirs] if group is not None else [],
                               "limits_via": limits_via})


    def alive(self, sandbox: LiveSandbox) -> bool:
        return alive(sandbox.pid, sandbox.pid_start) and alive(sandbox.supervisor_pid, sandbox.supervisor_start)

    def intact(self, sandbox: LiveSandbox) -> bool:
        # Started by a Warden that kept neither list: never compared, so started again once.
        return held_mounts.intact(sandbox.meta.get("init_pid"), sandbox.meta.get("mounts"),
                                  sandbox.meta.get("unmasked"))

    # -- one command ------------------------------------------------------------------------
    def _spawn(self, sandbox: LiveSandbox, channel: _Channel, process_id: str, request: SandboxRequest, *,
               background: bool, names: list[str], fds: list[int], ring: int) -> _Started:
        """The command started with its limits and cgroups in place: by the supervisor alone when
        it can (protocol 3: Warden's sealed launcher or `prlimit` sets the rlimits it is given before exec,
        born in its v1 cgroups; or forked, setting them itself), else held before exec while
        Warden finds its host pid, applies them (again), moves it and says `go`."""
        cwd = request.cwd or request.workspace
        timeout = request.limits.timeout_s + (0.0 if background else 5.0)  # a foreground one: Warden's own first
        env = _command_env(request.workspace, self._environ, request.env)
        # The supervisor's exec would fail with E2BIG (126): the same one-line refusal as a fresh sandbox's.
        too_long = too_long_for_exec(list(request.argv), env)
        if too_long is not None:
            raise too_long
        support = cgroups.detect()
        group = None
        notes: list[str] = []
        home = _cgroup_of(sandbox.meta)  # the sandbox's own cgroups: the command gets its own beside them
        if home is not None:
            try:
                group = _command_cgroup(sandbox, process_id, request, support, background=background)
            except OSError as exc:
                notes.append(f"cgroup not usable ({exc})")
        host_pid: int | None = None
        spawned = None
        try:
            check_process_limit(group, support, notes)
            limits = _rlimits(request.limits, group, support)
            protocol = sandbox.meta.get("protocol")
            # The command joins its cgroups itself, before it runs anything of its own: a v1
            # move by the host would wait ~10 ms for the kernel when commands come spaced out.
            join = group.join_files() if group is not None and protocol in (2, SUPERVISOR_PROTOCOL) else []
            # The sandbox's own, for the supervisor to come back to once it spawned the command
            # from inside the command's cgroups (protocol 3).
            back = home.join_files() if home is not None and join and protocol == SUPERVISOR_PROTOCOL else []
            message: dict[str, object] = {
                "op": "spawn", "id": process_id, "argv": list(request.argv), "env": env, "cwd": cwd,
                "background": background, "timeout": timeout,
                "fds": [*names, *(f"cgroup{i}" for i in range(len(join))), *(f"back{i}" for i in range(len(back)))],
                "ring": ring, "tty": request.terminal is not None}
            if protocol == SUPERVISOR_PROTOCOL:
                # Held where Warden must move it into its cgroups itself (v2: no `tasks`), and in
                # the background: the registry keeps its host pid, which a quick one (`true`)
                # would no longer have once found.
                message.update(hold=background or (group is not None and not join),
                               rlimits={_RLIMIT_NAMES[which]: [soft, hard] for which, soft, hard in limits})
            try:
                channel.send(message, [*fds, *join, *back])
            finally:
                for fd in (*join, *back):
                    os.close(fd)
            spawned = _parsed(parse_spawned, channel.frame())
            if spawned.held or (group is not None and not spawned.joined):
                host_pid = _host_pid(sandbox.supervisor_pid, spawned.pid, _pidns(sandbox))
            if spawned.held and host_pid is not None:
                for which, soft, hard in limits:
                    resource.prlimit(host_pid, which, (soft, hard))
            # Its word that it joined is checked where it was held; one not held that did not
            # join is moved at once (a supervisor of ours holds such a one).
            if group is not None and host_pid is not None and not (spawned.joined and group.holds(host_pid)):
                group.add(host_pid)
            if spawned.held:
                _parsed(parse_ok, channel.ask({"op": "go", "id": process_id}))
        except BaseException as exc:
            if host_pid is None and spawned is not None:
                host_pid = _find_host_pid(sandbox.supervisor_pid, spawned.pid, _pidns(sandbox))
            if host_pid is not None:
                for kill in (os.killpg, os.kill):  # its session; itself, held before it made one
                    with contextlib.suppress(OSError):
                        kill(host_pid, signal.SIGKILL)
            if group is not None:
                _remove_cgroup(group)
            if isinstance(exc, ProcessLookupError):
                # Gone between the supervisor's answer and its limits or cgroups: the sandbox was
                # stopped meanwhile (a revoke, an archive), which killed it before it ran anything.
                raise Unavailable("the command's process ended before it could start: its live sandbox stopped "
                                  "meanwhile; run it again", rule="live.unreachable") from None
            raise
        return _Started(spawned.pid, host_pid, group)

    def run(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        """Run `request`'s command in the live sandbox to its end (a foreground command)."""
        channel = _KEPT.take(sandbox) if sandbox.meta.get("idle_ignores_open") is True else None
        if channel is None:
            try:
                channel = self._channel(sandbox)
            except _HungUp as exc:
                raise HungUpFirst(str(exc), rule=exc.rule) from None
        else:
            channel.sock.settimeout(_ANSWER_TIMEOUT)  # as a new one's (its last command's follow made it non-blocking)
            channel.exit_said = channel.heard = False
        # Kept for the next command only when this one's end was said on it and nothing else is pending.
        reusable = False
        stdin = request.stdin
        pending = b""
        ours: list[int] = []
        theirs: list[int] = []
        names: list[str] = []
        if request.terminal is not None:
            # A terminal session (`warden shell`): the pseudo-terminal's slave is the command's
            # stdin, stdout, stderr and controlling terminal; the front end relays its master.
            names, stdin = ["stdin", "stdout", "stderr"], None
        else:
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            ours, theirs, names = [out_r, err_r], [out_w, err_w], ["stdout", "stderr"]
        if isinstance(stdin, bytes):
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            theirs.append(in_r)
            ours.append(in_w)
            names.append("stdin")
            pending = stdin
        elif isinstance(stdin, int):
            names.append("stdin")
        group: cgroups.Cgroup | None = None
        # Set once the run is over, under `killing`: a kill that comes later (the quota's watcher,
        # an abandoned client) does nothing, as the command's cgroups may serve another by then.
        killing = threading.Lock()
        stops = _SPARES.stops(sandbox.id)  # read before its cgroups are taken: a stop after it keeps them not
        finished: list[bool] = []
        emptied: list[bool] = []  # each kill's: its cgroups seen empty after it
        try:
            fds = theirs + ([stdin] if isinstance(stdin, int) else [])
            if request.terminal is not None:
                fds = [request.terminal] * 3
            try:
                command = self._spawn(sandbox, channel, process_id, request, background=False,
                                      names=names, fds=fds, ring=RING_BYTES)
            except _HungUp as exc:
                if channel.heard:
                    raise
                # Refused or closed before a word of answer: the supervisor ended, or is ending
                # (an idle stop that met this command as it was sent), and never spawned it.
                raise HungUpFirst(str(exc), rule=exc.rule) from None
            group = command.group
            for fd in theirs:
                os.close(fd)
            theirs = []
            started = time.monotonic()
            ended: list[bool] = []

            def kill() -> None:
                with killing:
                    if finished:
                        return
                    # Its group while its leader lives, found when needed (a run that ends by itself
                    # never looks its host pid up); once the supervisor reaped it, its cgroup alone
                    # (the supervisor killed the group).
                    leader = None if ended else _find_host_pid(sandbox.supervisor_pid, command.pid, _pidns(sandbox))
                    if leader is not None:
                        with contextlib.suppress(OSError):
                            os.killpg(leader, signal.SIGKILL)
                    # "Killed" is true when the result is returned: the next command of this
                    # sandbox never meets a leftover still running.
                    if group is not None:
                        emptied.append(group.kill() or group.wait_empty())

            # The disk quota watched from the loop below as it waits, rather than from a thread (given
            # only when the caller's sinks never block this loop: services/runs, RunOutput.may_block).
            watch = request.watch if request.watch is not None and request.watch.take() else None
            if request.on_started is not None:
                request.on_started(kill)
            output = _Output(request.on_stdout, request.on_stderr, request.capture,
                             request.max_capture if request.max_capture is not None else _MAX_CAPTURE)
            exited, timed_out = self._follow(channel, ours, pending, output, started + request.limits.timeout_s,
                                             kill, ended, watch)
            reusable = channel.exit_said and not timed_out and request.terminal is None
            code, sig = (exited.exit_code, exited.signal) if exited is not None else (137, 9)
            if timed_out:
                code, sig = 124, None
            oom = False
            if group is not None:
                # Counted since this command started: a spare's counter holds its earlier commands'.
                kills = group.oom_kills()
                oom, group.oom_seen = kills > group.oom_seen, kills
            usage = usage_of(cpu_s=exited.cpu_ms / 1000 if exited is not None and exited.cpu_ms is not None else None,
                             maxrss_kib=exited.maxrss_kib if exited is not None else None,
                             cgroup_peak=group.memory_peak() if group is not None else None,
                             cgroup_cpu_s=group.cpu_seconds() if group is not None else None)
            meta = sandbox.meta
            return RunResult(code, output.stdout.decode("utf-8", "replace"), output.stderr.decode("utf-8", "replace"),
                             time.monotonic() - started, timed_out, sig, oom_killed=oom,
                             limits_via=str(meta.get("limits_via", "rlimit")), seccomp=bool(meta.get("seccomp")),
                             truncated=output.truncated,
                             stderr_tail=bytes(output.stderr_tail).decode("utf-8", "replace"), usage=usage)
        finally:
            for fd in (*ours, *theirs):
                with contextlib.suppress(OSError):
                    os.close(fd)
            with killing:
                finished.append(True)
            if group is not None:
                if emptied and emptied[-1] and group.reusable():
                    _SPARES.keep(sandbox.id, group, stops)
                else:
                    _remove_cgroup(group)
            if not (reusable and _SPARES.stops(sandbox.id) == stops and channel.clean()
                    and _KEPT.keep(sandbox, channel)):
                channel.close()

    def _follow(self, channel: _Channel, ours: list[int], pending: bytes, output: _Output, deadline: float,
                kill: Callable[[], None], ended: list[bool],
                watch: RunWatch | None = None) -> tuple[Exited | None, bool]:
        """Read the command's pipes and its supervisor's exit event until both are done, feeding
        stdin; at the deadline, kill it and drain briefly. `watch`: looked at whenever its
        descriptor has something, or its time comes (it kills the command on a breach)."""
        err_r = ours[1] if ours else -1  # no pipes on a terminal: its master is relayed
        in_w = ours[2] if len(ours) > 2 else None
        exited: Exited | None = None
        timed_out = False
        channel.sock.setblocking(False)
        with selectors.DefaultSelector() as sel:
            for fd in ours[:2]:
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ, "pipe")
            sel.register(channel.sock, selectors.EVENT_READ, "channel")
            if watch is not None:
                sel.register(watch.fileno(), selectors.EVENT_READ, "watch")
            if in_w is not None:
                if pending:
                    os.set_blocking(in_w, False)
                    sel.register(in_w, selectors.EVENT_WRITE, "stdin")
                else:
                    os.close(in_w)
                    ours.remove(in_w)
            pipes_open = len(ours[:2])
            # A quick command's end may have come in with the answer to `go`.
            exited, deadline = self._exit_from(channel, kill, ended, deadline)
            while pipes_open or exited is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    if timed_out or exited is not None:
                        break  # drained long enough
                    timed_out = True
                    kill()
                    deadline = time.monotonic() + _DRAIN
                    continue
                # Its end comes from the supervisor, which one of its commands may have stopped
                # (`_stalled` lets it go on): looked at while nothing comes.
                wait = min(left, _STALL_CHECK) if exited is None else left
                due = watch.due() if watch is not None else None
                ready = sel.select(wait if due is None else min(wait, due))
                if watch is not None and ((due is not None and due <= wait) or any(k.data == "watch"
                                                                                    for k, _ in ready)):
                    watch.look()
                if not ready and exited is None and channel.stalled():
                    kill()  # a tracer holds the supervisor: the command's end would never be said
                    exited = Exited(137, 9)
                    ended.append(True)
                    continue
                for key, _ in ready:
                    if key.data == "watch":
                        continue
                    if key.data == "stdin":
                        pending = self._feed(key.fd, pending, sel, ours)
                    elif key.data == "channel":
                        try:
                            chunk = channel.sock.recv(65536)
                        except BlockingIOError:
                            continue
                        except OSError:
                            chunk = b""
                        if not chunk:
                            sel.unregister(channel.sock)
                            if exited is None:
                                exited = Exited(137, 9)  # the supervisor went away: so did the command
                                ended.append(True)
                            continue
                        channel.buffer += chunk
                        if exited is None:
                            exited, deadline = self._exit_from(channel, kill, ended, deadline)
                    else:
                        try:
                            data = os.read(key.fd, 65536)
                        except BlockingIOError:
                            continue
                        if not data:
                            sel.unregister(key.fd)
                            pipes_open -= 1
                            continue
                        output.add(data, is_stderr=key.fd == err_r)
        return exited, timed_out

    @staticmethod
    def _exit_from(channel: _Channel, kill: Callable[[], None], ended: list[bool],
                   deadline: float) -> tuple[Exited | None, float]:
        """The exit event if the channel's buffer holds it whole (then the command's leftovers are
        killed and the deadline drawn in to drain its pipes), and the deadline."""
        body = channel.pop()
        if body is None:
            return None, deadline
        exited = _parsed(parse_exit_event, body)
        channel.exit_said = True
        ended.append(True)
        # What it left behind goes now (a fresh sandbox's pid namespace would end); the pipes
        # then close, and their rest is read.
        kill()
        return exited, min(deadline, time.monotonic() + _DRAIN)

    @staticmethod
    def _feed(fd: int, pending: bytes, sel: selectors.BaseSelector, ours: list[int]) -> bytes:
        try:
            pending = pending[os.write(fd, pending[:65536]):]
        except BrokenPipeError:
            pending = b""
        except BlockingIOError:
            return pending
        if not pending:
            sel.unregister(fd)
            os.close(fd)
            ours.remove(fd)
        return pending

    def spawn(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest, *,
              ring: int = RING_BYTES) -> dict[str, object]:
        """Start `request`'s command in the background; its host details for the registry."""
        try:
            channel = self._channel(sandbox)
        except _HungUp as exc:
            raise HungUpFirst(str(exc), rule=exc.rule) from None
        try:
            try:
                command = self._spawn(sandbox, channel, process_id, request, background=True, names=[], fds=[],
                                      ring=ring)
            except Full:
                raise Unavailable(too_many_background(sandbox.workspace), rule="live.max_processes") from None
            except _HungUp as exc:
                if channel.heard:
                    raise
                raise HungUpFirst(str(exc), rule=exc.rule) from None  # as a foreground run's (`run`)
            group = command.group
            # The registry keeps its host pid (`warden kill` and the usage reach it without the
            # supervisor): found while it was held.
            host_pid = command.host_pid if command.host_pid is not None else _host_pid(
                sandbox.supervisor_pid, command.pid, _pidns(sandbox))
        finally:
            channel.close()
        dirs: list[list[str]] = []
        if group is not None:
            dirs = [list(d) for d in group.dirs]
            for fd in group.procs_fds:  # the cgroup stays; this process lets go of it
                os.close(fd)
            group.procs_fds.clear()
        return {"host_pid": host_pid, "host_start": start_time(host_pid) or 0, "cgroups": dirs}

    # -- asking -----------------------------------------------------------------------------
    def listing(self, sandbox: LiveSandbox) -> list[Supervised]:
        channel = self._channel(sandbox)
        try:
            return _parsed(parse_listing, channel.ask({"op": "list"}))
        finally:
            channel.close()

    def logs(self, sandbox: LiveSandbox, process_id: str) -> tuple[Logs, Exited | None]:
        channel = self._channel(sandbox)
        try:
            return _parsed(parse_logs, channel.ask({"op": "logs", "id": check_process_id(process_id)}))
        finally:
            channel.close()

    def follow(self, sandbox: LiveSandbox, process_id: str, *, tick: float = 1.0) -> Iterator[Chunk | None]:
        """The process's output so far, then as it comes, then its end; None every `tick` seconds
        of quiet (so a caller can stop following)."""
        channel = self._channel(sandbox)
        try:
            logs, ended = _parsed(parse_logs, channel.ask({"op": "logs", "id": check_process_id(process_id),
                                                           "follow": True}))
            for stream, data in (("stdout", logs.stdout), ("stderr", logs.stderr)):
                if data:
                    yield Chunk(stream, data)
            if ended is not None:
                yield Chunk("", b"", ended)
                return
            while True:
                try:
                    body = channel.frame(tick)
                except _Quiet:
                    yield None
                    continue
                chunk = _parsed(parse_chunk_event, body)
                yield chunk
                if chunk.exited is not None:
                    return
        finally:
            channel.close()

    def wait(self, sandbox: LiveSandbox, process_id: str, timeout: float) -> Supervised:
        channel = self._channel(sandbox, timeout + _ANSWER_TIMEOUT)
        try:
            answer = channel.ask({"op": "wait", "id": check_process_id(process_id), "timeout": timeout},
                                 timeout=timeout + _ANSWER_TIMEOUT)
            return _parsed(parse_waited, answer)
        finally:
            channel.close()

    def signal(self, sandbox: LiveSandbox | None, process: LiveProcess, sig: int) -> None:
        """Send `sig` to the process's group, through its supervisor; by the host when that fails
        (and SIGKILL always reaches its cgroup too)."""
        try:
            if sandbox is None:
                raise Unavailable("no sandbox", rule="live.unreachable")
            channel = self._channel(sandbox)
            try:
                _parsed(parse_ok, channel.ask({"op": "kill", "id": process.id, "signal": sig}))
            finally:
                channel.close()
        except Unavailable:
            pid, start = process.meta.get("host_pid"), process.meta.get("host_start")
            if isinstance(pid, int) and isinstance(start, int) and pid > 1 and alive(pid, start):
                with contextlib.suppress(OSError):
                    os.killpg(pid, sig)
        if sig == signal.SIGKILL:
            group = _cgroup_of(process.meta)
            if group is not None:
                group.kill()

    def connect(self, sandbox: LiveSandbox, port: int) -> socket.socket:
        """A TCP connection to `port` on the sandbox's own loopback, made by its supervisor inside
        its network namespace and handed over; NotListening when nothing there accepts it. The
        descriptor is the sandbox's word, checked here before use: one stream socket of TCP over
        IPv4 or IPv6, connected (not listening) to that port of a loopback address."""
        import socket

        if sandbox.meta.get("connects") is not True:
            raise Unavailable("this live sandbox was started by an older Warden, whose supervisor cannot connect to "
                              "its ports; `warden ps` its processes, stop them and start them again",
                              rule="live.no_connect")
        channel = self._channel(sandbox, _CONNECT_TIMEOUT)
        try:
            channel.take_fd = True
            channel.send({"op": "connect", "port": port})
            body = channel.frame(_CONNECT_TIMEOUT)
            fd = channel.fds.pop() if channel.fds else None
            try:
                try:
                    parse_connected(body, port)
                except BadAnswer as exc:
                    raise _bad(exc) from None
                if fd is None:
                    raise _bad(BadAnswer("a connect answered without its socket"))
                problem = _not_a_connection(fd, port)
                if problem is not None:
                    raise _bad(BadAnswer(problem))
                sock = socket.socket(fileno=fd)
                fd = None
                sock.setblocking(True)  # the supervisor connected it non-blocking: the same open file
                return sock
            finally:
                if fd is not None:
                    os.close(fd)
        finally:
            channel.close()

    def forget(self, sandbox: LiveSandbox, process_id: str) -> None:
        channel = self._channel(sandbox)
        try:
            _parsed(parse_ok, channel.ask({"op": "forget", "id": check_process_id(process_id)}))
        finally:
            channel.close()

    # -- ending -----------------------------------------------------------------------------
    def release(self, process: LiveProcess) -> bool:
        """Kill what a finished background process left in its cgroup and remove the cgroup;
        whether the memory limit killed something of it."""
        group = _cgroup_of(process.meta)
        if group is None:
            return False
        oom = group.oom_killed()
        _remove_cgroup(group)
        return oom

    def usage(self, process: LiveProcess, exited: Exited | None = None) -> Usage | None:
        """Its cgroup's figures (the whole tree) where it has one; the supervisor's wait4 once it
        ended; while it runs, its leader's CPU from /proc (what it and the children it reaped used).
        The supervisor's numbers are the sandbox's word, bounded when parsed (core.live)."""
        group = _cgroup_of(process.meta)
        cpu_s: float | None = None
        maxrss: int | None = None
        if exited is not None:
            cpu_s = exited.cpu_ms / 1000 if exited.cpu_ms is not None else None
            maxrss = exited.maxrss_kib
        elif process.running:
            pid, start = process.meta.get("host_pid"), process.meta.get("host_start")
            if isinstance(pid, int) and isinstance(start, int) and pid > 1:
                cpu_s = cpu_time(pid, start)
        if group is None:
            return usage_of(cpu_s=cpu_s, maxrss_kib=maxrss)
        return usage_of(cpu_s=cpu_s, maxrss_kib=maxrss, cgroup_cpu_s=group.cpu_seconds(),
                        cgroup_peak=group.memory_peak())

    def stop(self, sandbox: LiveSandbox) -> None:
        """End the live sandbox with everything in it, and remove its cgroup and folder."""
        with contextlib.suppress(Unavailable):
            channel = self._channel(sandbox, 2.0)
            try:
                channel.ask({"op": "stop"}, timeout=2.0)
            except Unavailable:
                pass
            finally:
                channel.close()
        init, init_start = sandbox.meta.get("init_pid"), sandbox.meta.get("init_start")
        # SIGKILL to a pid namespace's init ends every process in it.
        killed = []
        for pid, start in ((init, init_start), (sandbox.supervisor_pid, sandbox.supervisor_start),
                           (sandbox.pid, sandbox.pid_start)):
            if isinstance(pid, int) and isinstance(start, int) and pid > 1 and alive(pid, start):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                killed.append((pid, start))
        # kill() returns before the process is gone: on a busy machine it was still seen alive
        # after stop() returned. Wait (bounded) until it has exited.
        deadline = time.monotonic() + _STOP_WAIT_S
        while any(alive(pid, start) for pid, start in killed) and time.monotonic() < deadline:
            time.sleep(0.01)
        _SPARES.drop(sandbox.id, stopped=True)  # this process's spares of it; another's go with the folders below
        _KEPT.drop(sandbox.id)
        group = _cgroup_of(sandbox.meta)
        if group is not None:
            # Its commands' cgroups too: a background process not yet collected keeps its own.
            for version, path in group.dirs:
                base, own = os.path.split(path)
                with contextlib.suppress(OSError):
                    for name in os.listdir(base):
                        if name.startswith(f"{own}-"):
                            _remove_cgroup(cgroups.Cgroup([(version, f"{base}/{name}")]))
            _remove_cgroup(group)
        _Proxy.end(sandbox.meta)
        import shutil

        with contextlib.suppress(Unavailable):
            shutil.rmtree(self._folder(sandbox.id), ignore_errors=True)

    # -- output kept after a process was collected ------------------------------------------------
    def keep_logs(self, process_id: str, logs: Logs) -> None:
        folder = self.run_root / "logs"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # What the rings had dropped goes beside them, so that `logs` still says it once the process ended.
        dropped = (f"{logs.dropped_stdout + max(len(logs.stdout) - RING_BYTES, 0)} "
                   f"{logs.dropped_stderr + max(len(logs.stderr) - RING_BYTES, 0)}")
        for stream, data in (("out", logs.stdout), ("err", logs.stderr), ("dropped", dropped.encode())):
            path = self._logs_file(process_id, stream)
            # A temporary file of this writer's own: two Warden processes (or a server's two
            # threads) that both collect the process write the same output, and with one shared
            # name the first's rename took the file from under the second (FileNotFoundError).
            tmp = path.with_suffix(f".{stream}.{os.urandom(6).hex()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                with naming(folder):
                    try:
                        view = memoryview(data[-RING_BYTES:])
                        while view:  # a write on a nearly full disk may take part: the rest, or ENOSPC
                            view = view[os.write(fd, view):]
                    finally:
                        os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def kept_logs(self, process_id: str) -> Logs | None:
        found = []
        for stream in ("out", "err"):
            try:
                fd = os.open(self._logs_file(process_id, stream), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                return None
            try:
                found.append(os.read(fd, RING_BYTES))
            finally:
                os.close(fd)
        dropped_stdout, dropped_stderr = self._kept_dropped(process_id)
        return Logs(found[0], found[1], dropped_stdout, dropped_stderr)

    def _kept_dropped(self, process_id: str) -> tuple[int, int]:
        """The bytes the rings of an ended process had dropped (0, 0 when not kept: logs kept before
        these were)."""
        try:
            # Not a link, and a FIFO put there would give nothing rather than hang the reader.
            fd = os.open(self._logs_file(process_id, "dropped"),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return 0, 0
        try:
            words = os.read(fd, 64).split()
        except OSError:  # (a FIFO with a writer and nothing in it)
            return 0, 0
        finally:
            os.close(fd)
        if len(words) != 2 or not all(word.isdigit() for word in words):
            return 0, 0
        return int(words[0]), int(words[1])

    def drop_logs(self, process_id: str) -> None:
        for stream in ("out", "err", "dropped"):
            with contextlib.suppress(OSError):
                self._logs_file(process_id, stream).unlink()

    def net_events(self, sandbox: LiveSandbox) -> tuple[list[NetEvent], int]:
        """The network proxy's decisions since the last call (none for a sandbox without network),
        taken out of its file (live_proxy.py), and how many it could not keep meanwhile."""
        import fcntl
        import json

        from warden.adapters.sandbox.live_proxy import MAX_EVENTS_BYTES
        from warden.adapters.sandbox.proxy import MAX_EVENTS
        from warden.adapters.sandbox.proxy import NetEvent as ProxyEvent

        try:
            fd = os.open(self._folder(sandbox.id) / "net-events.jsonl", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return [], 0
        try:
            # Taken and emptied under the proxy's lock: each decision is read once, none is lost
            # between the read and the truncation, and the proxy's bound counts anew.
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.read(fd, MAX_EVENTS_BYTES + 4096)
            os.ftruncate(fd, 0)
        except OSError:
            return [], 0
        finally:
            os.close(fd)
        events: list[NetEvent] = []
        dropped = 0
        for line in data.splitlines():
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                item = json.loads(line)
                if "dropped" in item:
                    dropped += max(0, int(item["dropped"]))
                    continue
                if len(events) >= MAX_EVENTS:  # as a fresh sandbox's proxy keeps: the rest counted
                    dropped += 1
                    continue
                events.append(ProxyEvent(str(item["method"]), str(item["host"]), int(item["port"]),
                                         bool(item["allowed"]), str(item["rule"]), str(item["reason"])))
        return events, dropped
