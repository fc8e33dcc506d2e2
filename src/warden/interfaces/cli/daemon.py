"""The home's daemon: Warden imported once, a forked child per `warden run`.

`python -m warden.interfaces.cli.daemon HOME` (started by the `warden` client on demand,
interfaces/cli/entry.py). It listens on `HOME/run/daemon.sock` (0600, the home's owner only,
checked again by the peer's credentials) and, for each request, forks a child that takes the
client's stdin, stdout and stderr, folder and environment and runs the CLI's `main` on the
client's command line: the same code a `warden run` runs by itself, so the same checks, audit,
leases and sandbox, minus the imports. The child sends the status; the daemon sends it for a
child killed by a signal, and interrupts a child whose client went away.

While the home has live sandboxes it stays, and every `WARDEN_DAEMON_SWEEP` seconds (15) a
child looks at them as `warden serve` does: ended background processes get their outcome
audited, idle or no longer allowed sandboxes are stopped.

It registers as an instance of its node and renews its heartbeat from its own loop (`_Presence`),
and still holds no state a child could inherit wrongly: no registry connection between beats, no
thread, no open file but its socket, its lock and a wake-up pipe (closed in each child). What children import
that it has not, it imports after them, so the second command starts warm. It ends when idle
(`WARDEN_DAEMON_IDLE` seconds, 900 by default), and at once when Warden's code changed on
disk: a client then runs its command itself, and the next one starts a fresh daemon. A client
whose environment differs from the daemon's (another PATH, another WARDEN_* setting) runs its
command itself too, so nothing imported under one environment serves another.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import hashlib
import importlib
import io
import json
import os
import re
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from warden.adapters.terminal_id import session_terminal, vouch_for_session
from warden.interfaces.cli.entry import (
    MAX_FRAME,
    daemon_paths,
    decode_request,
    encode_request,
    home_of,
    is_daemon_run,
    ours,
    recv_frame,
    reply,
    send_frame,
    trusted_home,
)

__all__ = ["Daemon", "main"]

# Variables of a terminal, a shell or a session, which nothing of Warden reads: a client may
# differ from the daemon in these. Any other difference (a PATH, an LD_PRELOAD, a locale, a
# WARDEN_* setting) and the client runs its command itself: the daemon's process was started
# with its first client's, and a child takes the client's whole environment but not what the
# daemon loaded under its own.
_VOLATILE = frozenset({
    "PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLORTERM", "COLUMNS", "LINES", "WINDOWID", "TMUX", "TMUX_PANE", "STY",
    "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "SSH_AUTH_SOCK", "GPG_TTY", "DISPLAY", "WAYLAND_DISPLAY",
    "XDG_SESSION_ID", "XDG_VTNR", "PS1", "PS2", "PS4", "PROMPT_COMMAND", "HISTFILE", "HISTSIZE", "HISTCONTROL",
    "MAIL", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "WARDEN_DAEMON", "WARDEN_DAEMON_IDLE",
    "WARDEN_TERMINAL"})  # which terminal a client is: its current workspace (the client always names it)
# What confines a process besides its environment (proc(5)): the daemon serves only a client
# it matches in all of them (else the child would run with less than the client had, or more).
_CONFINEMENT = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
                "Seccomp", "Seccomp_filters", "Cpus_allowed_list", "Mems_allowed_list")
_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")
_MAX_REPORT = 60_000  # bytes of new module names a child reports (a pipe holds 64 KiB)
_LOG_BYTES = 1 << 20
_STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
_REQUEST_S = 1.0  # seconds a client has to hand over its whole request
_SOME_LEFT = 3  # a sweep's exit status when live sandboxes remain after it
_UNDONE_LOOK_S = 1.0  # how often the live sandboxes' masks are looked at (held_mounts), between sweeps


def code_stamp() -> str:
    """What Warden's code on disk is: every module's path, size and modification time."""
    root = Path(__file__).resolve().parents[2]  # the `warden` package
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                with contextlib.suppress(OSError):
                    st = os.stat(os.path.join(folder, name))
                    digest.update(f"{folder}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _own(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in _VOLATILE}


def process_of(pid: int | str) -> dict[str, str]:
    """What confines process `pid` (or "self") and what a command inherits from it, read from
    /proc rather than taken from it: its credentials, capabilities, no_new_privs, seccomp, CPUs,
    namespaces, cgroups, root folder and LSM label; and its umask, limits and priority (taken
    on by the child). Empty when it cannot be read."""
    base = f"/proc/{pid}"
    found: dict[str, str] = {}
    try:
        with open(f"{base}/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in _CONFINEMENT or key == "Umask":
                    found[key] = " ".join(value.split())
        for kind in _NAMESPACES:
            with contextlib.suppress(FileNotFoundError):
                found[f"ns.{kind}"] = os.readlink(f"{base}/ns/{kind}")
        with open(f"{base}/cgroup") as handle:
            found["cgroup"] = handle.read(65536)
        root = os.stat(f"{base}/root")
        found["root"] = f"{root.st_dev}:{root.st_ino}"
        with contextlib.suppress(OSError), open(f"{base}/attr/current") as handle:
            found["lsm"] = handle.read(4096).strip()
        with open(f"{base}/limits") as handle:
            # One line per resource, in RLIMIT_ order (proc(5)): soft and hard, or "unlimited".
            for which, line in enumerate(handle.readlines()[1:]):
                cells = line[26:].split()
                found[f"rlimit.{which}"] = ",".join("-1" if c == "unlimited" else c for c in cells[:2])
        with open(f"{base}/stat", "rb") as handle:
            found["nice"] = handle.read(4096).rsplit(b")", 1)[1].split()[16].decode()
    except (OSError, IndexError, ValueError):
        return {}
    return found


def _differs(client: dict[str, str], daemon: dict[str, str]) -> str | None:
    """What confines the client otherwise than the daemon, or None."""
    if not client:
        return "its process could not be read"
    for key, value in daemon.items():
        if key in ("Umask", "nice") or key.startswith("rlimit."):
            continue  # the child takes these on
        if client.get(key) != value:
            return f"it runs with another {key} than the daemon"
    return None


class _Request(NamedTuple):
    argv: list[str]
    env: dict[str, str]
    cwd: str
    context: dict[str, str]  # process_of(the client): its umask, limits, priority, taken on
    session: str  # the client's session as a terminal name, read from its pid (not its word)


@dataclass
class _Child:
    pid: int
    conn: socket.socket
    report: int


@dataclass
class _Spare:
    """A child forked ahead of the next request, its memory already its own (`_prefault`),
    waiting on `sock` for a request the daemon judged: a `warden run` then pays neither the fork
    nor the copy of each page its Python touches (together ~10 ms on a 2-core machine)."""

    pid: int
    sock: socket.socket  # the daemon's end: the request and its descriptors go down it
    instance: Any  # the daemon's instance when it was forked (its live sandboxes are that one's)
    modules: int  # len(sys.modules) then: the daemon imported more since, it is not as warm


class _Presence:
    """The daemon as an instance of its node (services/instances.py): registered once it serves,
    its heartbeat renewed every `node.heartbeat_interval`, gone on a clean end; killed, it is found
    dead (its pid gone, its heartbeat stale) and the live sandboxes its children started are
    stopped. All from the daemon's own loop, between forks: no thread (a fork copies only the
    thread that forks, and a lock another thread held stays held in the child), and no registry
    connection open past a beat (a child must not share one: PostgreSQL's, closed or used by a
    child, would break the daemon's; SQLite's must never cross a fork)."""

    def __init__(self, home: str, environ: dict[str, str]) -> None:
        self.home = home
        self.environ = environ
        self.app: Any = None  # warden.bootstrap.App, built at the first beat
        self.instance: Any = None  # warden.core.nodes.Instance, once registered
        self.interval = 10.0
        self.next_at = 0.0  # time.monotonic() of the next beat (0: at once)
        self.failed = False  # a failure is logged once, not every beat

    def due(self, now: float) -> float:
        """Seconds until the next beat (0: now)."""
        return max(self.next_at - now, 0.0)

    def beat(self) -> None:
        try:
            if self.app is None:
                from warden.bootstrap import bootstrap

                self.app = bootstrap(self.home, environ=self.environ)
                self.interval = max(self.app.instances.settings.interval.total_seconds(), 0.05)
            if self.instance is None:
                self.instance = self.app.instances.join("daemon")
            else:
                self.app.instances.beat(self.instance)
            # The spare holds a connection open while it waits (Database.checkpoint says why).
            self.app.registry.checkpoint()
            self.failed = False
        except Exception as exc:  # an uninitialised home, a locked registry: tried again next time
            if not self.failed:
                _log(self.home, f"the daemon could not register as an instance: {type(exc).__name__}: {exc}")
            self.failed = True
        finally:
            self._disconnect()
            self.next_at = time.monotonic() + self.interval

    def leave(self) -> None:
        if self.instance is not None:
            with contextlib.suppress(Exception):
                self.app.instances.leave(self.instance)
            self.instance = None
            self._disconnect()

    def _disconnect(self) -> None:
        if self.app is not None:
            with contextlib.suppress(Exception):
                self.app.close()


@dataclass
class Daemon:
    home: str
    idle_s: float
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    context: dict[str, str] = field(default_factory=lambda: process_of("self"))
    stamp: str = field(default_factory=code_stamp)
    stamp_checked: float = 0.0  # time.monotonic() of the last look at the code
    children: dict[int, _Child] = field(default_factory=dict)
    draining: bool = False
    sweep_s: float = 15.0
    sweeper: int | None = None  # the child looking at the live sandboxes, while it runs
    # Whether the last sweep left live sandboxes in the registry (None: not known since the last
    # command, which may have started one).
    registry_live: bool | None = None
    # The sandbox folders the last look found undone: a sweep is asked for each only once (a folder
    # with no sandbox behind it, or one the sweep cannot stop, forked a sweep every second).
    undone: frozenset[str] = frozenset()
    presence: _Presence | None = None  # the daemon as an instance of its node, once it serves
    spare: _Spare | None = None  # the child that takes the next request, forked while idle
    # A spare died waiting (killed, out of memory): the next is forked once a request has been
    # served, not at once — one that cannot live would be forked again and again, a core's worth.
    spare_lost: bool = False
    # The workspace folder the last command ran in, as its child reported it: the next spare
    # watches and measures it while it waits (quota.prepare).
    last_workspace: str | None = None

    def serve(self) -> int:
        path, lock_path = daemon_paths(self.home)
        # The home as check_owned takes it (a link to it, a folder of the user's private group):
        # client.c and entry.py serve through it only on the same rules.
        if not trusted_home(self.home):
            _log(self.home, "the home is another user's or open to others: no daemon")
            return 1
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if not ours(os.path.dirname(path), private=True):
            _log(self.home, "the home's run folder is another user's or open to others: no daemon")
            return 1
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another daemon serves this home
        self._warm(["warden.interfaces.cli.main", "warden.interfaces.cli.cmd_run", "warden.bootstrap"])
        from warden.bootstrap import warm_host
        from warden.core.names import name_regex
        from warden.interfaces.cli.main import build_parser, parse_command_line

        warm_host()
        build_parser(["run"])  # kept (main.py's _BUILT): each child parses with it, building none
        # Once here, not in every child: what argparse and a workspace name's check compile at
        # their first use (Python's own caches of regular expressions, then inherited).
        with contextlib.suppress(Exception):
            parse_command_line(["run", "name", "--", "true"])
        name_regex()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a dead daemon's socket (the lock says none lives)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old)
        # Each piece a client sends carries its sender's pid, stamped by the kernel.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        listener.listen(64)
        bound = os.stat(path).st_ino
        wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # Told to stop (a service manager's SIGTERM, a `kill -HUP` or `-INT` of a person's): it
        # takes no new client and ends once its children told theirs their status (it reaps them:
        # one that dies by a signal, it says so for it). SIGHUP ended it at once, SIGINT raised here.
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda *_: self._drain())
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ, "listener")
        sel.register(wake_r, selectors.EVENT_READ, "wake")
        self._held = (lock, wake_r, wake_w, listener.fileno(), sel.fileno())
        last = time.monotonic()
        next_sweep = last + self.sweep_s
        next_look = last + _UNDONE_LOOK_S
        self.presence = _Presence(self.home, self.environ)
        try:
            while not (self.draining and not self.children and self.sweeper is None):
                now = time.monotonic()
                live = self._live_sandboxes()
                if live:
                    last = now  # it stays while the home has live sandboxes: it looks after them
                    if now >= next_look:
                        # A mask undone on the host (held_mounts) is not left to the next sweep.
                        next_look = now + _UNDONE_LOOK_S
                        if not self._masks_hold():
                            next_sweep = now
                    if now >= next_sweep and self.sweeper is None:
                        self._sweep()
                        next_sweep = now + self.sweep_s
                timeout = None if self.children else max(last + self.idle_s - now, 0.0)
                if timeout == 0.0 and self.sweeper is None:
                    break  # idle
                if live or self.sweeper is not None:
                    timeout = max(min(timeout if timeout is not None else self.sweep_s, next_sweep - now,
                                      next_look - now if live else self.sweep_s), 0.05)
                if not self.draining and self.presence.due(now) == 0.0:
                    if not _still_bound(path, bound):
                        # Its socket gone or another's: the home was removed (`rm -rf`), so no
                        # client can reach this daemon. It ended only when idle (15 minutes).
                        self._drain()
                    if self.spare is not None and self._registry_left_under_spare():
                        self._end_spare(wait=True)
                        self.spare_lost = True  # the next is forked once a request is served: the home may be going
                    self.presence.beat()
                beat_in = max(self.presence.due(time.monotonic()), 0.05)
                timeout = beat_in if timeout is None else min(timeout, beat_in)
                # Before the wait (a daemon just started has one for its first request): while
                # idle, and after the beat that registers it (a spare acts for that instance).
                if self.draining:
                    self._end_spare()
                elif not self.children and self.sweeper is None:
                    self._fork_spare()  # while idle: its work takes no core from a command
                for key, _ in sel.select(timeout):
                    if key.data == "listener":
                        last = time.monotonic()
                        self._accept(listener, sel)
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            while os.read(wake_r, 512):
                                pass
                    else:
                        self._client_gone(key.data, sel)
                if self.draining and listener.fileno() != -1:
                    # No new client from now on: the next one starts a fresh daemon.
                    sel.unregister(listener)
                    listener.close()
                    with contextlib.suppress(OSError):
                        if os.stat(path).st_ino == bound:
                            os.unlink(path)
                self._reap(sel)
                if self.children:
                    last = time.monotonic()
        finally:
            self._end_spare()
            self.presence.leave()
            with contextlib.suppress(OSError):
                if listener.fileno() != -1 and os.stat(path).st_ino == bound:
                    os.unlink(path)
            with contextlib.suppress(OSError):
                listener.close()
        return 0

    def _drain(self) -> None:
        self.draining = True

    def _let_go(self) -> None:
        """In a child: none of the daemon's descriptors (its socket, lock, wake-up pipe, epoll)
        nor the other clients' connections and reports, nor the spare's channel, stay open in it."""
        signal.set_wakeup_fd(-1)
        spare = [self.spare.sock.fileno()] if self.spare is not None else []
        for fd in (*self._held, *(c.conn.fileno() for c in self.children.values()),
                   *(c.report for c in self.children.values()), *spare):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the home's live sandboxes ---------------------------------------------------------------
    def _live_sandboxes(self) -> bool:
        """Whether the home has live sandboxes: a folder `run/sbx_…` each, unless the last sweep
        found none in the registry (a folder a killed Warden left would keep the daemon, and its
        sweeps, going for good)."""
        if self.registry_live is False:
            return False
        try:
            return any(name.startswith("sbx_") for name in os.listdir(os.path.join(self.home, "run")))
        except OSError:
            return False

    def _masks_hold(self) -> bool:
        """Whether every live sandbox's mounts over names of the host's folders still hold (as
        its folder records them: no registry here), or were found undone at an earlier look."""
        from warden.adapters.sandbox.held_mounts import intact_in

        run = Path(self.home) / "run"
        try:
            names = [n for n in os.listdir(run) if n.startswith("sbx_")]
        except OSError:
            return True
        undone = frozenset(name for name in names if not intact_in(run / name))
        # Only a newly undone one calls for a sweep now: the sweep stops a sandbox it finds undone
        # and removes its folder, so one still there is a folder a killed Warden left (its pid gone)
        # or a sandbox the sweep already judged; the regular sweeps look at those.
        new, self.undone = undone - self.undone, undone
        return not new

    def _sweep(self) -> None:
        """In a child of its own (the daemon opens no registry): record what ended in the live
        sandboxes, audit it, and stop those that sit idle or may no longer run, as `warden
        serve` does while it runs (services/live.py `sweep`) — so a background process's
        outcome is in the audit log without anyone asking."""
        if self.sweeper is not None or self.draining:
            return
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                self._let_go()
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                os.setsid()
                from warden.bootstrap import bootstrap

                app = bootstrap(self.home, environ=self.environ)
                try:
                    app.live.sweep()
                    status = _SOME_LEFT if app.live.keep() else 0
                finally:
                    app.close()
            except BaseException as exc:
                _log(self.home, f"the live sandbox sweep failed: {type(exc).__name__}: {exc}")
            finally:
                os._exit(status)
        self.sweeper = pid

    # -- one request -------------------------------------------------------------------------
    def _accept(self, listener: socket.socket, sel: selectors.BaseSelector) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            peer, uid, _ = struct.unpack("3i", creds)
            if uid != os.getuid():
                conn.close()
                return
            # One deadline for the whole request: a client that trickles it holds up the others.
            senders: list[int] = []
            payload, fds = recv_frame(conn, max_fds=5, deadline=time.monotonic() + _REQUEST_S, senders=senders)
            # The client hands over a pidfd of itself: while it lives, its pid names no other
            # process, so its /proc read here is its own (not one that took its pid after it
            # left); and the kernel stamped the pid of the process that sent each piece.
            pidfd = fds[4] if len(fds) == 5 and _pidfd_of(fds[4]) == peer else -1
            if pidfd < 0:
                request, problem = None, "the request carried no pidfd of the process that connected"
            elif not senders or any(sender != peer for sender in senders):
                # Another process sent it (a child the connector made, or one it passed the
                # socket to): the one judged must be the one asking.
                request, problem = None, "the request came from another process than the one that connected"
            else:
                request, problem = self._problem(payload, fds, peer)
            if request is not None and not _alive(pidfd):
                request, problem = None, "the client left before it was judged"
            if request is None:
                _log(self.home, f"a client runs its command itself: {problem}")
                send_frame(conn, reply("fallback", problem))
                conn.close()
                return
            report_r, report_w = os.pipe2(os.O_CLOEXEC)
            pid = self._hand_to_spare(conn, request, fds, report_w)
            if pid is None:
                known = set(sys.modules)
                try:
                    pid = os.fork()
                except OSError:
                    # No process to be had (the user's limit): the client, answered by the close
                    # below, runs its command itself; the report pipe is not left open per request.
                    os.close(report_r)
                    os.close(report_w)
                    raise
                if pid == 0:
                    try:
                        os.close(report_r)
                        self._let_go()
                        self._child(conn, request, fds, report_w, known)
                    finally:
                        os._exit(1)  # a signal's exception escaped the child's last lines: never its way back here
            os.close(report_w)
            conn.settimeout(None)
            self.registry_live = None  # `run --detach` may start a live sandbox
            self.children[pid] = _Child(pid, conn, report_r)
            self.spare_lost = False
            sel.register(conn, selectors.EVENT_READ, self.children[pid])
        except (OSError, ValueError) as exc:
            _log(self.home, f"a request failed: {exc}")
            with contextlib.suppress(OSError):
                conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _problem(self, payload: bytes | None, fds: list[int], peer: int) -> tuple[_Request | None, str]:
        """The request, or None and why this daemon will not run it."""
        if payload is None or len(fds) != 5:
            return None, "a request carries a command line and five descriptors"
        try:
            argv, env, cwd = decode_request(payload)
        except ValueError as exc:
            return None, f"a malformed request ({exc})"
        # Only what the client itself would hand over: `warden run` on this home.
        if not is_daemon_run(argv) or home_of(argv, env) != self.home:
            return None, "only `warden run` on this daemon's home is served"
        if not self._proves_write(fds[3]):
            return None, "it showed no right to write in the home (its lock file, open for writing)"
        if _own(env) != _own(self.environ):
            changed = {k for k, _ in set(_own(env).items()) ^ set(_own(self.environ).items())}
            return None, f"its environment differs from the daemon's ({', '.join(sorted(changed)[:5])})"
        context = process_of(peer)
        why = _differs(context, self.context)
        if why is not None:
            return None, why
        if self._code_changed():
            self._drain()
            return None, "Warden's code changed since the daemon started"
        try:  # while its pidfd is held, the peer's pid is the client's own
            session = session_terminal(peer)
        except OSError:
            return None, "its session could not be read"
        return _Request(argv, env, cwd, context, session), ""

    def _not_ours(self, argv: list[str]) -> str | None:
        """In a child, in the client's environment and folder: what the CLI's own parser makes
        of the command line, unless it is `warden run` without a terminal on this daemon's home
        (the client's quick look at it, `is_daemon_run`, misses abbreviations such as `--ho`,
        and a relative `--home` is the client folder's)."""
        from warden.bootstrap import Home
        from warden.core.errors import WardenError
        from warden.interfaces.cli.main import parse_command_line

        try:
            args = parse_command_line(argv)
        except WardenError:
            return None  # a usage error: `main` says so, as it would in the client, and runs nothing
        handler = getattr(args, "handler", None)
        if getattr(handler, "__module__", "") != "warden.interfaces.cli.cmd_run" or getattr(args, "tty", False):
            return "only `warden run` without a terminal is served"
        # As `main` will use it, unnormalised: a `..` after a link is the link target's parent.
        if str(Home.locate(getattr(args, "home", None), os.environ).root) != self.home:
            return "only `warden run` on this daemon's home is served"
        return None

    def _code_changed(self) -> bool:
        """Whether Warden's code on disk is no longer the daemon's; looked at once a second at
        most (a walk of the package costs a few milliseconds of every command)."""
        now = time.monotonic()
        if now - self.stamp_checked < 1.0:
            return False
        self.stamp_checked = now
        return code_stamp() != self.stamp

    def _proves_write(self, fd: int) -> bool:
        """Whether `fd` is this home's lock file, opened for writing by the client."""
        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            given, ours_ = os.fstat(fd), os.stat(daemon_paths(self.home)[1])
        except OSError:
            return False
        return mode == os.O_RDWR and (given.st_dev, given.st_ino) == (ours_.st_dev, ours_.st_ino)

    # -- the spare --------------------------------------------------------------------------------
    def _fork_spare(self) -> None:
        """Fork the child that takes the next request (none while draining, or while one waits, or
        after one died waiting until a request is served)."""
        if self.spare is not None or self.draining or self.spare_lost:
            return
        ours_, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        known = set(sys.modules)
        instance = self.presence.instance if self.presence is not None else None
        try:
            pid = os.fork()
        except OSError:
            ours_.close()
            theirs.close()
            return  # each request is forked as it comes
        if pid == 0:
            try:
                ours_.close()
                self._let_go()
                self._wait_as_spare(theirs, known)
            finally:
                os._exit(1)
        theirs.close()
        # Never a wait on it: a spare that is not reading (still looking at cgroups, stopped)
        # would hold the daemon, its other clients and its heartbeat, in a send of a request
        # larger than the socket's buffer. Such a request is forked for, as without a spare.
        ours_.setblocking(False)
        self.spare = _Spare(pid, ours_, instance, len(known))

    def _end_spare(self, *, wait: bool = False) -> None:
        """Kill the waiting spare (reaped by `_reap` as any child the daemon no longer follows;
        `wait`: here, so that its hold on the registry is gone on return)."""
        spare, self.spare = self.spare, None
        if spare is not None:
            with contextlib.suppress(OSError):
                os.kill(spare.pid, signal.SIGKILL)
            spare.sock.close()
            if wait:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(spare.pid, 0)

    def _registry_left_under_spare(self) -> bool:
        """Whether the SQLite registry's write-ahead log is gone from the home while the spare
        waits connected to it (which keeps it there): the home is being removed, or a restore set
        it aside. The spare is then ended before the heartbeat connects, so that the beat's close
        is the last and removes the log it made, and no stray `warden.db-wal` (holding the beat's
        commit) is left to keep `rm -rf HOME` from removing the folder."""
        app = self.presence.app if self.presence is not None else None
        if app is None:  # the spare connects only with the daemon's App: it holds nothing
            return False
        from warden.adapters.store.db import sqlite_path

        try:
            path = sqlite_path(app.database_url, app.home.root)
        except Exception:  # settings it cannot read now: the beat says why
            return False
        return path is not None and not os.path.lexists(f"{path}-wal")

    def _hand_to_spare(self, conn: socket.socket, request: _Request, fds: list[int], report: int) -> int | None:
        """Give the judged request to the spare: its pid, or None when there is no spare fit for
        it (forked before the daemon registered, or imported what a child needed; dead; a request
        too large to pass on, or more than its socket holds at once), and the caller forks as before."""
        spare = self.spare
        if spare is None:
            return None
        instance = self.presence.instance if self.presence is not None else None
        if spare.instance is not instance or spare.modules != len(sys.modules):
            self._end_spare()
            return None
        try:
            head = json.dumps({"context": request.context, "session": request.session}).encode()
            payload = head + b"\0" + encode_request(request.argv, request.env, request.cwd)
            if len(payload) > MAX_FRAME:
                raise ValueError("too large for the spare")
            send_frame(spare.sock, payload, [conn.fileno(), *fds, report])
        except (OSError, ValueError):
            self._end_spare()
            return None
        self.spare = None  # the request's child now, followed as any other
        spare.sock.close()  # what it needs is in its socket's buffer
        return spare.pid

    def _wait_as_spare(self, sock: socket.socket, known: set[str]) -> NoReturn:
        """In the spare: make its memory its own, then wait for the daemon's request (its end
        closed, the daemon is gone or ended it: nothing to do) and serve it as `_child`."""
        for sig in (signal.SIGTERM, signal.SIGHUP):  # the daemon's own: it drains on them
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from warden.adapters import quota
        from warden.adapters.sandbox import cgroups
        from warden.services import later

        # What its run would do first, done before the client waits: a process's one look for
        # the cgroups of killed runs, its own copy of each page, the thread its disk quota is
        # watched from, its connection to the registry (the daemon's was closed after its last
        # beat; this one is opened here, after the fork).
        with contextlib.suppress(OSError):
            cgroups.sweep_orphans_once(cgroups.detect())
        _prefault()
        quota.ready_thread()
        later.ready()  # the thread its lease's renewal and its registration come due on
        if self.presence is not None and self.presence.app is not None:
            with contextlib.suppress(Exception):  # a registry it cannot open now: the run says why
                self.presence.app.connect_ahead()
        if self.last_workspace is not None:
            # The walks its run would start with, in the workspace the home's last command ran in
            # (most often the next one's too): the run then applies the events queued since.
            from warden.adapters import gitguard

            with contextlib.suppress(Exception):  # archived or removed since: the run says why
                quota.prepare(self.last_workspace)
                gitguard.scan_again(self.last_workspace)
            if self.presence is not None and self.presence.app is not None:
                with contextlib.suppress(Exception):
                    self.presence.app.rehearse_run(self.last_workspace)
        payload, fds = recv_frame(sock, max_fds=7)
        sock.close()
        if payload is None or len(fds) != 7:
            os._exit(0)
        head, _, body = payload.partition(b"\0")
        given = json.loads(head)
        argv, env, cwd = decode_request(body)
        request = _Request(argv, env, cwd, dict(given["context"]), str(given["session"]))
        conn = socket.socket(fileno=fds[0])
        self._child(conn, request, fds[1:6], fds[6], known)

    def _child(self, conn: socket.socket, request: _Request, fds: list[int], report: int,
               known: set[str]) -> NoReturn:
        """In a child (of the daemon's descriptors none left): serve one judged request."""
        status = 1
        told: int | None = None

        def tell(code: int) -> None:
            """The client's status, sent once: as soon as `main` has it (its state still to be
            closed), or at the end. This child then exits with it, whatever closing does."""
            nonlocal told
            if told is not None:
                return
            told = code
            # Done: no signal may now raise here (the daemon interrupts a child whose client has
            # gone, which a client does as soon as it has the status). Passed over by handlers,
            # process-wide: a mask is one thread's, and the kernel hands a signal the main thread
            # blocks to another (the lease's, the quota's), whose Python handler then still
            # raised in the main thread, past this child's last lines (its report to the daemon).
            for sig in _STOPPING:
                with contextlib.suppress(ValueError):  # told from another thread: main's own handlers
                    signal.signal(sig, _passed_over)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            _let_go_of_stdio()
            with contextlib.suppress(Exception):
                send_frame(conn, reply("status", code))

        try:
            conn.settimeout(None)
            argv, env, cwd = request.argv, request.env, request.cwd
            os.environ.clear()
            os.environ.update(env)
            # The client names its shell's session as its terminal (entry.py), in the `sid…` form
            # a chosen WARDEN_TERMINAL may not take (adapters/terminal_id.py): taken as it is when
            # it is the session the client really is in, so `warden run` without NAME finds the
            # terminal's current workspace here as it would in the client.
            if env.get("WARDEN_TERMINAL") == request.session:
                vouch_for_session(request.session)
            try:
                os.chdir(cwd)
            except OSError as exc:
                problem: str | None = f"its folder cannot be entered here ({exc.strerror})"
            else:
                problem = _take_on(request.context) or self._not_ours(argv)
            if problem is not None:  # nothing ran: the client runs it itself
                _log(self.home, f"a client runs its command itself: {problem}")
                send_frame(conn, reply("fallback", problem))
                os._exit(0)
            # The child says its pid itself, before anything runs: a client that has it knows a
            # command may have started (and never runs it again itself).
            send_frame(conn, reply("pid", os.getpid()))
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.setsid()
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            for fd in fds:
                os.close(fd)
            _fresh_stdio()
            sys.argv = ["warden", *argv]
            if self.presence is not None and self.presence.instance is not None:
                from warden.bootstrap import act_for

                act_for(self.presence.instance.id)  # the live sandboxes it starts are the daemon's
            from warden.adapters.store.db import leave_open_at_exit
            from warden.interfaces.cli.main import main

            leave_open_at_exit()  # this child ends by os._exit below
            from warden.adapters.sandbox.live import keep_no_spares

            # Its one command's cgroups serve no next one here, and it ends by os._exit, past
            # the atexit that removes what a process kept.
            keep_no_spares()
            status = main(argv, settled=tell)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            status = 130
        except BaseException:
            status = 1
        finally:
            tell(status)
            with contextlib.suppress(Exception):
                # First the workspace its run was watched in: "+FOLDER" for the next spare to
                # prepare, "-" for none (one too large to keep), nothing when it ran none.
                quota = sys.modules.get("warden.adapters.quota")
                watched = quota.last_watched() if quota is not None else None
                said = b""
                if watched is not None:
                    said = b"+" + os.fsencode(watched[0]) if watched[1] else b"-"
                new = "\n".join(sorted(set(sys.modules) - known))
                os.write(report, (said + b"\0" + new.encode())[:_MAX_REPORT])
            os._exit((status if told is None else told) & 0xFF)

    # -- children ending ---------------------------------------------------------------------
    def _client_gone(self, child: _Child, sel: selectors.BaseSelector) -> None:
        """The client's connection became readable: it closed (it was killed or interrupted
        without forwarding): the command is interrupted, as a local run's would be."""
        with contextlib.suppress(OSError):
            sel.unregister(child.conn)
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGINT)

    def _reap(self, sel: selectors.BaseSelector) -> None:
        while True:  # any child: a spare the daemon ended is reaped here too
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and pid == self.spare.pid:  # it died waiting
                self.spare.sock.close()
                self.spare = None
                self.spare_lost = True
                continue
            if pid == self.sweeper:
                self.sweeper = None
                code = os.waitstatus_to_exitcode(wait_status)
                if code in (0, _SOME_LEFT):
                    self.registry_live = code == _SOME_LEFT
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            if os.WIFSIGNALED(wait_status):
                with contextlib.suppress(OSError):
                    send_frame(child.conn, reply("status", 128 + os.WTERMSIG(wait_status)))
            with contextlib.suppress(OSError, KeyError, ValueError):
                sel.unregister(child.conn)
            child.conn.close()
            try:
                said = os.read(child.report, _MAX_REPORT)
            except OSError:
                said = b""
            os.close(child.report)
            watched, _, names = said.partition(b"\0")
            if watched == b"-" or (watched.startswith(b"+/") and len(watched) <= 4096):
                self.last_workspace = os.fsdecode(watched[1:]) or None
            self._warm(names.decode(errors="replace").split())

    def _warm(self, names: list[str]) -> None:
        """Import what a child needed, so the next child has it; never a module that would
        leave a thread behind (a fork copies only the thread that forks)."""
        import threading

        for name in names:
            if name in sys.modules or name == "__main__" or not name.isascii():
                continue
            try:
                importlib.import_module(name)
            except BaseException:
                sys.modules.pop(name, None)
            if threading.active_count() > 1:
                _log(self.home, f"importing {name} started a thread; the daemon ends")
                self._drain()
                return
        # What is loaded now is kept out of the collector's sight: a collection in a child would
        # otherwise walk (and so copy, page by page) every object it shares with the daemon.
        gc.freeze()


