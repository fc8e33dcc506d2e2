"""The live sandbox's supervisor (adapters/sandbox/supervisor.py) as a plain process of this user,
outside any sandbox: how it starts a command it is not asked to hold. Without Warden's sealed
`prlimit` (there is none outside a sandbox) it forks the command, which sets the rlimits it was
given itself; and it never goes above its own hard limits, which no process inside may raise."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.launcher import build_launcher, noting_source
from warden.adapters.sandbox import supervisor
from warden.adapters.sandbox.live import supervisor_source


def _frame(message: dict[str, object]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the supervisor closed the connection"
        data += chunk
    return data


def _answer(sock: socket.socket) -> dict[str, object]:
    # One frame, never a byte of the next (a quick command's exit comes right behind its start).
    (length,) = struct.unpack(">I", _exactly(sock, 4))
    answer = json.loads(_exactly(sock, length))
    assert isinstance(answer, dict)
    return answer


def _start(where: str, source: str, python: str,
           preexec_fn: Callable[[], object] | None = None) -> subprocess.Popen[bytes]:
    """The supervisor from `source`, listening at `where`, as a plain process of this user."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(where)
    listener.listen(8)
    try:
        return subprocess.Popen([python, "-I", "-S", "-c", source, str(listener.fileno()), "60"],
                                pass_fds=[listener.fileno()], cwd="/", preexec_fn=preexec_fn)
    finally:
        listener.close()


def _spawn(conn: socket.socket, fds: dict[str, int], argv: list[str], *, cwd: str = "/tmp",
           rlimits: dict[str, list[int]] | None = None) -> None:
    """Ask for a foreground command not held, with `fds` (name: descriptor) passed along."""
    conn.sendmsg([_frame({"op": "spawn", "id": os.urandom(8).hex(), "argv": argv, "env": {"PATH": "/usr/bin:/bin"},
                          "cwd": cwd, "background": False, "timeout": 30, "fds": list(fds), "hold": False,
                          "rlimits": rlimits or {"cpu": [7, 8]}})],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds.values()))])


@pytest.fixture
def path(tmp_path: Path) -> Iterator[str]:
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 (what a sandbox runs the supervisor with)")
    where = str(tmp_path / "s")
    # Its own hard limit on open files, below what the test asks a command for.
    proc = _start(where, supervisor_source(), python,
                  preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)))
    try:
        yield where
    finally:
        proc.kill()
        proc.wait(5)


def test_a_command_not_held_is_forked_and_sets_its_own_limits(path: str) -> None:
    out_r, out_w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        try:
            _spawn(conn, {"stdout": out_w}, ["sh", "-c", "ulimit -Ht; ulimit -Hn"], cwd="/",
                   rlimits={"cpu": [7, 8], "nofile": [500, 500]})
        finally:
            os.close(out_w)
        started = _answer(conn)
        assert started["ok"] is True and started["held"] is False, started
        ended = _answer(conn)
        assert ended["event"] == "exit" and ended["exit_code"] == 0, ended
    with os.fdopen(out_r) as output:
        # The cpu limit as asked; open files no higher than the supervisor's own hard limit.
        assert output.read() == "8\n200\n"


