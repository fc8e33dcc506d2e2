"""Run one command in bubblewrap with limits, a timeout, live output and an optional proxy.

Only the standard library and warden modules are imported here, so the same code runs
from a plain system interpreter (the unprivileged escape tests drive it that way).

How the process tree is contained:
- bwrap starts in a new session and process group; its child is in a new pid namespace,
  so when the command (the namespace's first process under bwrap's init) ends, the kernel
  kills whatever it left behind — no orphan outlives a run;
- `--die-with-parent` ties the sandbox to bwrap and bwrap to Warden: killing bwrap's
  process group on timeout (or Warden dying) takes the whole namespace down;
- the per-run cgroup is emptied with SIGKILL at the end in any case.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from warden.adapters.sandbox import cgroups
from warden.adapters.sandbox.execlimits import too_long_for_exec
from warden.adapters.sandbox.host import bwrap_path, open_beneath, python3_path
from warden.core import stops
from warden.core.bwrap_argv import PROXY_SOCKET, SandboxSpec, bwrap_environ, bwrap_options
from warden.core.errors import Unavailable
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy
from warden.core.runs import NetEvent, RunResult, Sink, Usage, usage_of

if TYPE_CHECKING:
    from warden.adapters.sandbox.proxy import FilteringProxy

__all__ = ["MISSING_BWRAP", "adopt_orphans", "run_sandboxed"]
MISSING_BWRAP = ("bubblewrap (bwrap) is not installed, so Warden cannot isolate commands and "
                 "will not run them: install it (apt-get install bubblewrap) and check `warden doctor`")
_MAX_CAPTURE = 64 * 1024 * 1024
_GIB = 1024**3


@cache
def _forwarder_source() -> str:
    return Path(__file__).with_name("forwarder.py").read_text()


def _pipe_with(data: bytes) -> int:
    """A pipe already holding `data` (small), returning the read end for bwrap."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    return read_fd


def _memfd_with(data: bytes) -> int:
    """An anonymous file holding `data`, read from the start by bwrap (no pipe-size limit)."""
    fd = os.memfd_create("warden-bwrap-args", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _rlimits(limits: Limits, cg: cgroups.Cgroup | None,
             support: cgroups.CgroupSupport) -> list[tuple[int, int, int]]:
    has_memory = cg is not None and support.memory is not None
    has_pids = cg is not None and support.pids is not None
    # The address-space limit is only a backstop: V8 reserves ~10 GiB of address space per
    # WebAssembly memory (guard regions) and touches little of it, so Node fails with "could
    # not allocate memory" under a tight RLIMIT_AS (Node's own fetch() compiles its HTTP parser
    # to wasm, so npm and any script that fetches die too). Without a memory cgroup the memory
    # limit is RLIMIT_DATA instead (setrlimit(2): private writable mappings, heap and anonymous
    # maps, counted when made writable), which a PROT_NONE reservation does not touch. What it
    # misses (shared mappings) stays under the backstop; `warden doctor` says so.
    address_space = max(limits.memory * 4, limits.memory + 32 * _GIB)
    wanted = [
        (resource.RLIMIT_AS, address_space, address_space),
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),  # SIGXCPU, then SIGKILL
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_size, limits.file_size),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if not has_memory:
        wanted.append((resource.RLIMIT_DATA, limits.memory, limits.memory))
    if not has_pids:
        wanted.append((resource.RLIMIT_NPROC, limits.pids, limits.pids))
    result = []
    for which, soft, hard in wanted:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise it
            hard = min(hard, current_hard)
            soft = min(soft, hard)
        result.append((which, soft, hard))
    return result