_MADV_POPULATE_WRITE = 23  # madvise(2), Linux 5.14


def _passed_over(_signum: int, _frame: object) -> None:
    """A stopping signal once a child told its client the status: nothing is left to stop."""


def _prefault() -> None:
    """Copy now every page this process shares with the daemon since the fork (madvise's
    MADV_POPULATE_WRITE, which writes nothing): the spare does while it waits what its Python
    would otherwise do a page fault at a time (each ~7 µs here) while the client waits. Only the
    pages present (/proc/self/pagemap): a mapping's untouched reserve stays unallocated. Nothing
    at all where the kernel or /proc cannot (the request then costs what it did)."""
    import ctypes

    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/maps") as handle:
            mappings = [line.split() for line in handle]
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, AttributeError, ValueError):
        return
    # One byte per page: the top byte of its pagemap entry, "1" when present (bit 63) and not
    # mapped by this process alone (bit 56): a page still shared with the daemon.
    shared = bytes(0x31 if byte & 0x81 == 0x80 else 0x30 for byte in range(256))
    try:
        for fields in mappings:
            if len(fields) < 2 or fields[1][1] != "w" or fields[1][3] != "p":
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if high - low > 1 << 30:
                continue  # a reserve, not the heap of a process of this size
            tops = os.pread(pagemap, (high - low) // page * 8, low // page * 8)[7::8].translate(shared)
            for run in re.finditer(b"1+", tops):
                size = (run.end() - run.start()) * page
                if madvise(low + run.start() * page, size, _MADV_POPULATE_WRITE) and ctypes.get_errno() == errno.EINVAL:
                    return  # a kernel before 5.14
    except (OSError, ValueError):
        return
    finally:
        os.close(pagemap)


def _pidfd_of(fd: int) -> int | None:
    """The pid a pidfd names, or None when `fd` is no pidfd."""
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[pidfd]":
            return None
        with open(f"/proc/self/fdinfo/{fd}") as handle:
            for line in handle:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return False
    return True


def _take_on(context: dict[str, str]) -> str | None:
    """In a child: the client's umask, resource limits and priority (a command inherits them
    as from a shell); why not, if one cannot be had (a hard limit above the daemon's)."""
    import resource

    try:
        os.umask(int(context["Umask"], 8) & 0o777)
        for key, value in context.items():
            if key.startswith("rlimit."):
                soft, hard = (resource.RLIM_INFINITY if v == "-1" else int(v) for v in value.split(","))
                resource.setrlimit(int(key.split(".", 1)[1]), (soft, hard))
        nice = int(context["nice"])
        if nice != os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (KeyError, ValueError, OSError) as exc:
        return f"its limits or priority cannot be taken on ({exc})"
    return None


def _fresh_stdio() -> None:
    """sys.stdin/stdout/stderr on the client's descriptors, buffered as Python buffers them at
    its start (line by line on a terminal)."""
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding, errors=errors)
    for fd, name, errs in ((1, "stdout", errors), (2, "stderr", "backslashreplace")):
        raw = io.FileIO(fd, "w", closefd=False)
        tty = os.isatty(fd)
        stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errs,
                                  line_buffering=tty or fd == 2, write_through=fd == 2)
        setattr(sys, name, stream)