def test_a_limit_it_does_not_know_or_out_of_order_is_refused(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        for limits in ({"stack": [1, 1]}, {"cpu": [9, 8]}, {"cpu": [-1, 8]}):
            conn.sendall(_frame({"op": "spawn", "id": "b" * 16, "argv": ["true"], "env": {}, "cwd": "/",
                                 "hold": False, "rlimits": limits}))
            answer = _answer(conn)
            assert answer["ok"] is False, (limits, answer)


@pytest.mark.parametrize(("suid_dumpable", "through_prlimit"), [("0\n", True), ("2\n", True), ("1\n", False),
                                                                (None, False)])
def test_prlimit_starts_a_command_only_while_the_kernel_keeps_it_sealed(tmp_path: Path, suid_dumpable: str | None,
                                                                        through_prlimit: bool) -> None:
    """fs.suid_dumpable at 1 ("debug") makes a process running a program it may not read dumpable
    by its own user: the bot's processes could write into Warden's `prlimit` through /proc/PID/mem
    before it set the limits. Then (or when the setting cannot be read) the command is forked, and
    sets them itself. Here `prlimit` is a copy that notes each start, and the setting a file."""
    real = shutil.which("prlimit", path="/usr/bin:/bin")
    if real is None:
        pytest.skip("no prlimit")
    noted = tmp_path / "prlimit-ran"
    wrapper, setting = _noting_prlimit(tmp_path, real, noted), _setting(tmp_path, suid_dumpable)
    where, proc = _supervisor_with(tmp_path, PRLIMIT=wrapper, SUID_DUMPABLE=setting)
    try:
        assert _shown(where, ["sh", "-c", "ulimit -Ht"]) == "8\n"  # its limits either way
    finally:
        proc.kill()
        proc.wait(5)
    assert noted.exists() is through_prlimit


def _noting_prlimit(tmp_path: Path, real: str, noted: Path) -> Path:
    """A `prlimit` that notes each start in `noted`, then is the real one."""
    wrapper = tmp_path / "prlimit"
    wrapper.write_text(f"#!/bin/sh\necho ran >> {noted}\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _setting(tmp_path: Path, suid_dumpable: str | None) -> Path:
    """A file standing for /proc/sys/fs/suid_dumpable (none at all: None)."""
    setting = tmp_path / "suid_dumpable"
    if suid_dumpable is not None:
        setting.write_text(suid_dumpable)
    return setting


def _supervisor_with(tmp_path: Path, **constants: Path | str) -> tuple[str, subprocess.Popen[bytes]]:
    """The supervisor listening at tmp_path/s, with its constants (RLIMIT_EXEC, PRLIMIT,
    SUID_DUMPABLE) pointed elsewhere."""
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3")
    source = supervisor_source()
    for constant, ours in constants.items():
        line = f'{constant} = "{getattr(supervisor, constant)}"'
        assert line in source, constant
        source = source.replace(line, f'{constant} = "{ours}"')
    where = str(tmp_path / "s")
    return where, _start(where, source, python)


def _shown(where: str, argv: list[str], env: dict[str, str] | None = None) -> str:
    """What a foreground command (cpu limit 7:8) printed, once it ended with 0."""
    out_r, out_w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(where)
        try:
            conn.sendmsg([_frame({"op": "spawn", "id": os.urandom(8).hex(), "argv": argv,
                                  "env": {"PATH": "/usr/bin:/bin", **(env or {})}, "cwd": "/", "background": False,
                                  "timeout": 30, "fds": ["stdout"], "hold": False, "rlimits": {"cpu": [7, 8]}})],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", out_w))])
        finally:
            os.close(out_w)
        assert _answer(conn)["ok"] is True
        ended = _answer(conn)
        assert ended["event"] == "exit" and ended["exit_code"] == 0, ended
    with os.fdopen(out_r) as output:
        return output.read()


@pytest.mark.parametrize(("suid_dumpable", "through_launcher"), [("0\n", True), ("2\n", True), ("1\n", False),
                                                                 (None, False)])
def test_the_launcher_starts_a_command_only_while_the_kernel_keeps_it_sealed(
        tmp_path: Path, suid_dumpable: str | None, through_launcher: bool) -> None:
    """Warden's launcher (rlimit_exec.c) in place of prlimit, under the same rule: sealed, or not
    used. Here it is a copy that notes each start, and prlimit one that would note its own."""
    noted, prlimit_noted = tmp_path / "launcher-ran", tmp_path / "prlimit-ran"
    launcher = build_launcher(tmp_path / "rlimit-exec", noting_source(noted))
    noted.unlink()  # the build's own check that it runs
    prlimit = _noting_prlimit(tmp_path, "/usr/bin/prlimit", prlimit_noted)
    setting = _setting(tmp_path, suid_dumpable)
    where, proc = _supervisor_with(tmp_path, RLIMIT_EXEC=launcher, PRLIMIT=prlimit, SUID_DUMPABLE=setting)
    try:
        # Its limits either way, and the name as given; the program as found on PATH.
        assert _shown(where, ["sh", "-c", 'ulimit -Ht; echo "$0"']) == "8\nsh\n"
        # The loader's variables keep prlimit out, never the launcher: it has no loader.
        assert _shown(where, ["sh", "-c", "ulimit -Ht; echo $LD_BIND_NOW"], {"LD_BIND_NOW": "1"}) == "8\n1\n"
    finally:
        proc.kill()
        proc.wait(5)
    assert (noted.read_text() if noted.exists() else "") == ("started\n" * 2 if through_launcher else "")
    assert not prlimit_noted.exists()


def test_without_the_launcher_prlimit_starts_the_command(tmp_path: Path) -> None:
    noted = tmp_path / "prlimit-ran"
    prlimit = tmp_path / "prlimit"
    prlimit.write_text(f"#!/bin/sh\necho ran >> {noted}\nexec /usr/bin/prlimit \"$@\"\n")
    prlimit.chmod(0o755)
    if not os.access("/usr/bin/prlimit", os.X_OK):
        pytest.skip("no /usr/bin/prlimit")
    where, proc = _supervisor_with(tmp_path, RLIMIT_EXEC=tmp_path / "no-launcher", PRLIMIT=prlimit)
    try:
        assert _shown(where, ["sh", "-c", "ulimit -Ht"]) == "8\n"
    finally:
        proc.kill()
        proc.wait(5)
    assert noted.read_text() == "ran\n"


def test_what_decides_the_way_a_command_starts() -> None:
    # The loader's variables keep prlimit out of it (they would run code in it first).
    assert supervisor._loader_safe({"PATH": "/usr/bin", "TMPDIR": "/tmp", "LANG": "C.UTF-8"})
    for name in ("LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "GLIBC_TUNABLES", "MALLOC_CHECK_", "GCONV_PATH",
                 "LIBSMARTCOLS_DEBUG"):
        assert not supervisor._loader_safe({name: "x"}), name
    # Found as execvp finds it: on PATH, or a path with a slash from the working folder.
    # The path it returns is what the launcher execs, in that folder.
    assert supervisor._found("sh", {"PATH": "/nowhere:/bin"}, "/") == "/bin/sh"
    assert supervisor._found("sh", {"PATH": "/nowhere:bin"}, "/") == "bin/sh"
    assert not supervisor._found("sh", {"PATH": "/nowhere"}, "/")
    assert supervisor._found("./bin/sh", {}, "/usr") == "./bin/sh"
    assert not supervisor._found("", {"PATH": "/usr/bin"}, "/")
    assert not supervisor._found("/etc/passwd", {}, "/")  # not executable


@pytest.fixture
def with_prlimit(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The supervisor with its prlimit pointed at the host's (a sandbox has Warden's sealed copy)."""
    python, prlimit = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin"), shutil.which("prlimit")
    if python is None or prlimit is None:
        pytest.skip("no system python3 or no prlimit")
    source = supervisor_source()
    assert f'PRLIMIT = "{supervisor.PRLIMIT}"' in source
    source = source.replace(f'PRLIMIT = "{supervisor.PRLIMIT}"', f'PRLIMIT = "{prlimit}"')
    where = str(tmp_path / "s")
    proc = _start(where, source, python)
    try:
        yield where, proc
    finally:
        proc.kill()
        proc.wait(5)


def test_through_prlimit_it_enters_the_commands_cgroups_for_the_spawn_and_comes_back(
        with_prlimit: tuple[str, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """Stand-ins for the `tasks` files: what the supervisor writes to them is what it joins."""
    path, _ = with_prlimit
    files = {name: tmp_path / name for name in ("cgroup0", "back0")}
    out_r, out_w = os.pipe()
    fds = {"stdout": out_w, **{name: os.open(file, os.O_WRONLY | os.O_CREAT, 0o600) for name, file in files.items()}}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        try:
            _spawn(conn, fds, ["sh", "-c", "ulimit -Ht; pwd"])
        finally:
            for fd in fds.values():
                os.close(fd)
        started = _answer(conn)
        assert started["ok"] is True and started["held"] is False and started["joined"] is True, started
        assert _answer(conn)["exit_code"] == 0
    with os.fdopen(out_r) as output:
        assert output.read() == "8\n/tmp\n"
    assert files["cgroup0"].read_text() == "0" and files["back0"].read_text() == "0"


def test_a_supervisor_that_cannot_come_back_from_a_commands_cgroup_ends(
        with_prlimit: tuple[str, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """Left in the command's cgroup it would be killed with the command's leftovers, mid-way:
    it ends cleanly instead (Warden starts another sandbox)."""
    path, proc = with_prlimit
    join = tmp_path / "cgroup0"
    fds = {"cgroup0": os.open(join, os.O_WRONLY | os.O_CREAT, 0o600),
           "back0": os.open(join, os.O_RDONLY)}  # a write to it fails
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        try:
            _spawn(conn, fds, ["true"])
        finally:
            for fd in fds.values():
                os.close(fd)
        assert _answer(conn)["ok"] is True
    assert proc.wait(10) == 0


def test_a_script_is_started_through_prlimit_only_where_its_interpreter_is(tmp_path: Path) -> None:
    def script(name: str, text: bytes, mode: int = 0o755) -> str:
        (tmp_path / name).write_bytes(text)
        (tmp_path / name).chmod(mode)
        return f"./{name}"

    cwd = str(tmp_path)
    assert supervisor._found(script("ok", b"#!/bin/sh\necho\n"), {}, cwd)
    assert supervisor._found(script("spaced", b"#!  /bin/sh -e\n"), {}, cwd)
    assert supervisor._found(script("binary", b"\x7fELF..."), {}, cwd)  # the kernel's to judge
    assert not supervisor._found(script("missing", b"#!/no/such/interpreter\n"), {}, cwd)
    assert not supervisor._found(script("empty", b"#!\n"), {}, cwd)
    assert not supervisor._found(script("endless", b"#!/bin/sh" + b" " * 300), {}, cwd)
    # Relative to the working folder, as the kernel resolves it.
    assert supervisor._found(script("relative", b"#!ok\n"), {}, cwd)
    # Found on PATH, its interpreter checked the same.
    assert not supervisor._found("missing", {"PATH": cwd}, "/")
    # A FIFO put there is never waited on (an executable one: the kernel refuses it anyway).
    os.mkfifo(tmp_path / "fifo", 0o755)
    assert not supervisor._found("./fifo", {}, cwd)
    if os.geteuid() != 0:  # root reads anything
        assert supervisor._found(script("sealed", b"#!/no/such/interpreter\n", 0o111), {}, cwd)