def run_sandboxed(spec: SandboxSpec, limits: Limits, *, stdin: bytes | int | None = None,
                  on_stdout: Sink | None = None, on_stderr: Sink | None = None,
                  capture: bool = True, max_capture: int = _MAX_CAPTURE,
                  network: NetworkPolicy | None = None,
                  on_net_event: Callable[[NetEvent], None] | None = None,
                  on_started: Callable[[Callable[[], None]], None] | None = None,
                  terminal: int | None = None) -> RunResult:
    """Run `spec.command` in the sandbox described by `spec` within `limits`.

    `on_started` is called once the command runs with a function that kills its whole tree
    (from any thread, until the run ends): the disk-quota watcher uses it. `terminal`: the slave
    of a pseudo-terminal to be the command's stdin, stdout, stderr and controlling terminal
    (terminal.py); its output then reaches the master alone."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise Unavailable(MISSING_BWRAP, rule="sandbox.bwrap_missing")
    held = _Held()
    support = cgroups.detect()
    try:
        spec = _with_seccomp(spec, held)
        spec = _with_data_files(spec, held)
        spec = _with_pinned_sources(spec, held)
        # Descriptors the caller opened (and owns) are handed to bwrap as they are.
        borrowed = [fd for _, fd in spec.bind_fds if fd not in held.fds]
        if spec.network == "proxy":
            spec = _with_proxy(spec, network or NetworkPolicy(), on_net_event, held)
        if terminal is not None:
            from warden.adapters.sandbox.terminal import on_terminal

            spec, stdin = replace(spec, command=on_terminal(spec.command)), terminal
        control = _Control.open(held)
        # The options travel in a memfd (`--args`), never on bwrap's command line: argv is
        # world-readable in /proc (host paths, `--setenv` values) on the host and, through
        # bwrap's pid 1, inside the sandbox. Only the bot's own command stays visible.
        options_fd = held.keep(_memfd_with(b"\0".join(os.fsencode(o) for o in bwrap_options(spec)) + b"\0"))
        # --info-fd reports the sandbox's pid once it is set up (and, unlike
        # --json-status-fd, is closed before the command starts); --block-fd holds the
        # command until the limits and the cgroup are applied to that pid. This keeps
        # preexec_fn out of Popen, so it can use vfork (about 2 ms less per run).
        argv = [bwrap, "--args", str(options_fd), "--info-fd", str(control.info_write), "--block-fd",
                str(control.block_read), "--", *spec.command]
        too_long = too_long_for_exec(argv, bwrap_environ(spec))  # before a cgroup is made for nothing
        if too_long is not None:
            raise too_long
        held.cg = _run_cgroup(support, limits, held.notes)
        output = _Output(on_stdout, on_stderr, capture, max_capture)
        return _spawn_and_wait(argv, spec, limits, stdin, output, held, control, borrowed, support,
                               on_started=on_started, terminal=terminal is not None)
    finally:
        held.close()


@dataclass
class _Held:
    """What one run holds until it ends: descriptors for bwrap, its cgroup, the network proxy."""

    fds: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be set up, and was done without
    seccomp: bool = False
    cg: cgroups.Cgroup | None = None
    proxy: FilteringProxy | None = None
    net_dir: str | None = None

    def keep(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def close_handed(self, keep: tuple[int, ...]) -> None:
        """Close our copies of the fds bwrap now has (but `keep`), so EOFs arrive when it is done."""
        for fd in [fd for fd in self.fds if fd not in keep]:
            os.close(fd)
            self.fds.remove(fd)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.cg is not None:
            self.cg.close()
        if self.proxy is not None:
            self.proxy.stop()
        if self.net_dir is not None:
            import shutil

            shutil.rmtree(self.net_dir, ignore_errors=True)


@dataclass(frozen=True)
class _Control:
    """bwrap's --info-fd pipe (it reports the sandbox's pid) and --block-fd pipe (we say "go")."""

    info_read: int
    info_write: int
    block_read: int
    block_write: int

    @classmethod
    def open(cls, held: _Held) -> _Control:
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        for fd in (info_read, info_write, block_read, block_write):
            held.keep(fd)
        return cls(info_read, info_write, block_read, block_write)

    @property
    def ours(self) -> tuple[int, int]:
        """The ends Warden keeps (the others are bwrap's)."""
        return (self.info_read, self.block_write)


def _with_seccomp(spec: SandboxSpec, held: _Held) -> SandboxSpec:
    try:
        from warden.adapters.sandbox.seccomp import filter_bpf

        seccomp_fd = held.keep(_pipe_with(filter_bpf()))
    except Exception as exc:  # libseccomp missing: run, but say so (doctor reports it)
        held.notes.append(f"seccomp unavailable: {exc}")
        return spec
    held.seccomp = True
    return replace(spec, seccomp_fd=seccomp_fd)


def _with_data_files(spec: SandboxSpec, held: _Held, extra: Sequence[tuple[str, bytes]] = ()) -> SandboxSpec:
    """The synthesized /etc files, and `extra` (path, content) ones, as read-only files of the sandbox."""
    from warden.adapters.sandbox.host import data_files

    if spec.keep_zones:
        from warden.adapters.sandbox.landlock import LAUNCHER_PATH, launcher_source

        extra = [*extra, (LAUNCHER_PATH, launcher_source())]
    data = [(held.keep(_pipe_with(content) if len(content) < 16384 else _memfd_with(content)), dest)
            for dest, content in [*data_files(os.getuid(), os.getgid(), spec.workspace), *extra]]
    return replace(spec, data_files=tuple(data))


def _with_pinned_sources(spec: SandboxSpec, held: _Held) -> SandboxSpec:
    """Every mount source by descriptor. Sources outside the workspace come already open (the
    caller judged them by inode and owns those fds); those inside are opened here beneath the
    workspace, no link followed."""
    pinned_sources = list(spec.bind_fds)
    given = {path for path, _ in pinned_sources}
    for path in spec.workspace_sources():
        if path in given:
            continue
        pinned_sources.append((path, held.keep(open_beneath(spec.workspace, path))))
        given.add(path)
    for path in spec.pinned:
        if path not in given:  # pins in an allowed rw tree outside the workspace
            from warden.adapters.sandbox.mountsrc import open_nofollow

            pinned_sources.append((path, held.keep(open_nofollow(path))))
    return replace(spec, bind_fds=tuple(pinned_sources))


def _with_proxy(spec: SandboxSpec, network: NetworkPolicy, on_net_event: Callable[[NetEvent], None] | None,
                held: _Held) -> SandboxSpec:
    """The filtering proxy started on a socket the sandbox sees, and the command wrapped in the
    in-sandbox forwarder that relays to it."""
    python = python3_path()
    if python is None:
        raise Unavailable("the network needs a system python3 (/usr/bin/python3) for the "
                          "in-sandbox relay: apt-get install python3-minimal", rule="sandbox.no_python3")
    import tempfile

    from warden.adapters.sandbox.proxy import FilteringProxy

    held.net_dir = tempfile.mkdtemp(prefix="warden-net-")
    socket_path = os.path.join(held.net_dir, "proxy.sock")
    held.proxy = FilteringProxy(network, socket_path, on_event=on_net_event)
    held.proxy.start()
    return replace(spec, proxy_socket=socket_path, command=(
        python, "-I", "-S", "-c", _forwarder_source(), PROXY_SOCKET, "--", *spec.command))


def _run_cgroup(support: cgroups.CgroupSupport, limits: Limits, notes: list[str]) -> cgroups.Cgroup | None:
    group = None
    if support.memory or support.pids:
        try:
            group = cgroups.create(support, memory=limits.memory, pids=limits.pids)
        except OSError as exc:
            notes.append(f"cgroup not usable ({exc}); limits by rlimit")
    check_process_limit(group, support, notes)
    return group


def check_process_limit(group: cgroups.Cgroup | None, support: cgroups.CgroupSupport, notes: list[str]) -> None:
    """Refuse a command whose process limit nothing would hold. RLIMIT_NPROC counts the
    processes of a real user id and the kernel never applies it to uid 0, so when Warden runs as
    root only a pids cgroup stops a fork bomb; without one the command does not start."""
    if (group is not None and support.pids is not None) or os.getuid() != 0:
        return
    why = "; ".join(notes[-1:] + list(support.notes[:1])) or "no pids cgroup"
    if group is not None:
        group.close()
    raise Unavailable(f"the process limit cannot be enforced: Warden runs as root and has no pids cgroup "
                      f"for this command ({why}); see `warden doctor` (cgroups)", rule="sandbox.pids_unenforced")


@dataclass
class _Output:
    """The command's output as it arrives: passed to the sinks, kept up to `max_capture` bytes
    per stream when captured, and the end of stderr always (bwrap's own last words)."""

    on_stdout: Sink | None
    on_stderr: Sink | None
    capture: bool
    max_capture: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    stderr_tail: bytearray = field(default_factory=bytearray)
    truncated: bool = False

    def add(self, chunk: bytes, *, is_stderr: bool) -> None:
        sink = self.on_stderr if is_stderr else self.on_stdout
        if sink is not None:
            sink(chunk)
        buffer = self.stderr if is_stderr else self.stdout
        if is_stderr:
            # bwrap's own last words (a failed execvp or mount) decide the status, with or
            # without capture.
            self.stderr_tail += chunk
            del self.stderr_tail[:-_ERR_TAIL]
        if self.capture:
            room = self.max_capture - len(buffer)
            if room < len(chunk):
                self.truncated = True
            buffer += chunk[:max(room, 0)]


@dataclass
class _Sandbox:
    """One started sandbox: bwrap (its process group holds the whole tree) and its cgroup."""

    proc: subprocess.Popen[bytes]
    cg: cgroups.Cgroup | None
    started: float
    child: int = 0  # the sandbox's pid 1 (bwrap's init), once bwrap reported it
    born_in: bool = False  # bwrap was started from inside its cgroups (Cgroup.entered)

    def kill(self) -> None:
        _kill_tree(self.proc, self.cg)

    def stop(self) -> None:
        """Kill the tree from any thread, but never a reaped pid's group."""
        if self.proc.returncode is None:
            self.kill()

    def read_stderr(self) -> bytes:
        return self.proc.stderr.read() if self.proc.stderr is not None else b""

    def close_streams(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr, self.proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _spawn_and_wait(argv: list[str], spec: SandboxSpec, limits: Limits, stdin: bytes | int | None,
                    output: _Output, held: _Held, control: _Control, borrowed: list[int],
                    support: cgroups.CgroupSupport, *,
                    on_started: Callable[[Callable[[], None]], None] | None = None,
                    terminal: bool = False) -> RunResult:
    """Start bwrap, let the command go once its limits are applied, and follow it to its end."""
    sandbox = _spawn(argv, spec, stdin, held, control, borrowed, terminal=terminal)
    try:
        sandbox.child = _release(sandbox, control, limits, support)
    except BaseException:
        sandbox.kill()
        sandbox.proc.wait()
        sandbox.close_streams()
        raise
    if on_started is not None:
        on_started(sandbox.stop)
    try:
        rc, timed_out = _follow(sandbox, stdin, output, sandbox.started + limits.timeout_s)
    except BaseException:
        sandbox.kill()
        sandbox.proc.wait()
        _reap_init(sandbox.child)
        raise
    finally:
        sandbox.close_streams()
    duration = time.monotonic() - sandbox.started
    reaped = _reap_init(sandbox.child)
    code, sig = _status(rc, timed_out, bytes(output.stderr_tail))
    return RunResult(
        code, output.stdout.decode("utf-8", "replace"), output.stderr.decode("utf-8", "replace"), duration,
        timed_out, sig, oom_killed=sandbox.cg.oom_killed() if sandbox.cg is not None else False,
        limits_via=("cgroup " + support.mode) if sandbox.cg is not None else "rlimit", seccomp=held.seccomp,
        net_events=tuple(held.proxy.events) if held.proxy is not None else (),
        net_events_dropped=held.proxy.dropped if held.proxy is not None else 0, truncated=output.truncated,
        notes=tuple(held.notes), stderr_tail=bytes(output.stderr_tail).decode("utf-8", "replace"),
        usage=_usage(sandbox.cg, reaped))


def _usage(cg: cgroups.Cgroup | None, reaped: resource.struct_rusage | None) -> Usage | None:
    """What the run's cgroups measured (the whole tree) where it had them, else what its pid 1
    and all it reaped used (wait4): CPU of the whole reaped tree, memory of its largest process."""
    cpu = reaped.ru_utime + reaped.ru_stime if reaped is not None else None
    maxrss = reaped.ru_maxrss if reaped is not None else None
    if cg is None:
        return usage_of(cpu_s=cpu, maxrss_kib=maxrss)
    return usage_of(cpu_s=cpu, maxrss_kib=maxrss, cgroup_cpu_s=cg.cpu_seconds(), cgroup_peak=cg.memory_peak())


_PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
_adopting = False


def adopt_orphans() -> bool:
    """Make this process the one that inherits the orphans of its descendants (prctl(2)
    PR_SET_CHILD_SUBREAPER), so a run can wait4 its sandbox's pid 1 and say what it used.

    bwrap reports its command's status and exits without waiting for that pid 1 (its init, which
    reaped the command), so wait4 on bwrap says nothing of the command; once adopted, the init is
    ours to reap, with the rusage of all it reaped. Only for a process that lives for one command
    (`warden run`): orphans nobody waits for stay zombies until it exits, which a long-lived
    server must not collect (there, runs are measured in live sandboxes and cgroups)."""
    global _adopting
    if not _adopting:
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            _adopting = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _adopting


def _reap_init(child: int) -> resource.struct_rusage | None:
    """Reap the sandbox's pid 1 after bwrap ended, when this process adopted it (adopt_orphans):
    its rusage covers the command and everything the init reaped. bwrap's --die-with-parent
    kills it as bwrap goes, so it is a zombie (or about to be) by now; None when not ours."""
    if child <= 0 or not _adopting:
        return None
    deadline, pause = time.monotonic() + 2.0, 0.0002
    while True:
        try:
            pid, _, used = os.wait4(child, os.WNOHANG)
        except ChildProcessError:  # not reparented here (another subreaper is nearer)
            return None
        if pid == child:
            return used
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


# Popen's restore_signals puts these back to their defaults in the child itself.
_POPEN_RESTORES = frozenset({signal.SIGPIPE, signal.SIGXFSZ})


def _signal_reset() -> Callable[[], None] | None:
    """What makes the sandbox's command start with every signal at its default and none
    blocked, as after a login shell, beyond what Popen restores; None when nothing is to undo.

    An ignored signal stays ignored across exec, into bwrap and the command: a shell starts a
    background job (`warden serve &`, a script's `warden run … &`) with SIGINT and SIGQUIT
    ignored, nohup ignores SIGHUP, and a command then could not be interrupted (Ctrl-C in
    `warden shell`, `kill -INT` of a dev server). Only then does Popen get this step (it costs
    the vfork that spawning otherwise uses, about 2 ms)."""
    ignored = [sig for sig in signal.valid_signals()
               if sig not in _POPEN_RESTORES and signal.getsignal(sig) == signal.SIG_IGN]
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    if not ignored and not blocked:
        return None

    def reset() -> None:  # in the child, between fork and exec
        for sig in ignored:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())

    return reset


def _spawn(argv: list[str], spec: SandboxSpec, stdin: bytes | int | None, held: _Held, control: _Control,
           borrowed: list[int], *, terminal: bool = False) -> _Sandbox:
    """bwrap started in a session of its own, in the workspace folder, holding the fds it needs
    (`terminal`: `stdin` is a pseudo-terminal, the command's stdout too)."""
    stdin_arg: int = subprocess.DEVNULL if stdin is None else subprocess.PIPE if isinstance(stdin, bytes) else stdin
    started = time.monotonic()
    environ = bwrap_environ(spec)
    # A person's stop (SIGTERM, SIGHUP) that comes while bwrap starts is raised once this holds
    # it (below): raised inside Popen, past the fork, it left a bwrap nobody followed or ended.
    starting = stops.Whole()
    born_in = held.cg.entered() if held.cg is not None else contextlib.nullcontext(False)
    proc: subprocess.Popen[bytes] | None = None
    try:
        with starting, born_in as entered:
            proc = subprocess.Popen(
                argv, stdin=stdin_arg, stdout=stdin_arg if terminal else subprocess.PIPE, stderr=subprocess.PIPE,
                env=environ, close_fds=True, start_new_session=True, preexec_fn=_signal_reset(),
                # bwrap's working folder marks whose sandbox it is (adapters/processes finds a
                # workspace's processes by it); the command's own is set by --chdir.
                cwd=spec.workspace,
                pass_fds=(*(fd for fd in held.fds if fd not in control.ours), *borrowed))
    except BaseException as exc:
        if proc is not None:
            # Started, but this thread could not come back from its cgroups: ended here, or it
            # would find --block-fd closed as the run unwinds and run without its limits.
            _kill_tree(proc, held.cg)
            proc.wait()
            raise
        if isinstance(exc, OSError) and exc.errno == errno.E2BIG:  # a limit too_long_for_exec does not know
            raise too_long_for_exec(argv, environ, always=True) or exc from None
        raise
    try:
        starting.raise_held()
        if held.cg is not None and not entered:
            # Joining a v1 cgroup waits for an RCU grace period (the kernel's cgroup_threadgroup_rwsem),
            # a few ms when no migration happened lately, and holds bwrap meanwhile. Moved now, the
            # child's move after the handshake finds it warm.
            with contextlib.suppress(OSError):
                held.cg.add(proc.pid)
        held.close_handed(keep=control.ours)
    except BaseException:
        # A signal's exception (Ctrl-C, SIGTERM: the CLI raises them) before the caller follows
        # this bwrap: ended here, or its sandbox, finding --block-fd closed as the run unwinds,
        # would start the command without its limits (or, its bwrap parent gone, wait forever).
        _kill_tree(proc, held.cg)
        proc.wait()
        raise
    return _Sandbox(proc, held.cg, started, born_in=entered)


def _release(sandbox: _Sandbox, control: _Control, limits: Limits, support: cgroups.CgroupSupport) -> int:
    """Once bwrap reports the sandbox's pid: its rlimits, its cgroup, then "go" on --block-fd;
    that pid (the sandbox's init)."""
    child = _read_info(control.info_read).get("child-pid")
    if not isinstance(child, int):
        err = sandbox.read_stderr()
        sandbox.proc.wait()
        raise _setup_failed(err, sandbox.proc.returncode)
    try:
        for which, soft, hard in _rlimits(limits, sandbox.cg, support):
            resource.prlimit(child, which, (soft, hard))
        # Born in them with bwrap, it is checked there rather than moved (a move takes the lock
        # `Cgroup.entered` spares); nothing of the sandbox runs yet to have left them.
        if sandbox.cg is not None and not (sandbox.born_in and sandbox.cg.holds(child)):
            sandbox.cg.add(child)
        os.write(control.block_write, b"go")
    except (ProcessLookupError, BrokenPipeError):
        # The sandbox died while being set up (a mount failed after the pid was reported):
        # the limits found no process, or nobody is left to read "go". bwrap says why.
        err = sandbox.read_stderr()
        sandbox.proc.wait()
        raise _setup_failed(err, sandbox.proc.returncode) from None
    return child


def _follow(sandbox: _Sandbox, stdin: bytes | int | None, output: _Output, deadline: float) -> tuple[int, bool]:
    """Feed stdin and read the output until both streams close or the deadline passes (then the
    tree is killed and what is left drained briefly); the return code and whether it timed out."""
    proc = sandbox.proc
    assert proc.stderr is not None  # stdout is None on a terminal (the caller reads its master)
    stderr_fd = proc.stderr.fileno()
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for stream in (s for s in (proc.stdout, proc.stderr) if s is not None):
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), selectors.EVENT_READ)
        pending = _start_stdin(proc, stdin, sel)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not timed_out:
                timed_out = True
                sandbox.kill()
                deadline = time.monotonic() + 2.0  # drain what is left, briefly
                continue
            if remaining <= 0:
                break
            for key, _ in sel.select(remaining):
                fileno = int(key.fd)
                if proc.stdin is not None and pending and fileno == proc.stdin.fileno():
                    pending = _feed(proc, pending, sel)
                    continue
                try:
                    chunk = os.read(fileno, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fileno)
                    continue
                output.add(chunk, is_stderr=fileno == stderr_fd)
    remaining = max(deadline - time.monotonic(), 0.0)
    try:
        return proc.wait(timeout=remaining if not timed_out else 5), timed_out
    except subprocess.TimeoutExpired:
        sandbox.kill()
        return proc.wait(), True


