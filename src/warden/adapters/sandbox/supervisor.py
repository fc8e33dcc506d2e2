"""Runs INSIDE a live sandbox: starts commands there on Warden's request and keeps their output.

Started as `python3 -I -S -c SOURCE LISTEN_FD IDLE_SECONDS [BEACON_FD]` as the sandbox's command (under bwrap's
init, in the sandbox's pid namespace), with the bot's rights only, and nothing but the standard
library, so any system python3 runs it. LISTEN_FD is a listening Unix socket Warden bound in its
own home before starting the sandbox: the socket's path is never mounted inside, the descriptor
is closed on exec, and the supervisor makes itself non-dumpable (prctl PR_SET_DUMPABLE 0), so no
command can reach the socket through /proc/PID/fd, read this process's memory, or ptrace it (the
seccomp filter refuses ptrace as well). A command can still kill it (the same user): the sandbox
then ends, with only that principal's own processes.

Protocol: frames of a 4-byte big-endian length and UTF-8 JSON, one request and its answer at a
time per connection (core/live.py parses the answers; Warden trusts none of them). A `spawn`
starts the command with its limits in place before it runs anything of its own, and without a
fork of this Python process (~1.5 ms on small VMs, its pages then copied on write by both sides):
a vfork (subprocess's) runs Warden's launcher (rlimit_exec.c, static and without libc, where
Warden could build it; else a copy of util-linux's `prlimit`), which sets the command's rlimits
and execs it; this process enters the command's cgroups (v1 `tasks` files that come with the
request) for the instant of the spawn, so the command is born in them. That program is
readable by no one, so the process running it is not dumpable (a bot's process cannot write
into it through /proc/PID/mem before it sets the limits; unless fs.suid_dumpable is 1, when it
is not used), and `prlimit` is not used with the loader's variables (LD_PRELOAD...) in the
command's environment. Otherwise (a terminal to make the command's own, one of those variables
for `prlimit`, neither program or no seal, a command or its script's interpreter not found) the command is forked
and sets its limits itself; where Warden must move it into its cgroups (v2, or a join that
failed) it is held before exec until Warden, having placed it, sends `go`. A foreground
command gets the descriptors Warden passed (SCM_RIGHTS) and dies if its caller's connection
closes; a background one writes into pipes read here into ring buffers. Every command runs in a
session of its own, so a kill reaches its process group.

A terminal session's command gets a pseudo-terminal made here, in the sandbox's own devpts, not
the one Warden passed (the host's, whose /dev/pts/N does not exist in here: `tty` said "not a
tty", os.ttyname failed). This process relays between the two (`Relay`), Warden's put in raw mode
so that only the inner one's line discipline acts (echo, ^C), and copies its size onto the inner
one when it changes.

A `connect` makes a TCP connection to a port of the sandbox's own loopback (127.0.0.1, then ::1)
and hands the connected socket to Warden with SCM_RIGHTS, for `warden forward`: a socket keeps the
network namespace it was made in, so Warden relays between the person's browser and the bot's dev
server with no relay process in here. The connect does not block this loop (a server whose
backlog is full answers nothing for seconds): it is waited on beside everything else, at most
DIAL_TIMEOUT seconds.

The supervisor exits (and the sandbox with it) after IDLE_SECONDS without a running process or a
request under way (a connection merely open does not count: Warden keeps a finished command's for
its next one), once Warden has collected every finished process (or after six idle periods anyway).
It ends at once, its processes killed, when the socket's file is unlinked (BEACON_FD, an O_PATH
descriptor of it, says so: its link count 0): its Warden home was removed, and nothing can reach it.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import os
import resource
import select
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import termios
import time
import tty as ttymode
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

MAX_REQUEST = 1 << 20
MAX_PROCS = 64  # background processes kept, running or finished
MAX_FDS = 7  # stdin, stdout, stderr, the tasks files of two v1 cgroups and of this sandbox's own two
# Warden's own launcher (rlimit_exec.c), as Warden copies it into the sandbox where it could build
# it: executable, readable by no one, so the process running it is not dumpable (no /proc/PID/mem
# for the bot's processes until it execs). Static, without libc: ~1 ms less per command than
# prlimit, and it reads no environment.
RLIMIT_EXEC = "/etc/warden/rlimit-exec"
# util-linux's prlimit, copied in the same way where that launcher is not.
PRLIMIT = "/etc/warden/prlimit"
# The rlimits a command may be given, by the names `prlimit` knows them by.
RLIMITS = {"as": "RLIMIT_AS", "cpu": "RLIMIT_CPU", "nofile": "RLIMIT_NOFILE", "fsize": "RLIMIT_FSIZE",
           "core": "RLIMIT_CORE", "data": "RLIMIT_DATA", "nproc": "RLIMIT_NPROC"}
MAX_PENDING_OUT = 16 << 20  # bytes queued to a client that does not read
RESIZE_TICK = 0.2  # seconds between looks at a terminal session's size (nothing signals this process)
SPAWN_GRACE = 30.0  # seconds a spawned command waits for Warden's go before it is killed
READ_CHUNK = 65536
DIAL_TIMEOUT = 5.0  # seconds a `connect` to a port of this sandbox may take
# Where a `connect` tries, in order: a dev server listens on one or the other ("localhost").
DIAL_ADDRESSES = ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"))
RELAY_PENDING = 1 << 16  # bytes a terminal relay holds each way before it reads no more
# Signals this Python handles or ignores; a command expects them at their defaults, as after a shell.
_CHILD_SIGNALS = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
# What the dynamic loader and libc read from the environment before a program's main: a
# `prlimit` started with any of these would run the bot's code before it set the limits (the
# command gets them all the same, forked). RLIMIT_EXEC has no loader and no libc: none matters to it.
# libsmartcols, which `prlimit` links, reads LIBSMARTCOLS_DEBUG* before the limits and prints its
# debug output into the command's stderr: such a command is forked too.
_LOADER_ENV = ("LD_", "GLIBC_TUNABLES", "MALLOC_", "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES",
               "RES_OPTIONS", "LOCALDOMAIN", "RESOLV_HOST_CONF", "NIS_PATH", "GETCONF_DIR", "LIBSMARTCOLS_")
# What the kernel makes a process running a program its user may not read: not dumpable by that
# user at 0 (the default) and 2 ("suidsafe", root only); dumpable at 1 ("debug"), which would undo
# the seal of RLIMIT_EXEC and PRLIMIT. Read at each spawn: an administrator may change it while
# the sandbox lives.
SUID_DUMPABLE = "/proc/sys/fs/suid_dumpable"


def _no_dump() -> None:
    """PR_SET_DUMPABLE 0: /proc/PID/{fd,mem,environ} and ptrace closed to the sandbox's commands."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def _wait_status(status: int) -> dict[str, int | None]:
    if os.WIFSIGNALED(status):
        return {"exit_code": 128 + os.WTERMSIG(status), "signal": os.WTERMSIG(status)}
    return {"exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255, "signal": None}


class Ring:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        over = len(self.data) - self.size
        if over > 0:
            del self.data[:over]
            self.dropped += over


class Proc:
    def __init__(self, proc_id: str, pid: int, background: bool, timeout: float, ring: int, go_fd: int | None,
                 owner: Conn | None) -> None:
        self.id = proc_id
        self.pid = pid
        self.background = background
        self.deadline: float | None = time.monotonic() + timeout if timeout else None
        self.spawned = time.monotonic()
        self.status = "starting"
        self.result: dict[str, int | None] | None = None
        self.timed_out = False
        self.ended = 0.0
        self.out = Ring(ring)
        self.err = Ring(ring)
        self.go_fd = go_fd
        self.owner = owner  # the connection of a foreground command's caller
        self.pipes: dict[int, str] = {}  # fd -> "stdout" | "stderr"
        self.followers: list[Conn] = []
        self.waiters: list[tuple[Conn, float]] = []  # (connection, deadline)

    def info(self, now: float) -> dict[str, object]:
        data = {"id": self.id, "pid": self.pid, "status": self.status, "background": self.background,
                "timed_out": self.timed_out}
        if self.result is not None:
            data.update(self.result)
            data["ended_ago"] = max(now - self.ended, 0.0)
        return data

    def exit_event(self) -> dict[str, object]:
        event = {"event": "exit", "timed_out": self.timed_out}
        event.update(self.result or {"exit_code": 255, "signal": None})
        return event


class Relay:
    """A terminal session's two pseudo-terminals joined: what the command writes on the inner one
    (made here) goes out on Warden's (`outer`, its slave, raw), what is typed there comes in, each
    way at most RELAY_PENDING bytes ahead of its reader. It ends once the inner one has no slave
    left (the command and what it left are gone) and its last output is out, or when Warden's
    side is closed: read as the end of input, or its hang-up seen at the size's look (`follow_size`)
    while nothing is read from it."""

    def __init__(self, sup: Supervisor, outer: int, inner: int) -> None:
        self.sup = sup
        self.outer = outer
        self.inner = inner
        self.out = bytearray()  # inner -> outer
        self.typed = bytearray()  # outer -> inner
        self.inner_done = False
        self.size = b""
        self.armed: dict[int, int] = {}
        for fd in (outer, inner):
            os.set_blocking(fd, False)
        self.follow_size()
        self.arm()

    def follow_size(self) -> bool:
        """The inner terminal at the outer one's size (the kernel signals the command's job);
        False once the outer one is hung up (EIO: Warden closed its side, the session is over)."""
        try:
            size = fcntl.ioctl(self.outer, termios.TIOCGWINSZ, b"\0" * 8)
        except OSError:
            return False
        if size != self.size:
            self.size = size
            with contextlib.suppress(OSError):
                fcntl.ioctl(self.inner, termios.TIOCSWINSZ, size)
        return True

    def arm(self) -> None:
        wanted = {
            self.inner: (0 if self.inner_done or len(self.out) >= RELAY_PENDING else selectors.EVENT_READ)
            | (selectors.EVENT_WRITE if self.typed and not self.inner_done else 0),
            self.outer: (selectors.EVENT_READ if len(self.typed) < RELAY_PENDING and not self.inner_done else 0)
            | (selectors.EVENT_WRITE if self.out else 0)}
        for fd, events in wanted.items():
            before = self.armed.get(fd, 0)
            if events == before:
                continue
            if not events:
                self.sup.sel.unregister(fd)
            elif before:
                self.sup.sel.modify(fd, events, self)
            else:
                self.sup.sel.register(fd, events, self)
            self.armed[fd] = events

    def ready(self, fd: int, events: int) -> None:
        if fd == self.inner and events & selectors.EVENT_READ:
            chunk = self.read(self.inner)
            if chunk == b"":
                self.inner_done = True
                self.typed.clear()
            elif chunk:
                self.out += chunk
        if fd == self.outer and events & selectors.EVENT_READ:
            chunk = self.read(self.outer)
            if chunk == b"":  # Warden's side is gone: so is the session
                self.close()
                return
            if chunk:
                self.follow_size()  # a resize reaches the command ahead of what was typed after it
                self.typed += chunk
        if self.out and self.write(self.outer, self.out) is None:
            self.close()
            return
        if self.typed and not self.inner_done and self.write(self.inner, self.typed) is None:
            self.typed.clear()
        if self.inner_done and not self.out:
            self.close()
            return
        self.arm()

    @staticmethod
    def read(fd: int) -> bytes | None:
        """What `fd` has now; None when nothing, b"" once its other side is gone (EIO: no slave
        open any more, or Warden's master closed)."""
        try:
            return os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    @staticmethod
    def write(fd: int, pending: bytearray) -> int | None:
        """Write what fits of `pending` (dropped from it); None when `fd` is gone."""
        try:
            sent = os.write(fd, pending)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            return None
        del pending[:sent]
        return sent

    def close(self) -> None:
        for fd in (self.inner, self.outer):
            if self.armed.get(fd):
                self.sup.sel.unregister(fd)
            os.close(fd)
        self.armed = {}
        self.sup.relays.remove(self)


def _inner_terminal(outer: int) -> tuple[int, int] | None:
    """A pseudo-terminal of the sandbox's devpts (master, slave), set as `outer` was, which is
    then put in raw mode; None where none can be made (the command gets `outer` itself)."""
    try:
        master, slave = os.openpty()
    except OSError:
        return None
    try:
        termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(outer))
        ttymode.setraw(outer, termios.TCSANOW)
    except (OSError, termios.error):
        os.close(master)
        os.close(slave)
        return None
    return master, slave


class Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.fds: list[int] = []
        self.closing = False
        self.dial: Dial | None = None  # its `connect` under way


class Dial:
    """A `connect` under way: the next addresses to try, the socket connecting now, until when."""

    def __init__(self, conn: Conn, port: int) -> None:
        self.conn = conn
        self.port = port
        self.addresses = list(DIAL_ADDRESSES)
        self.sock: socket.socket | None = None
        self.deadline = time.monotonic() + DIAL_TIMEOUT


class Supervisor:
    def __init__(self, listener: socket.socket, idle: float, beacon: int | None = None) -> None:
        self.listener = listener
        self.idle = idle
        self.beacon = beacon  # the listening socket's file (O_PATH), or None
        self.next_look = 0.0
        self.launcher = os.access(RLIMIT_EXEC, os.X_OK)
        self.prlimit = os.access(PRLIMIT, os.X_OK)
        self.sel = selectors.DefaultSelector()
        self.conns: dict[int, Conn] = {}
        self.procs: dict[str, Proc] = {}
        self.by_pid: dict[int, Proc] = {}
        self.pipes: dict[int, Proc] = {}  # fd -> Proc
        self.relays: list[Relay] = []
        self.last_activity = time.monotonic()
        self.stopping = False
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            now = time.monotonic()
            self.expire(now)
            # Idle, it ends unless something came in meanwhile (a request on a kept connection, or
            # a new one): it is handled first, and counted as activity.
            if self.stopping or self.unreachable(now) or (self.idle_over(now) and not self.sel.select(0)):
                break
            for key, events in self.sel.select(self.next_timeout(now)):
                tag = key.data
                if tag == "listen":
                    self.accept()
                elif tag == "wake":
                    self.drain_wake()
                elif isinstance(tag, Conn):
                    if events & selectors.EVENT_READ:
                        self.read_conn(tag)
                    if events & selectors.EVENT_WRITE and tag.sock.fileno() >= 0:
                        self.flush(tag)
                elif isinstance(tag, Proc):
                    self.read_pipe(key.fd, tag)
                elif isinstance(tag, Relay) and tag in self.relays:
                    tag.ready(key.fd, events)
                elif isinstance(tag, Dial) and tag.conn.dial is tag:
                    self.dial_ready(tag)
            for relay in list(self.relays):
                # Warden's side is read only while what was typed has room: a command that does
                # not read would stop that, and a process holding the inner terminal keep the
                # relay (and this sandbox, never idle) alive after Warden left; its hang-up ends it.
                if not relay.follow_size():
                    relay.close()
            self.reap()
        self.kill_all()

    def next_timeout(self, now: float) -> float:
        moments = [now + (RESIZE_TICK if self.relays else 1.0)]
        for proc in self.procs.values():
            if proc.deadline is not None and proc.status == "running":
                moments.append(proc.deadline)
            for _, deadline in proc.waiters:
                moments.append(deadline)
        moments += [conn.dial.deadline for conn in self.conns.values() if conn.dial is not None]
        return max(min(moments) - now, 0.0)

    def unreachable(self, now: float) -> bool:
        """Whether the socket's file was unlinked (its home removed, `rm -rf ~/.warden`): no
        Warden can connect again, collect what runs here or stop it; it ends at once rather than
        after six idle periods, or never while a process runs. Looked at once a second."""
        if self.beacon is None or now < self.next_look:
            return False
        self.next_look = now + 1.0
        try:
            return os.fstat(self.beacon).st_nlink == 0
        except OSError:
            return False

    def idle_over(self, now: float) -> bool:
        # A connection counts while a request or an answer is under way on it, not merely open:
        # Warden keeps the connection of a finished command for its next one (it saves a connect
        # and an accept per command), which must not keep an unused sandbox alive. Each request
        # counts as activity when it comes (`read_conn`).
        busy = any(conn.inbuf or conn.outbuf or conn.fds or conn.dial is not None for conn in self.conns.values())
        if busy or self.relays or any(p.status in ("starting", "running") for p in self.procs.values()):
            self.last_activity = now
            return False
        idle = now - self.last_activity
        uncollected = any(p.background and p.status == "exited" for p in self.procs.values())
        return idle >= (self.idle * 6 if uncollected else self.idle)

    def stop(self) -> None:
        self.stopping = True

    def kill_all(self) -> None:
        for proc in list(self.procs.values()):
            if proc.status in ("starting", "running"):
                self.signal_group(proc, signal.SIGKILL)

    def expire(self, now: float) -> None:
        for conn in list(self.conns.values()):
            if conn.dial is not None and now >= conn.dial.deadline:
                self.dial_end(conn.dial, {"ok": False, "refused": True, "error": "timed out"})
        for proc in list(self.procs.values()):
            if proc.status == "starting" and now - proc.spawned > SPAWN_GRACE:
                self.signal_group(proc, signal.SIGKILL)
            if proc.status == "running" and proc.deadline is not None and now >= proc.deadline:
                proc.timed_out = True
                proc.deadline = None
                self.signal_group(proc, signal.SIGKILL)
            for waiter in list(proc.waiters):
                if now >= waiter[1]:
                    proc.waiters.remove(waiter)
                    self.send(waiter[0], {"ok": True, "process": proc.info(now)})

    def signal_group(self, proc: Proc, sig: int, group_only: bool = False) -> bool:
        """Signal the command's process group (its session); the pid itself while it may not have
        made its session yet. Never a reaped pid (`group_only`): the number may be reused."""
        for target in (-proc.pid,) if group_only else (-proc.pid, proc.pid):
            try:
                os.kill(target, sig)
                return True
            except ProcessLookupError:
                continue
            except PermissionError:
                continue
        return False

    # -- children ------------------------------------------------------------------------------
    def drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def reap(self) -> None:
        while True:
            try:
                pid, status, used = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            proc = self.by_pid.pop(pid, None)
            if proc is None:
                continue
            if proc.status == "starting":
                proc.status = "failed"
            else:
                proc.status = "exited"
            proc.result = _wait_status(status)
            # What it used, with what it reaped (Warden reads these as bounded numbers).
            proc.result["cpu_ms"] = int((used.ru_utime + used.ru_stime) * 1000)
            proc.result["maxrss_kib"] = int(used.ru_maxrss)
            proc.ended = self.last_activity = time.monotonic()
            # What the command left in its process group goes with it.
            self.signal_group(proc, signal.SIGKILL, group_only=True)
            self.finish(proc)

    def finish(self, proc: Proc) -> None:
        """Tell whoever waits on an ended process; a foreground one is forgotten once told."""
        if proc.pipes:
            return  # its output is still being read: told once the pipes close
        now = time.monotonic()
        if proc.go_fd is not None:
            os.close(proc.go_fd)
            proc.go_fd = None
        if proc.owner is not None:
            self.send(proc.owner, proc.exit_event())
            proc.owner = None
        for conn in proc.followers:
            self.send(conn, proc.exit_event())
        proc.followers = []
        for conn, _ in proc.waiters:
            self.send(conn, {"ok": True, "process": proc.info(now)})
        proc.waiters = []
        if not proc.background:
            self.procs.pop(proc.id, None)

    def read_pipe(self, fd: int, proc: Proc) -> None:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        stream = proc.pipes.get(fd)
        if not chunk or stream is None:
            self.sel.unregister(fd)
            os.close(fd)
            proc.pipes.pop(fd, None)
            self.pipes.pop(fd, None)
            if proc.status in ("exited", "failed") and not proc.pipes:
                self.finish(proc)
            return
        (proc.out if stream == "stdout" else proc.err).add(chunk)
        event = {"event": "output", "stream": stream, "data": base64.b64encode(chunk).decode("ascii")}
        for conn in list(proc.followers):
            self.send(conn, event)

    # -- connections ---------------------------------------------------------------------------
    def accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        conn = Conn(sock)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_READ, conn)

    def read_conn(self, conn: Conn) -> None:
        try:
            data, ancdata, _, _ = conn.sock.recvmsg(READ_CHUNK, socket.CMSG_SPACE(MAX_FDS * 4),
                                                    socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancdata = b"", []
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                whole = len(payload) - len(payload) % 4
                fds = list(struct.unpack("={}i".format(whole // 4), payload[:whole]))  # noqa: UP032 (any python3)
                conn.fds.extend(fds)
        if len(conn.fds) > MAX_FDS:
            self.close(conn)
            return
        if not data:
            self.close(conn)
            return
        self.last_activity = time.monotonic()
        conn.inbuf += data
        while len(conn.inbuf) >= 4:
            (length,) = struct.unpack(">I", bytes(conn.inbuf[:4]))
            if length > MAX_REQUEST:
                self.close(conn)
                return
            if len(conn.inbuf) < 4 + length:
                break
            body = bytes(conn.inbuf[4:4 + length])
            del conn.inbuf[:4 + length]
            try:
                request = json.loads(body.decode("utf-8"))
                if not isinstance(request, dict):
                    raise ValueError("not an object")
                self.handle(conn, request)
            except Exception as exc:  # one bad request answers an error, the supervisor goes on
                error = "{}: {}".format(type(exc).__name__, exc)  # noqa: UP032 (runs on any python3)
                self.send(conn, {"ok": False, "error": error[:300]})
            if conn.sock.fileno() < 0:
                return

    def send(self, conn: Conn, message: Mapping[str, object]) -> None:
        if conn.sock.fileno() < 0:
            return
        data = json.dumps(message, separators=(",", ":")).encode()
        conn.outbuf += struct.pack(">I", len(data)) + data
        if len(conn.outbuf) > MAX_PENDING_OUT:
            self.close(conn)
            return
        self.flush(conn)

    def flush(self, conn: Conn) -> None:
        try:
            while conn.outbuf:
                sent = conn.sock.send(conn.outbuf)
                del conn.outbuf[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.close(conn)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.modify(conn.sock, events, conn)
        if conn.closing and not conn.outbuf:
            self.close(conn)

    def close(self, conn: Conn) -> None:
        fileno = conn.sock.fileno()
        if fileno < 0:
            return
        if conn.dial is not None:
            self.dial_end(conn.dial, None)
        self.sel.unregister(conn.sock)
        self.conns.pop(fileno, None)
        conn.sock.close()
        for fd in conn.fds:
            os.close(fd)
        conn.fds = []
        for proc in list(self.procs.values()):
            if proc.owner is conn and proc.status in ("starting", "running"):
                # A foreground command does not outlive its caller (as --die-with-parent would).
                proc.owner = None
                self.signal_group(proc, signal.SIGKILL)
            if conn in proc.followers:
                proc.followers.remove(conn)
            proc.waiters = [w for w in proc.waiters if w[0] is not conn]
        self.last_activity = time.monotonic()

    # -- requests ------------------------------------------------------------------------------
    def handle(self, conn: Conn, request: dict[str, Any]) -> None:
        op = request.get("op")
        if op == "ping":
            self.send(conn, {"ok": True})
        elif op == "spawn":
            self.spawn(conn, request)
        elif op == "go":
            proc = self.procs[request["id"]]
            if proc.status != "starting" or proc.go_fd is None:
                raise ValueError("not waiting to start")
            os.write(proc.go_fd, b"go")
            os.close(proc.go_fd)
            proc.go_fd = None
            proc.status = "running"
            self.send(conn, {"ok": True})
        elif op == "list":
            now = time.monotonic()
            self.send(conn, {"ok": True, "processes": [p.info(now) for p in self.procs.values()]})
        elif op == "logs":
            self.logs(conn, request)
        elif op == "kill":
            proc = self.procs[request["id"]]
            sig = int(request.get("signal", signal.SIGTERM))
            if proc.status not in ("starting", "running"):
                raise ValueError("the process has ended")
            self.signal_group(proc, sig)
            self.send(conn, {"ok": True})
        elif op == "wait":
            proc = self.procs[request["id"]]
            if proc.status in ("exited", "failed") and not proc.pipes:
                self.send(conn, {"ok": True, "process": proc.info(time.monotonic())})
            else:
                timeout = min(max(float(request.get("timeout", 0)), 0.0), 86400.0)
                proc.waiters.append((conn, time.monotonic() + timeout))
        elif op == "forget":
            ended = self.procs.get(request["id"])
            if ended is not None and ended.status in ("exited", "failed") and not ended.pipes:
                self.procs.pop(ended.id, None)
            self.send(conn, {"ok": True})
        elif op == "connect":
            self.connect(conn, request)
        elif op == "stop":
            self.send(conn, {"ok": True})
            self.stop()
        else:
            raise ValueError("unknown op")

    # -- connect: a port of this sandbox for Warden ------------------------------------------------
    def connect(self, conn: Conn, request: dict[str, Any]) -> None:
        port = request.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError("bad port")
        if conn.dial is not None:
            raise ValueError("a connect is under way")
        conn.dial = Dial(conn, port)
        self.dial_next(conn.dial)

    def dial_next(self, dial: Dial) -> None:
        """Connect to the next address; answered at once when it connects or nothing is left."""
        while dial.addresses:
            family, host = dial.addresses.pop(0)
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                continue  # no IPv6 in here
            sock.setblocking(False)
            err = sock.connect_ex((host, dial.port))
            if err == 0:
                self.dialed(dial, sock)
                return
            if err == errno.EINPROGRESS:
                dial.sock = sock
                self.sel.register(sock, selectors.EVENT_WRITE, dial)
                return
            sock.close()
        self.dial_end(dial, {"ok": False, "refused": True, "error": "nothing listens on that port"})

    def dial_ready(self, dial: Dial) -> None:
        sock = dial.sock
        if sock is None:
            return
        self.sel.unregister(sock)
        dial.sock = None
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            self.dialed(dial, sock)
            return
        sock.close()
        self.dial_next(dial)

    def dialed(self, dial: Dial, sock: socket.socket) -> None:
        """The answer, with the connected socket as its one descriptor; this process's copy closed."""
        conn = dial.conn
        conn.dial = None
        try:
            if conn.outbuf or conn.sock.fileno() < 0:
                return  # never: one request at a time, and its answer is this one
            data = json.dumps({"ok": True, "port": dial.port}, separators=(",", ":")).encode()
            frame = struct.pack(">I", len(data)) + data
            try:
                sent = conn.sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                    struct.pack("i", sock.fileno()))])
            except (BlockingIOError, InterruptedError):
                sent = -1
            except OSError:
                self.close(conn)
                return
            if sent < 0:
                self.close(conn)  # Warden reads nothing it asked for: gone with the descriptor
                return
            conn.outbuf += frame[sent:]
            self.flush(conn)
        finally:
            sock.close()

    def dial_end(self, dial: Dial, answer: Mapping[str, object] | None) -> None:
        """The `connect` given up (`answer` said, if any)."""
        if dial.sock is not None:
            self.sel.unregister(dial.sock)
            dial.sock.close()
            dial.sock = None
        dial.conn.dial = None
        if answer is not None:
            self.send(dial.conn, answer)

    def logs(self, conn: Conn, request: dict[str, Any]) -> None:
        proc = self.procs[request["id"]]
        done = proc.status in ("exited", "failed") and not proc.pipes
        answer = {"ok": True, "stdout": base64.b64encode(bytes(proc.out.data)).decode("ascii"),
                  "stderr": base64.b64encode(bytes(proc.err.data)).decode("ascii"),
                  "dropped": [proc.out.dropped, proc.err.dropped]}
        if done:
            answer["exit"] = proc.exit_event()
        self.send(conn, answer)
        if request.get("follow") and not done:
            proc.followers.append(conn)

    def spawn(self, conn: Conn, request: dict[str, Any]) -> None:
        proc_id = request["id"]
        if not isinstance(proc_id, str) or len(proc_id) != 16 or proc_id in self.procs:
            raise ValueError("bad or duplicate id")
        argv = [str(a) for a in request["argv"]]
        env = {str(k): str(v) for k, v in request["env"].items()}
        # The network relay (the forwarder) set the proxy variables in this process: pass them on.
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
                     "npm_config_proxy", "npm_config_https_proxy"):
            if name in os.environ:
                env[name] = os.environ[name]
        cwd = str(request.get("cwd") or "/")
        background = bool(request.get("background"))
        timeout = float(request.get("timeout") or 0)
        ring = min(max(int(request.get("ring", 1 << 20)), 4096), 8 << 20)
        # A Warden of the first protocols says neither: it holds every command and sends `go`.
        hold = bool(request.get("hold", True))
        limits = _limits(request.get("rlimits") or {})
        if background and sum(1 for p in self.procs.values() if p.background) >= MAX_PROCS:
            # Said as such (`full`), not as a bad request: Warden's count (the registry's running
            # ones) can be short of this one by ended processes it recorded but did not get to
            # forget here; it forgets those and asks again.
            for fd in conn.fds:
                os.close(fd)
            conn.fds = []
            self.send(conn, {"ok": False, "full": True, "error": "too many background processes in this sandbox"})
            return
        given = list(conn.fds)
        conn.fds = []
        names = list(request.get("fds") or [])
        if len(names) != len(given) or len(set(names)) != len(names):
            for fd in given:
                os.close(fd)
            raise ValueError("descriptors and their names disagree")
        child_fds = dict(zip(names, given))  # noqa: B905 (runs on any python3; lengths checked above)
        # `tasks` files of the command's cgroups (v1), joined by a thread itself, which spares the
        # host's move the kernel's global lock (adapters/sandbox/cgroups.join_files); and of this
        # sandbox's own, to come back to.
        joins = [child_fds.pop(name) for name in names if name.startswith("cgroup")]
        backs = [child_fds.pop(name) for name in names if name.startswith("back")]
        tty = bool(request.get("tty")) and "stdin" in child_fds
        parent_reads = {}
        # What this process keeps only if the spawn succeeds: a spawn that fails (the sandbox's
        # processes at their limit, which a command can hold them at) leaked these per request
        # until the supervisor could open nothing more.
        kept: list[int] = []
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            if background:
                for name in ("stdout", "stderr"):
                    read_end, write_end = os.pipe2(os.O_CLOEXEC)
                    kept.append(read_end)
                    parent_reads[read_end] = name
                    child_fds[name] = write_end
            stdio = [child_fds.get("stdin", devnull), child_fds.get("stdout", devnull),
                     child_fds.get("stderr", devnull)]
            inner = _inner_terminal(stdio[0]) if tty else None
            if inner is not None:
                relayed = os.dup(stdio[0])  # Warden's terminal, kept here to relay to
                kept += [inner[0], relayed]
                child_fds["inner"] = inner[1]  # closed here after the fork, as the others
                stdio = [inner[1]] * 3
            pid = None if hold or tty else self.spawn_born_limited(argv, env, cwd, stdio, limits, joins, backs)
            go_w: int | None = None
            if pid is not None:
                joined = bool(joins)
            else:
                # Forked with cgroups to enter, it is held: Warden checks it joined (or moves it) first.
                pid, joined, go_w = self.fork(argv, env, cwd, stdio, limits, joins, hold=hold or bool(joins),
                                              tty=tty, kept=kept)
            kept = []  # the spawn stands: the go pipe and output pipes are the process's now
        finally:
            os.close(devnull)
            for fd in [*child_fds.values(), *joins, *backs, *kept]:
                os.close(fd)
        if inner is not None:
            self.relays.append(Relay(self, relayed, inner[0]))
        proc = Proc(proc_id, pid, background, timeout, ring, go_w, None if background else conn)
        proc.status = "starting" if go_w is not None else "running"
        self.procs[proc_id] = proc
        self.by_pid[pid] = proc
        for fd, name in parent_reads.items():
            os.set_blocking(fd, False)
            proc.pipes[fd] = name
            self.pipes[fd] = proc
            self.sel.register(fd, selectors.EVENT_READ, proc)
        self.send(conn, {"ok": True, "pid": pid, "joined": joined, "held": go_w is not None})

    def spawn_born_limited(self, argv: list[str], env: dict[str, str], cwd: str, stdio: list[int],
                           limits: list[tuple[str, int, int, int]], joins: Sequence[int],
                           backs: Sequence[int]) -> int | None:
        """The command started by a vfork (subprocess's: no page of this process is copied)
        through Warden's launcher (else its `prlimit`), which sets its rlimits before it execs
        the command, and born in its cgroups: this process enters them for the spawn and goes
        back to its own. None when that cannot be done here (the caller forks the command)."""
        # The cheap checks first: _found stats PATH and reads the head of a script.
        if (not (self.launcher or self.prlimit) or len(backs) != len(joins)
                or not (self.launcher or _loader_safe(env)) or not _sealed()):
            return None
        program = _found(argv[0], env, cwd)
        if program is None:
            return None  # not found, or its interpreter: the fork's exec words it as bwrap does ("bwrap: execvp ...")
        entered = False
        try:
            try:
                for fd in joins:  # "0": this thread, without the kernel's global threadgroup lock
                    entered = True
                    os.write(fd, b"0")
            except OSError:
                return None  # the fork's child tries, and is held for Warden to move it
            if self.launcher:  # the program as found, so that it need not search PATH, which is the environment's
                launcher = RLIMIT_EXEC
                args = [RLIMIT_EXEC, *("{}={}:{}".format(which, soft, hard) for _, which, soft, hard in limits),  # noqa: UP032
                        "--", program, *argv]
            else:
                launcher = PRLIMIT
                args = [PRLIMIT, *("--{}={}:{}".format(name, soft, hard) for name, _, soft, hard in limits),  # noqa: UP032
                        "--", *argv]
            try:
                started = subprocess.Popen(args, executable=launcher, env=env, cwd=cwd, stdin=stdio[0],
                                           stdout=stdio[1], stderr=stdio[2], close_fds=True,
                                           start_new_session=True)
            except (OSError, ValueError, subprocess.SubprocessError):
                # Its folder gone, say, or a NUL in an argument: the fork's child fails the same way (126).
                return None
            # Reaped by wait4 in this loop, never by Popen (its finalizer would take the status).
            started._child_created = False  # type: ignore[attr-defined]
            return started.pid
        finally:
            if entered:
                try:
                    for fd in backs:
                        os.write(fd, b"0")
                except OSError:
                    # Left in a command's cgroup, this process would die with the command's
                    # leftovers: end the sandbox cleanly instead (Warden starts another).
                    self.stop()

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, stdio: list[int],
             limits: list[tuple[str, int, int, int]], joins: Sequence[int], *, hold: bool, tty: bool,
             kept: list[int]) -> tuple[int, bool, int | None]:
        """The command forked now: it joins its cgroups and sets its rlimits itself and, `hold`,
        waits before exec for Warden's `go`. Its pid, whether it joined, and the go pipe's end
        when held."""
        childs: list[int] = []  # the child's ends of the pipes, closed here after the fork either way
        try:
            go_r, go_w = os.pipe2(os.O_CLOEXEC) if hold else (-1, -1)
            if hold:
                kept.append(go_w)
                childs.append(go_r)
            said_r, said_w = os.pipe2(os.O_CLOEXEC)
            kept.append(said_r)
            childs.append(said_w)
            # Blocked across the fork: a signal Warden sends before the child has put its
            # handlers back to their defaults would reach this process's Python handler in the
            # child, which drops it (a SIGTERM right after the start was lost). The child
            # unblocks once the defaults are in place, and a pending signal then acts.
            signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_SIGNALS)
            try:
                pid = os.fork()
                if pid == 0:  # the child: never returns
                    self.child(argv, env, cwd, stdio, go_r, tty=tty, joins=joins, said=said_w, limits=limits)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _CHILD_SIGNALS)
            os.close(said_w)
            childs.remove(said_w)
            # The child says so within microseconds; a bot that stops it first (it may signal its
            # own processes) holds this loop a quarter of a second, and Warden moves it instead.
            joined = False
            if joins and select.select([said_r], [], [], 0.25)[0]:
                joined = os.read(said_r, 1) == b"1"
            kept.remove(said_r)
            os.close(said_r)
            if hold:
                kept.remove(go_w)
            return pid, joined, go_w if hold else None
        finally:
            for fd in childs:
                os.close(fd)

    @staticmethod
    def child(argv: list[str], env: dict[str, str], cwd: str, stdio: list[int], go_r: int, *,
              tty: bool = False, joins: Sequence[int] = (), said: int = -1,
              limits: Sequence[tuple[str, int, int, int]] = ()) -> NoReturn:
        """Become the command: its cgroups, session, signals, descriptors and rlimits, then exec;
        held (`go_r`), it waits for Warden's `go` first."""
        try:
            if joins:  # "0": this thread, the child's only one
                try:
                    for fd in joins:
                        os.write(fd, b"0")
                    os.write(said, b"1")
                except OSError:
                    os.write(said, b"0")
            os.setsid()
            # Every signal at its default and none blocked, as after a login shell: Python ignores
            # SIGPIPE and SIGXFSZ, this process handles some, and what the process that started
            # the sandbox ignored (SIGINT and SIGQUIT of a shell's background job, nohup's SIGHUP)
            # would stay ignored across exec.
            # (Python knows each signal's disposition from its start: only those not at their
            # default cost a system call here, on the way to the command's exec.)
            signal.set_wakeup_fd(-1)
            for sig in signal.valid_signals():
                if signal.getsignal(sig) not in (signal.SIG_DFL, None):
                    signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for target, fd in enumerate(stdio):
                os.dup2(fd, target, inheritable=True)
            if tty:  # a terminal session: the pseudo-terminal becomes this new session's own
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # Its own limits before it runs anything (Warden sets them again on a held one).
            for _, which, soft, hard in limits:
                resource.setrlimit(which, (soft, hard))
            if go_r >= 0 and os.read(go_r, 2) != b"go":
                os._exit(125)
            os.closerange(3, 1 << 16)
            os.chdir(cwd)
        except BaseException:
            os._exit(126)
        try:
            if not argv[0]:  # Python refuses it before any exec; execvp (bwrap's) finds no such file
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            os.execvpe(argv[0], argv, env)  # noqa: S606 (argv, never a shell string)
        except OSError as exc:
            # Worded as bwrap words it, so a command reads the same in a live or a fresh sandbox.
            message = "bwrap: execvp {}: {}\n".format(argv[0], exc.strerror)  # noqa: UP032 (any python3)
            os.write(2, message.encode("utf-8", "replace"))
            os._exit(127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126)
        finally:
            os._exit(126)


