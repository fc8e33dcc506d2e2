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
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from warden.adapters.sandbox import cgroups
from warden.adapters.sandbox.execlimits import too_long_for_exec
from warden.adapters.sandbox.host import bwrap_path, python3_path
from warden.core.bwrap_argv import PROXY_SOCKET, SandboxSpec, bwrap_environ, bwrap_options
from warden.core.errors import Denied, Unavailable
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy

__all__ = ["MISSING_BWRAP", "RunOutcome", "Sink", "run_sandboxed"]

Sink = Callable[[bytes], None]
MISSING_BWRAP = ("bubblewrap (bwrap) is not installed, so Warden cannot isolate commands and "
                 "will not run them: install it (apt-get install bubblewrap) and check `warden doctor`")
_MAX_CAPTURE = 64 * 1024 * 1024
_GIB = 1024**3


@dataclass(frozen=True)
class RunOutcome:
    """What happened: the status as a shell would report it, output and how limits applied."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool = False
    signal: int | None = None
    oom_killed: bool = False
    limits_via: str = "rlimit"
    seccomp: bool = False
    net_events: tuple[object, ...] = ()
    truncated: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The end of stderr, kept whether or not output was captured: what failed, in its own words.
    stderr_tail: bytes = b""


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


def _open_beneath(workspace: str, path: str) -> int:
    """An O_PATH descriptor of `path` inside `workspace`, no component followed if a link.

    Raises Denied for a link and Unavailable when the path changed since it was checked.
    """
    parts = os.path.relpath(path, workspace).split("/")
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            if part in ("", ".", ".."):
                raise Denied(f"{path} is not inside {workspace}", rule="sandbox.protected_symlink")
            try:
                nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise Unavailable(f"{path} changed while the sandbox was being set up ({exc.strerror}); "
                                  "run the command again", rule="sandbox.setup_raced") from None
            os.close(fd)
            fd = nxt
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode) or (index < len(parts) - 1 and not stat.S_ISDIR(mode)):
                raise Denied(f"{path} became a symbolic link; Warden mounts only real files and "
                             "folders of the workspace", rule="sandbox.protected_symlink")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _rlimits(limits: Limits, cg: cgroups.Cgroup | None,
             support: cgroups.CgroupSupport) -> list[tuple[int, int, int]]:
    has_memory = cg is not None and support.memory is not None
    has_pids = cg is not None and support.pids is not None
    # With a memory cgroup the address-space limit is only a backstop: V8 reserves ~10 GiB of
    # address space per WebAssembly memory (guard regions) and touches little of it, so Node
    # fails with "Cannot allocate Wasm memory" under a tight RLIMIT_AS. Without a cgroup the
    # address space is the memory limit.
    address_space = max(limits.memory * 4, limits.memory + 32 * _GIB) if has_memory else limits.memory
    wanted = [
        (resource.RLIMIT_AS, address_space, address_space),
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),  # SIGXCPU, then SIGKILL
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_size, limits.file_size),
        (resource.RLIMIT_CORE, 0, 0),
    ]
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
                  on_net_event: Callable[[object], None] | None = None,
                  on_started: Callable[[Callable[[], None]], None] | None = None) -> RunOutcome:
    """Run `spec.command` in the sandbox described by `spec` within `limits`.

    `on_started` is called once the command runs with a function that kills its whole tree
    (from any thread, until the run ends): the disk-quota watcher uses it."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise Unavailable(MISSING_BWRAP, rule="sandbox.bwrap_missing")
    fds: list[int] = []
    notes: list[str] = []
    proxy = None
    net_dir: str | None = None
    cg: cgroups.Cgroup | None = None
    support = cgroups.detect()
    try:
        seccomp_ok = True
        try:
            from warden.adapters.sandbox.seccomp import filter_bpf

            seccomp_fd = _pipe_with(filter_bpf())
            fds.append(seccomp_fd)
            spec = replace(spec, seccomp_fd=seccomp_fd)
        except Exception as exc:  # libseccomp missing: run, but say so (doctor reports it)
            seccomp_ok = False
            notes.append(f"seccomp unavailable: {exc}")
        data = []
        from warden.adapters.sandbox.host import data_files

        for dest, content in data_files(os.getuid(), os.getgid(), spec.workspace):
            fd = _pipe_with(content)
            fds.append(fd)
            data.append((fd, dest))
        spec = replace(spec, data_files=tuple(data))
        # Sources outside the workspace come already open (the caller judged them by inode and
        # owns those fds); those inside are opened here beneath the workspace, no link followed.
        pinned_sources = list(spec.bind_fds)
        given = {path for path, _ in pinned_sources}
        for path in spec.workspace_sources():
            if path in given:
                continue
            fd = _open_beneath(spec.workspace, path)
            fds.append(fd)
            pinned_sources.append((path, fd))
            given.add(path)
        for path in spec.pinned:
            if path not in given:  # pins in an allowed rw tree outside the workspace
                from warden.adapters.sandbox.mountsrc import open_nofollow

                fd = open_nofollow(path)
                fds.append(fd)
                pinned_sources.append((path, fd))
        spec = replace(spec, bind_fds=tuple(pinned_sources))
        handed = [fd for _, fd in spec.bind_fds if fd not in fds]
        if spec.network == "proxy":
            python = python3_path()
            if python is None:
                raise Unavailable("the network needs a system python3 (/usr/bin/python3) for the "
                                  "in-sandbox relay: apt-get install python3-minimal",
                                  rule="sandbox.no_python3")
            import tempfile

            from warden.adapters.sandbox.proxy import FilteringProxy

            net_dir = tempfile.mkdtemp(prefix="warden-net-")
            socket_path = os.path.join(net_dir, "proxy.sock")
            proxy = FilteringProxy(network or NetworkPolicy(), socket_path, on_event=on_net_event)
            proxy.start()
            spec = replace(spec, proxy_socket=socket_path, command=(
                python, "-I", "-S", "-c", _forwarder_source(), PROXY_SOCKET, "--", *spec.command))
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        fds += [info_read, info_write, block_read, block_write]
        # The options travel in a memfd (`--args`), never on bwrap's command line: argv is
        # world-readable in /proc (host paths, `--setenv` values) on the host and, through
        # bwrap's pid 1, inside the sandbox. Only the bot's own command stays visible.
        options_fd = _memfd_with(b"\0".join(os.fsencode(o) for o in bwrap_options(spec)) + b"\0")
        fds.append(options_fd)
        # --info-fd reports the sandbox's pid once it is set up (and, unlike
        # --json-status-fd, is closed before the command starts); --block-fd holds the
        # command until the limits and the cgroup are applied to that pid. This keeps
        # preexec_fn out of Popen, so it can use vfork (about 2 ms less per run).
        argv = [bwrap, "--args", str(options_fd), "--info-fd", str(info_write), "--block-fd",
                str(block_read), "--", *spec.command]
        too_long = too_long_for_exec(argv, bwrap_environ(spec))  # before a cgroup is made for nothing
        if too_long is not None:
            raise too_long
        if support.memory or support.pids:
            try:
                cg = cgroups.create(support, memory=limits.memory, pids=limits.pids)
            except OSError as exc:
                notes.append(f"cgroup not usable ({exc}); limits by rlimit")
                cg = None
        return _spawn_and_wait(argv, spec, limits, stdin, on_stdout, on_stderr, capture,
                               max_capture, fds, (info_read, info_write, block_read, block_write),
                               cg, support, seccomp_ok, proxy, notes, handed, on_started=on_started)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if cg is not None:
            cg.close()
        if proxy is not None:
            proxy.stop()
        if net_dir is not None:
            import shutil

            shutil.rmtree(net_dir, ignore_errors=True)