def _start_stdin(proc: subprocess.Popen[bytes], stdin: bytes | int | None, sel: selectors.BaseSelector) -> bytes:
    """The bytes still to write to the command (watched for room in the pipe); an empty
    input closes its stdin at once."""
    if not isinstance(stdin, bytes) or proc.stdin is None:
        return b""
    if stdin:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    return stdin


def _feed(proc: subprocess.Popen[bytes], pending: bytes, sel: selectors.BaseSelector) -> bytes:
    """Write what fits of `pending` to the command's stdin; what is left (closed when done, or
    when the command stopped reading)."""
    assert proc.stdin is not None
    fileno = proc.stdin.fileno()
    try:
        pending = pending[os.write(fileno, pending[:65536]):]
    except BrokenPipeError:
        pending = b""
    except BlockingIOError:
        pass
    if not pending:
        sel.unregister(fileno)
        proc.stdin.close()
    return pending


def _status(rc: int, timed_out: bool, err_tail: bytes) -> tuple[int, int | None]:
    """The status as a shell would report it, and the signal that ended the command, if one did."""
    last = err_tail.rstrip().rsplit(b"\n", 1)[-1]
    if rc == 1 and not timed_out and last.startswith(b"bwrap: execvp "):
        # The program could not start: a shell's 127 (not found) or 126 (found, but it cannot
        # run: not executable, a loop of links, busy...), as a live sandbox's launcher and
        # forked commands say it (supervisor.py, rlimit_exec.c): the same status in either.
        rc = 127 if last.endswith((b": No such file or directory", b": Not a directory")) else 126
    elif rc == 1 and not timed_out and last.startswith(b"bwrap: "):
        # bwrap's own failure while mounting (after the pid was reported): not the command's
        # status. A command could print this line itself; it would only refuse itself.
        raise _setup_failed(err_tail, rc)
    if timed_out:
        return 124, None
    if rc < 0:
        return 128 - rc, -rc
    # bwrap reports a command killed by signal N as 128+N, the way a shell does.
    return rc, rc - 128 if 128 < rc <= 128 + 64 else None


_ERR_TAIL = 4096  # enough of stderr's end for bwrap's one-line reports


def _setup_failed(err: bytes, rc: int | None) -> Unavailable:
    lines = err.decode("utf-8", "replace").strip().splitlines()
    reason = lines[-1] if lines else f"bwrap exited with {rc}"
    return Unavailable(f"the sandbox could not be set up ({reason}); run `warden doctor` to see "
                       "what this machine is missing", rule="sandbox.setup_failed")


def _read_info(fd: int) -> dict[str, object]:
    """bwrap's --info-fd document; it holds "child-pid" once the sandbox is set up."""
    data = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 65536):
            data += chunk
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _kill_tree(proc: subprocess.Popen[bytes], cg: cgroups.Cgroup | None) -> None:
    """SIGKILL bwrap's process group (the sandbox dies with it) and everything in the cgroup."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cg is not None:
        cg.kill()