def _limits(given: Mapping[str, Any]) -> list[tuple[str, int, int, int]]:
    """(its name, RLIMIT_*, soft, hard) of each limit asked for, never above this process's own
    hard limit (which no process of the sandbox may raise)."""
    limits = []
    for name, pair in given.items():
        which = getattr(resource, RLIMITS[name])
        soft, hard = int(pair[0]), int(pair[1])
        if not 0 <= soft <= hard:
            raise ValueError("bad limit")
        own = resource.getrlimit(which)[1]
        if own != resource.RLIM_INFINITY:
            hard = min(hard, own)
            soft = min(soft, hard)
        limits.append((name, which, soft, hard))
    return limits


def _found(name: str, env: Mapping[str, str], cwd: str) -> str | None:
    """What execvp, in `cwd`, would run for `name` (a file this process may execute, on env's
    PATH): its path, as exec in `cwd` takes it; None when there is none."""
    if not name:
        return None
    path = env.get("PATH") or os.defpath
    candidates = [name] if "/" in name else [os.path.join(d or ".", name) for d in path.split(":")]
    return next((c for c in candidates if _startable(os.path.join(cwd, c), cwd)), None)


def _startable(path: str, cwd: str) -> bool:
    """An executable file whose `#!` interpreter, if it is a script, is one too: the kernel's
    ENOENT for a missing interpreter (a venv made on the host) would come from the launcher or
    prlimit, in its words, where the fork's exec says it as bwrap does."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return False
    try:
        # Not blocking: the bot may have put a FIFO there since.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return True  # executable, not readable: no interpreter could read it, so not a script
    try:
        head = os.read(fd, 256) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return True
    line, newline, _ = head[2:].partition(b"\n")
    words = line.split()
    if not newline or not words:
        return False  # a line the kernel may refuse: the fork's exec says how
    interpreter = os.path.join(cwd, os.fsdecode(words[0]))
    return os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)


def _loader_safe(env: Mapping[str, str]) -> bool:
    return not any(name.startswith(_LOADER_ENV) for name in env)


def _sealed() -> bool:
    """Whether a process running RLIMIT_EXEC or PRLIMIT is out of reach of the sandbox's other processes: with
    fs.suid_dumpable at 1 they could write into it through /proc/PID/mem before it set the limits
    (or unknown: no /proc)."""
    try:
        fd = os.open(SUID_DUMPABLE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.read(fd, 8).strip() in (b"0", b"2")
    except OSError:
        return False
    finally:
        os.close(fd)


def main() -> None:
    listen_fd, idle = int(sys.argv[1]), float(sys.argv[2])
    beacon = int(sys.argv[3]) if len(sys.argv) > 3 else None
    _no_dump()
    listener = socket.socket(fileno=listen_fd)
    listener.set_inheritable(False)
    if beacon is not None:
        # Never a command's: through /proc/self/fd/N it connects to the socket, as Warden does.
        os.set_inheritable(beacon, False)
    listener.setblocking(False)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold none of bwrap's descriptors
        os.dup2(null, fd)
    os.close(null)
    # A command started through subprocess keeps what this process ignores (but SIGPIPE and
    # SIGXFSZ, Python's own) and blocks: what the process that started the sandbox ignored (a
    # shell's background job: SIGINT, SIGQUIT; nohup: SIGHUP) or blocked must not reach it.
    for sig in signal.valid_signals() - {signal.SIGPIPE, signal.SIGXFSZ}:
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    Supervisor(listener, idle, beacon).run()


if __name__ == "__main__":
    main()