def _spawn_and_wait(argv: list[str], spec: SandboxSpec, limits: Limits, stdin: bytes | int | None,
                    on_stdout: Sink | None, on_stderr: Sink | None, capture: bool,
                    max_capture: int, fds: list[int], control: tuple[int, int, int, int],
                    cg: cgroups.Cgroup | None, support: cgroups.CgroupSupport, seccomp_ok: bool,
                    proxy: object, notes: list[str], borrowed: list[int], *,
                    on_started: Callable[[Callable[[], None]], None] | None = None) -> RunOutcome:
    info_read, _info_write, _block_read, block_write = control
    stdin_arg: int = subprocess.DEVNULL if stdin is None else subprocess.PIPE if isinstance(stdin, bytes) else stdin
    started = time.monotonic()
    environ = bwrap_environ(spec)
    try:
        proc = subprocess.Popen(
            argv, stdin=stdin_arg, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=environ, close_fds=True, start_new_session=True,
            # bwrap's working folder marks whose sandbox it is (adapters/processes finds a
            # workspace's processes by it); the command's own is set by --chdir.
            cwd=spec.workspace,
            pass_fds=(*(fd for fd in fds if fd not in (info_read, block_write)), *borrowed))
    except OSError as exc:
        if exc.errno == errno.E2BIG:  # a limit too_long_for_exec does not know (another kernel)
            raise too_long_for_exec(argv, environ, always=True) or exc from None
        raise
    if cg is not None:
        # Joining a v1 cgroup waits for an RCU grace period (the kernel's cgroup_threadgroup_rwsem),
        # a few ms when no migration happened lately. Moving bwrap itself now pays that wait while
        # bwrap builds the namespaces; the child's move after the handshake then finds it warm.
        with contextlib.suppress(OSError):
            cg.add(proc.pid)
    # Our copies of the fds handed to bwrap go now, so EOFs arrive when bwrap is done.
    for fd in list(fds):
        if fd not in (info_read, block_write):
            os.close(fd)
            fds.remove(fd)
    try:
        info = _read_info(info_read)
        child = info.get("child-pid")
        if not isinstance(child, int):
            err = proc.stderr.read() if proc.stderr is not None else b""
            proc.wait()
            raise _setup_failed(err, proc.returncode)
        try:
            for which, soft, hard in _rlimits(limits, cg, support):
                resource.prlimit(child, which, (soft, hard))
            if cg is not None:
                cg.add(child)
            os.write(block_write, b"go")
        except (ProcessLookupError, BrokenPipeError):
            # The sandbox died while being set up (a mount failed after the pid was reported):
            # the limits found no process, or nobody is left to read "go". bwrap says why.
            err = proc.stderr.read() if proc.stderr is not None else b""
            proc.wait()
            raise _setup_failed(err, proc.returncode) from None
    except BaseException:
        _kill_tree(proc, cg)
        proc.wait()
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                stream.close()
        raise
    if on_started is not None:
        def stop() -> None:
            if proc.returncode is None:  # never a reaped pid's group
                _kill_tree(proc, cg)

        on_started(stop)
    deadline = started + limits.timeout_s
    out_buf = bytearray()
    err_buf = bytearray()
    err_tail = bytearray()
    truncated = False
    timed_out = False
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    streams: dict[int, tuple[bytearray, Sink | None]] = {
        proc.stdout.fileno(): (out_buf, on_stdout), proc.stderr.fileno(): (err_buf, on_stderr)}
    for fileno in streams:
        os.set_blocking(fileno, False)
        sel.register(fileno, selectors.EVENT_READ)
    pending = b""
    if isinstance(stdin, bytes) and proc.stdin is not None:
        pending = stdin
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not timed_out:
                timed_out = True
                _kill_tree(proc, cg)
                deadline = time.monotonic() + 2.0  # drain what is left, briefly
                continue
            if remaining <= 0:
                break
            for key, _ in sel.select(remaining):
                fileno = int(key.fd)
                if proc.stdin is not None and pending and fileno == proc.stdin.fileno():
                    try:
                        written = os.write(fileno, pending[:65536])
                        pending = pending[written:]
                    except (BrokenPipeError, BlockingIOError) as exc:
                        if isinstance(exc, BrokenPipeError):
                            pending = b""
                    if not pending:
                        sel.unregister(fileno)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(fileno, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fileno)
                    continue
                buffer, sink = streams[fileno]
                if sink is not None:
                    sink(chunk)
                if buffer is err_buf:
                    # bwrap's own last words (a failed execvp or mount) decide the status below,
                    # with or without capture.
                    err_tail += chunk
                    del err_tail[:-_ERR_TAIL]
                if capture:
                    room = max_capture - len(buffer)
                    if room < len(chunk):
                        truncated = True
                    buffer += chunk[:max(room, 0)]
        remaining = max(deadline - time.monotonic(), 0.0)
        try:
            rc = proc.wait(timeout=remaining if not timed_out else 5)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc, cg)
            rc = proc.wait()
    except BaseException:
        _kill_tree(proc, cg)
        proc.wait()
        raise
    finally:
        sel.close()
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    duration = time.monotonic() - started
    last = bytes(err_tail).rstrip().rsplit(b"\n", 1)[-1]
    if rc == 1 and not timed_out and last.startswith(b"bwrap: execvp "):
        # The program could not start: a shell's 126 (found, not executable) or 127 (not found).
        rc = 126 if last.endswith(b": Permission denied") else 127
    elif rc == 1 and not timed_out and last.startswith(b"bwrap: "):
        # bwrap's own failure while mounting (after the pid was reported): not the command's
        # status. A command could print this line itself; it would only refuse itself.
        raise _setup_failed(bytes(err_tail), rc)
    sig: int | None = None
    if timed_out:
        code = 124
    elif rc < 0:
        sig = -rc
        code = 128 + sig
    else:
        code = rc
        # bwrap reports a command killed by signal N as 128+N, the way a shell does.
        if 128 < rc <= 128 + 64:
            sig = rc - 128
    oom = cg.oom_killed() if cg is not None else False
    events = tuple(getattr(proxy, "events", ()))
    return RunOutcome(code, bytes(out_buf), bytes(err_buf), duration, timed_out, sig, oom,
                      ("cgroup " + support.mode) if cg is not None else "rlimit", seccomp_ok,
                      events, truncated, tuple(notes), bytes(err_tail))


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