def _let_go_of_stdio() -> None:
    """The client's stdin, stdout and stderr closed in this child (/dev/null in their place), its
    output written: what reads the client's output (`$(warden run …)`, a pipe) has its end as the
    client has its status, not once this child has closed the registry and exited (~5 ms more),
    and nothing this child might still write reaches a stream its client has left."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)


def _still_bound(path: str, inode: int) -> bool:
    """Whether `path` is still the socket this daemon bound (by its inode)."""
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _log(home: str, line: str) -> None:
    path = os.path.join(home, "run", "daemon.log")
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            if os.fstat(fd).st_size > _LOG_BYTES:
                os.ftruncate(fd, 0)
            os.write(fd, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {line}\n".encode(errors="replace"))
        finally:
            os.close(fd)


def main() -> None:
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m warden.interfaces.cli.daemon HOME (the warden client starts it)\n")
        raise SystemExit(2)
    home = os.path.abspath(sys.argv[1])
    os.chdir("/")
    try:
        idle = float(os.environ.get("WARDEN_DAEMON_IDLE", "900"))
    except ValueError:
        idle = 900.0
    try:
        sweep = float(os.environ.get("WARDEN_DAEMON_SWEEP", "15"))
    except ValueError:
        sweep = 15.0
    try:
        raise SystemExit(Daemon(home, max(idle, 0.1), sweep_s=max(sweep, 0.5)).serve())
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EACCES):
            import traceback

            _log(home, f"the daemon ended on an error: {exc}: " + " | ".join(
                line.strip() for line in traceback.format_tb(exc.__traceback__)[-3:]))
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
