"""The native `warden` program (interfaces/cli/client.c), for real: a `warden run` it hands to the
home's daemon gives what the Python client (`python -m warden`) gives, status, stdout and stderr,
and the request it sends is the Python client's byte for byte; everything else, and every run
the daemon may not serve, goes to Python; signals reach the command as they do through the
Python client; and a peer that is no daemon of ours (garbage, a huge frame, a pid not its
child's, another user's socket) gets nothing from it: no crash, no signal sent, a sane exit.

Two copies of the client: one in a venv of the test's own (its `python` is this one's), and a
strict one whose `python` only says it ran (tests/support/native_client.py): what the strict
one runs as the Python client does went through the daemon, natively."""

from __future__ import annotations

import contextlib
import os
import platform
import pty
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import at_a_terminal
from tests.interfaces.test_cli_daemon import daemon_pids, stop_daemon
from tests.support.native_client import (
    FELL_BACK,
    FELL_BACK_SAID,
    build_client,
    build_client_for_another_user,
    handed_over,
    strict_copy,
)
from tests.support.waiting import wait_until
from warden.interfaces.cli.cmd_doctor import _client_check
from warden.interfaces.cli.entry import MAX_FRAME, daemon_paths, recv_frame, send_frame

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PYTHON_CLIENT = [sys.executable, "-m", "warden"]
ODD = os.fsdecode(b"caf\xe9")  # not UTF-8: travels as the bytes it is


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_client(tmp_path_factory.mktemp("native-client") / "venv")


@pytest.fixture(scope="module")
def strict(client: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return strict_copy(client, tmp_path_factory.mktemp("strict-client"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("native-home") / "warden-home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "TZ", "TMPDIR"}}
    # No LANG nor LC_*: the C locale, which Python's start coerces (LC_CTYPE=C.UTF-8 in its own
    # environment, PEP 538), so the native client must send that too. And a value not UTF-8.
    environ = {**keep, "HOME": str(home.parent), "WARDEN_HOME": str(home), "WARDEN_DAEMON_IDLE": "120",
               "WARDEN_TEST_ODD": ODD}
    made = subprocess.run([*PYTHON_CLIENT, "create", "dw", "--template", "minimal"], env=environ,
                          capture_output=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    yield environ
    stop_daemon(home)


def run(program: list[str] | Path, env: dict[str, str], *args: str, stdin: bytes | int = b"",
        **extra: str) -> subprocess.CompletedProcess[bytes]:
    argv = [str(program)] if isinstance(program, Path) else program
    given = {"input": stdin} if isinstance(stdin, bytes) else {"stdin": stdin}
    return subprocess.run([*argv, *args], env={**env, **extra}, capture_output=True, timeout=120, check=False,
                          **given)  # type: ignore[call-overload]


def serving(client: Path, env: dict[str, str]) -> Path:
    """The home's daemon is up (a first run through the client started it)."""
    home = Path(env["WARDEN_HOME"])
    path, _ = daemon_paths(str(home))
    run(client, env, "run", "dw", "--", "true")

    def listening() -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            return probe.connect_ex(path) == 0

    wait_until(listening, timeout=30, message="the daemon did not start")
    return home


def _timeless(out: bytes) -> bytes:
    return re.sub(rb'"duration_s": [0-9.e-]+', b'"duration_s": 0', out)


def said(done: subprocess.CompletedProcess[bytes]) -> tuple[int, bytes, bytes]:
    return done.returncode, _timeless(done.stdout), done.stderr


def served_cases(home: Path) -> list[tuple[str, ...]]:
    return [
        ("run", "dw", "--", "sh", "-c", "echo out; echo err >&2; exit 3"),
        ("run", "dw", "--", "sh", "-c", "echo fine"),
        ("run", "dw", "--", "sh", "-c", "kill -KILL $$"),
        ("run", "dw", "--json", "--", "sh", "-c", "printf 'a\\nb'; exit 7"),
        ("run", "dw", "--", "cat"),
        ("run", "dw", "--", "printf", "%s|", ODD, "--home", "/elsewhere"),  # after `--`: the command's
        ("run", "--home", "/nowhere", f"--home={home}", "dw", "--", "pwd"),  # the last one counts
        ("run", "--home=/nowhere", "--home", str(home), "dw", "--", "pwd"),
        ("run", "--home", f"~/{home.name}", "dw", "--", "pwd"),
        ("run", "dw", "--bogus", "--", "true"),  # a usage error, said by the daemon's child
    ]


def test_a_run_it_hands_to_the_daemon_gives_what_the_python_client_gives(client: Path, strict: Path,
                                                                         env: dict[str, str]) -> None:
    home = serving(client, env)
    statuses = []
    for args in served_cases(home):
        native = run(strict, env, *args, stdin=b"fed\n")
        python = run(PYTHON_CLIENT, env, *args, stdin=b"fed\n")
        # The strict copy has no Python: what it ran as the Python client did, it ran natively.
        assert said(native) == said(python), args
        statuses.append(native.returncode)
    assert statuses == [3, 0, 137, 7, 0, 0, 0, 0, 0, 2]
    assert run(strict, env, "run", "dw", "--", "printf", "%s", ODD).stdout == b"caf\xe9"
    assert run(strict, env, "run", "dw", "--", "cat", stdin=b"fed\n").stdout == b"fed\n"


def test_the_command_runs_in_a_child_of_the_daemon_while_the_client_stays_native(client: Path,
                                                                                  env: dict[str, str]) -> None:
    home = serving(client, env)
    proc = subprocess.Popen([str(client), "run", "dw", "--", "sh", "-c", "echo started; sleep 5"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        assert len(daemon_pids(home)) >= 2, "no child of the daemon runs it"
        assert os.readlink(f"/proc/{proc.pid}/exe") == str(client)  # no Python took over
    finally:
        proc.kill()
        proc.wait()


TO_PYTHON = [("--version",), ("--help",), ("ps", "dw"), ("run", "--tty", "dw", "--", "true"),
             ("run", "dw", "--help"), ("run", "dw", "-h", "--", "true"), ("nosuchcommand",), ()]


def test_every_other_command_line_goes_to_python_and_gives_what_it_gives(client: Path, strict: Path,
                                                                          env: dict[str, str]) -> None:
    serving(client, env)
    for args in TO_PYTHON:
        assert said(run(client, env, *args)) == said(run(PYTHON_CLIENT, env, *args)), args
        handed = run(strict, env, *args)
        assert (handed.returncode, handed.stderr) == (FELL_BACK, FELL_BACK_SAID), args


def test_what_the_daemon_may_not_serve_goes_to_python(client: Path, strict: Path, env: dict[str, str]) -> None:
    home = serving(client, env)

    def handed(**extra: str) -> bool:
        done = run(strict, env, "run", "dw", "--", "true", **extra)
        return (done.returncode, done.stderr) == (FELL_BACK, FELL_BACK_SAID)

    assert not handed()
    assert handed(WARDEN_DAEMON="0") and handed(WARDEN_DAEMON="off")
    assert run(client, env, "run", "dw", "--", "echo", "here", WARDEN_DAEMON="0").stdout == b"here\n"
    # A home given as `~user` (Python looks the user up) or another home: Python finds it.
    assert handed(WARDEN_HOME=f"~{os.getpid()}nosuchuser/x")
    # A terminal on stdin: Ctrl-C there must reach the program.
    master, slave = pty.openpty()
    try:
        assert run(strict, env, "run", "dw", "--", "true", stdin=slave).returncode == FELL_BACK
        assert run(client, env, "run", "dw", "--", "echo", "here", stdin=slave).stdout == b"here\n"
    finally:
        os.close(master)
        os.close(slave)
    # A run folder others may enter: no daemon of ours serves it. Python runs it (a home another
    # user may change is refused before anything: tests/interfaces/test_home_owner.py, and below).
    run_folder = home / "run"
    mode = run_folder.stat().st_mode & 0o7777
    run_folder.chmod(0o755)
    try:
        assert handed()
        assert run(client, env, "run", "dw", "--", "echo", "here").stdout == b"here\n"
    finally:
        run_folder.chmod(mode)
    assert not handed()


def _private_group() -> bool:
    """Whether this user's primary group is theirs alone (adapters/owned.py's rule)."""
    from warden.adapters.owned import _private_group as private

    return private(os.getegid(), os.geteuid())


@pytest.fixture(scope="module")
def other_user() -> Iterator[tuple[str, Path, Path]]:
    """warden-ci (CI's normal user), a native client and its strict copy it may run (in /tmp:
    the tests' own folders are root's alone)."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root to act as another user")
    import pwd

    try:
        user = pwd.getpwnam("warden-ci")
    except KeyError:
        pytest.skip("no user warden-ci here")
    tools = Path(tempfile.mkdtemp(prefix="warden-native-tools-", dir="/tmp"))
    try:
        tools.chmod(0o755)
        native = build_client_for_another_user(tools / "venv")
        strict_one = strict_copy(native, tools / "strict")
        subprocess.run(["chmod", "-R", "a+rX", str(tools)], check=True)
        os.chown(strict_one.parent, user.pw_uid, user.pw_gid)  # its stand-in writes there
        yield user.pw_name, native, strict_one
    finally:
        shutil.rmtree(tools, ignore_errors=True)


@pytest.mark.parametrize("user", ["root", "warden-ci"])
def test_a_home_check_owned_takes_is_served_and_one_it_refuses_is_not(
        user: str, client: Path, strict: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The daemon and the native client serve exactly the homes check_owned takes
    (adapters/owned.py's home_problem): one through a link, and one its owner's private group may
    write (Debian's umask 002), take the quick way; one a shared group may write, a link another
    user owns, a folder above it others may write (and so swap the home in) go to Python, which
    refuses them."""
    import pwd

    if user == "root":
        if os.geteuid() != 0:
            pytest.skip("root's run: the other user's is the same as this one's")
        folder, native, strict_one = tmp_path, client, strict
        owner = pwd.getpwuid(0)
        prefix: list[str] = []
    else:
        name, native, strict_one = request.getfixturevalue("other_user")
        owner = pwd.getpwnam(name)
        folder = Path(tempfile.mkdtemp(prefix="warden-native-home-", dir="/tmp"))
        folder.chmod(0o755)
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        prefix = [str(shutil.which("runuser")), "-u", name, "--"]
    real = folder / "data" / "warden-home"
    link = folder / "warden-link"
    for made in (folder / "data", real):
        made.mkdir(mode=0o755)
        os.chown(made, owner.pw_uid, owner.pw_gid)
    real.chmod(0o700)
    link.symlink_to(real)
    os.lchown(link, owner.pw_uid, owner.pw_gid)
    own = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "WARDEN_HOME": str(link),
           "WARDEN_DAEMON_IDLE": "60"}

    def warden(program: Path | list[str], *args: str) -> subprocess.CompletedProcess[bytes]:
        argv = [str(program)] if isinstance(program, Path) else program
        return subprocess.run([*prefix, "env", "-i", *(f"{k}={v}" for k, v in own.items()), *argv, *args],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=180, check=False, cwd="/")

    def quick() -> bool:
        """Whether the strict copy (no Python) ran it: through the daemon."""
        done = warden(strict_one, "run", "dw", "--", "echo", "quick")
        if (done.returncode, done.stderr) == (FELL_BACK, FELL_BACK_SAID):
            return False
        assert (done.returncode, done.stdout) == (0, b"quick\n"), done
        return True

    def refused() -> bool:
        """Handed to Python, which refuses the home (check_owned's `denied`)."""
        done = warden(native, "run", "dw", "--", "true")
        return not quick() and done.returncode == 3 and b"WARDEN_HOME" in done.stderr

    try:
        # (root's test venv has no uv of its own: the Python client's makes the layer)
        made = warden(PYTHON_CLIENT if user == "root" else native, "create", "dw", "--template", "minimal")
        assert made.returncode == 0, made.stderr
        assert warden(native, "run", "dw", "--", "true").returncode == 0  # starts the daemon
        wait_until(quick, timeout=30, message="the daemon does not serve a home through a link")
        # The owner's private group may write it (as `mkdir` makes it under umask 002).
        real.chmod(0o775)
        if user != "root" or _private_group():
            assert quick(), "a home only the user's private group may write is not served"
        # A group the user shares may write it: another user may swap what is in it.
        os.chown(real, -1, grp_of("users"))
        assert refused()
        os.chown(real, -1, owner.pw_gid)
        real.chmod(0o700)
        assert quick()
        # A folder above it others may write, not sticky: the home may be swapped by them.
        (folder / "data").chmod(0o777)
        assert refused()
        (folder / "data").chmod(0o755)
        # A link another user owns (in a sticky folder they may replace it).
        os.lchown(link, NOBODY, -1)
        assert refused()
        os.lchown(link, owner.pw_uid, -1)
        assert quick()
    finally:
        stop_daemon(link)
        if user != "root":
            subprocess.run([*prefix, "chmod", "-R", "u+w", str(folder)], check=False, capture_output=True)
            shutil.rmtree(folder, ignore_errors=True)


def grp_of(name: str) -> int:
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        pytest.skip(f"no group {name} here")


NOBODY = 65534


def test_with_no_daemon_yet_python_runs_it_and_starts_one(client: Path, strict: Path, tmp_path: Path) -> None:
    home = tmp_path / "warden-home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "TZ", "TMPDIR"}}
    own = {**keep, "HOME": str(tmp_path), "WARDEN_HOME": str(home), "WARDEN_DAEMON_IDLE": "60"}
    try:
        assert run(PYTHON_CLIENT, own, "create", "dw", "--template", "minimal").returncode == 0
        assert run(strict, own, "run", "dw", "--", "true").returncode == FELL_BACK
        first = run(client, own, "run", "dw", "--", "echo", "first")
        assert (first.returncode, first.stdout) == (0, b"first\n"), first.stderr
        wait_until(lambda: daemon_pids(home), timeout=30, message="no daemon started")
        wait_until(lambda: run(strict, own, "run", "dw", "--", "true").returncode == 0, timeout=30,
                   message="the new daemon does not serve the native client")
    finally:
        stop_daemon(home)


def test_closed_streams_are_dev_null_and_the_run_still_served(client: Path, strict: Path,
                                                             env: dict[str, str]) -> None:
    home = serving(client, env)
    for closed in (">&-", "2>&-", "<&-"):
        mark = f"closed-{len(closed)}"
        done = subprocess.run(["sh", "-c", f"exec {strict} run dw -- sh -c 'touch {mark}; echo ran' {closed}"],
                              env=env, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, (closed, done)
        assert (home / "workspaces" / "dw" / mark).exists(), closed


def _handles(pid: int, *signals: int) -> bool:
    """Whether process `pid` has a handler for each of `signals` (SigCgt, proc(5))."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(status.split("SigCgt:", 1)[1].split()[0], 16)
    return all(caught >> (sig - 1) & 1 for sig in signals)


@pytest.mark.parametrize(("how", "status"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_client_ends_the_command_as_through_the_python_client(
        client: Path, strict: Path, env: dict[str, str], how: signal.Signals, status: int) -> None:
    home = serving(client, env)
    mark = home / "workspaces" / "dw" / f"after-{how.name}"
    proc = subprocess.Popen([str(strict), "run", "dw", "--", "sh", "-c", f"echo started; sleep 3; touch {mark.name}"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=at_a_terminal)
    assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
    wait_until(lambda: _handles(proc.pid, how), timeout=10, message="the client does not forward signals")
    proc.send_signal(how)
    # SIGTERM: it dies by it, as its command did; SIGINT: Warden's "interrupted".
    assert proc.wait(timeout=30) == status, proc.stderr.read() if proc.stderr else b""
    time.sleep(4)  # past the command's own end, had it gone on
    assert not mark.exists(), f"the command went on after {how.name}"


# poll(2) and ppoll(2) by machine: the calls a client waits for the daemon's first answer in.
_POLLS = {"x86_64": {"7", "271"}, "aarch64": {"73"}}


def _stopped_in_poll(proc: subprocess.Popen[bytes]) -> bool:
    """Stop `proc` (SIGSTOP) while it waits in poll; whether it was stopped there (else it is
    let go on: it got past that wait first)."""
    polls = _POLLS[platform.machine()]

    def syscall() -> str:
        with contextlib.suppress(OSError, IndexError):
            return Path(f"/proc/{proc.pid}/syscall").read_text().split()[0]
        return ""

    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        if syscall() in polls:
            proc.send_signal(signal.SIGSTOP)
            wait_until(lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
                       timeout=10, message="SIGSTOP did not stop it")
            if syscall() in polls:
                return True
            proc.send_signal(signal.SIGCONT)
            return False
    return False


def test_a_client_stopped_past_its_wait_for_the_pid_never_runs_the_command_again(client: Path,
                                                                                 env: dict[str, str]) -> None:
    """A client stopped (or starved) while the daemon's child said its pid and ran the command,
    for longer than it waits for that pid (10 s): it follows that run, natively and through the
    Python client alike. Both used to give up at their deadline without reading the pid already
    there, and Python ran the command a second time."""
    if platform.machine() not in _POLLS:
        pytest.skip("which system calls are poll(2) is known for x86_64 and aarch64 only")
    home = serving(client, env)
    folder = home / "workspaces" / "dw"
    stopped: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for name, program in (("native", [str(client)]), ("python", PYTHON_CLIENT)):
            mark = folder / f"ran-{name}"
            for _ in range(20):  # until one is caught waiting for the pid (it waits some ms)
                mark.unlink(missing_ok=True)
                proc = subprocess.Popen([*program, "run", "dw", "--", "sh", "-c", f"echo ran >> {mark.name}"],
                                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
                if _stopped_in_poll(proc):
                    stopped.append((proc, mark))
                    break
                proc.communicate(timeout=60)
            else:
                pytest.skip(f"the {name} client was never caught waiting for the pid")
            wait_until(mark.exists, timeout=30, message=f"the daemon's child did not run the {name} client's command")
        time.sleep(10.5)  # past both clients' wait for the pid
        for proc, mark in stopped:
            proc.send_signal(signal.SIGCONT)
            _, err = proc.communicate(timeout=60)
            assert (proc.returncode, err) == (0, b""), mark.name
            assert mark.read_text() == "ran\n", f"{mark.name}: the command ran again"
    finally:
        for proc, _ in stopped:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()


def test_the_request_is_the_python_clients_byte_for_byte(strict: Path, tmp_path: Path) -> None:
    home, path = _fake_home(tmp_path)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "WARDEN_HOME": str(home)}
    environments = [
        {**base, "WARDEN_TEST_ODD": ODD},  # the C locale: LC_CTYPE added as Python's start adds it
        {"LC_CTYPE": "POSIX", **base, "LANG": "C.UTF-8"},  # LC_CTYPE replaced where it is
        {**base, "WARDEN_TERMINAL": "", "LC_ALL": "C"},  # an empty WARDEN_TERMINAL filled where it is
        {**base, "WARDEN_TERMINAL": "mine", "PYTHONCOERCECLOCALE": "0"},  # a terminal given: kept
    ]
    argv = ["run", "--home", str(home), "dw", "--", "printf", "%s", ODD, ""]
    for environ in environments:
        requests = []
        for program in ([str(strict)], PYTHON_CLIENT):
            with _fake_daemon(path, lambda conn: send_frame(conn, b"fallback not today")) as got:
                subprocess.run([*program, *argv], env=environ, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=60, check=False, cwd=tmp_path)
            requests.append(got)
        assert requests[0] == requests[1], environ
        assert requests[0][0][:13] == b"warden-run/3\0" and requests[0][1] == 5


@contextlib.contextmanager
def _fake_daemon(path: str, answer: Callable[[socket.socket], None]) -> Iterator[list[object]]:
    """A socket at `path` that takes one request (its payload and count of descriptors, in the
    list yielded once the block ends) and answers it with `answer(conn)`."""
    got: list[object] = []
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    listener.settimeout(30)

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                payload, fds = recv_frame(conn, max_fds=5, deadline=time.monotonic() + 10)
                for fd in fds:
                    os.close(fd)
                got.extend([payload, len(fds)])
                answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        thread.join(timeout=30)
        listener.close()
        os.unlink(path)


def _fake_home(tmp_path: Path) -> tuple[Path, str]:
    """A home whose run folder has a lock file and room for a fake daemon's socket."""
    home = tmp_path / "fake-home"
    (home / "run").mkdir(parents=True, mode=0o700)
    home.chmod(0o700)
    path, lock = daemon_paths(str(home))
    Path(lock).touch(mode=0o600)
    return home, path


def test_a_peer_that_is_no_daemon_gets_nothing_and_breaks_nothing(strict: Path, tmp_path: Path) -> None:
    home, path = _fake_home(tmp_path)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "WARDEN_HOME": str(home)}
    argv = [str(strict), "run", "dw", "--", "true"]

    def answered(answer: Callable[[socket.socket], None]) -> subprocess.CompletedProcess[bytes]:
        with _fake_daemon(path, answer):
            return subprocess.run(argv, env=environ, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                                  check=False)

    # Anything but `pid N` before the command starts: nothing ran, Python runs it, and none of
    # the descriptors the client opened (its socket, its proof, its pidfd) reaches it.
    done = answered(lambda conn: send_frame(conn, b"garbage"))
    assert (done.returncode, done.stderr) == (FELL_BACK, FELL_BACK_SAID), done
    leaked = [fd for fd in handed_over(strict) if "socket:" in fd or "pidfd" in fd or "daemon.lock" in fd]
    assert not leaked and handed_over(strict), handed_over(strict)
    for answer in (lambda conn: conn.sendall(struct.pack("!I", 0xFFFFFFFF) + b"x" * 100),
                   # One byte more than a frame may be: not read, though it is a pid.
                   lambda conn: send_frame(conn, b"pid " + b"0" * (MAX_FRAME - 4) + b"1"),
                   lambda conn: send_frame(conn, b"pid 12x"),
                   lambda conn: send_frame(conn, b"pid 1", [0]),  # descriptors it never takes
                   lambda conn: None):  # closed
        done = answered(answer)
        assert (done.returncode, done.stderr) == (FELL_BACK, FELL_BACK_SAID), done
    # Once a pid came, a broken answer ends it with entry.py's line.
    broken = b"warden: the daemon's runner ended without the command's status\n"
    for answer in (lambda conn: send_frame(conn, b"pid 1"),
                   lambda conn: (send_frame(conn, b"pid 1"), send_frame(conn, b"hello")),
                   lambda conn: (send_frame(conn, b"pid 1"), conn.sendall(struct.pack("!I", 0xFFFFFFFF)))):
        done = answered(answer)
        assert (done.returncode, done.stderr) == (1, broken), done
    # Another `pid` is read past; a status is kept as an exit status keeps it (its lowest byte).
    done = answered(lambda conn: [send_frame(conn, frame) for frame in (b"pid 1", b"pid 1", b"status -2")])
    assert (done.returncode, done.stderr) == (254, b""), done


def test_a_number_the_daemon_never_writes_is_no_answer_to_either_client(strict: Path, tmp_path: Path) -> None:
    """Digits other than ASCII ones (`²`, which str.isdigit takes and int() refuses; `٣`), a
    second `-`, more than 18 digits (int() refuses 4,300): the Python client took some of them
    and failed on others with a traceback, where the native one read no answer. Now both read
    no answer: before the pid the command runs here, after it the runner went wrong."""
    home, path = _fake_home(tmp_path)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "WARDEN_HOME": str(home)}

    def answered(program: list[str], *frames: bytes) -> tuple[int, bytes]:
        with _fake_daemon(path, lambda conn: [send_frame(conn, frame) for frame in frames]):
            done = subprocess.run([*program, "run", "dw", "--", "true"], env=environ, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=60, check=False)
        return done.returncode, done.stderr

    here = answered(PYTHON_CLIENT, b"garbage")  # what the Python client does when it runs the command itself
    assert b"Traceback" not in here[1], here
    for pid in ("pid \u0663", "pid \u00b2", "pid 1" + "0" * 18, "pid " + "1" * 4301, "pid -1"):
        assert answered([str(strict)], pid.encode()) == (FELL_BACK, FELL_BACK_SAID), pid
        assert answered(PYTHON_CLIENT, pid.encode(), b"status 0") == here, pid
    broken = (1, b"warden: the daemon's runner ended without the command's status\n")
    for status in ("status --1", "status \u00b2", "status -" + "1" * 19, "status " + "7" * 4301, "status 1 "):
        for program in ([str(strict)], PYTHON_CLIENT):
            assert answered(program, b"pid 1", status.encode()) == broken, (program, status)
    for program in ([str(strict)], PYTHON_CLIENT):  # 18 digits are a number; what a status keeps, its lowest byte
        assert answered(program, b"pid 000000000000000001", b"status -" + b"9" * 18) == (1, b""), program


# Run in a Python of its own (a fork of this multi-threaded process could deadlock before its
# exec): exec argv[2:] with exactly the environment entries in file argv[1], NUL-separated.
_EXECVE = ("import ctypes, sys\n"
           "entries = open(sys.argv[1], 'rb').read().split(b'\\0')\n"
           "words = [w.encode() for w in sys.argv[2:]]\n"
           "argv = (ctypes.c_char_p * (len(words) + 1))(*words, None)\n"
           "envp = (ctypes.c_char_p * (len(entries) + 1))(*entries, None)\n"
           "ctypes.CDLL(None).execve(argv[0], argv, envp)\n"
           "sys.exit(127)\n")


def _started_with(argv: list[str], environ: list[bytes], folder: Path, timeout: float = 60) -> tuple[int, bytes]:
    """Run `argv` with exactly the environment entries `environ` (execve's: a name may come twice,
    an entry lack its `=`, as no mapping allows) and stdin /dev/null; its status and stderr."""
    listing = folder / "environ"
    listing.write_bytes(b"\0".join(environ))
    done = subprocess.run([sys.executable, "-c", _EXECVE, str(listing), *argv], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout, check=False)
    return done.returncode, done.stderr


def test_an_environment_of_many_variables_is_sent_at_once_and_a_name_twice_goes_to_python(
        strict: Path, tmp_path: Path) -> None:
    """100,000 variables: the request is sent without delay (the daemon waits 1 s for it, every
    other client waiting meanwhile); it took the client ~40 s when each name was compared with
    every other. Timed against 10,000 in the same test: ten times the variables took ~100 times
    as long that way, and takes a few times as long now. A name twice or an entry without `=`,
    anywhere, still goes to Python."""
    home, path = _fake_home(tmp_path)
    base = [f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}".encode(), f"HOME={tmp_path}".encode(),
            f"WARDEN_HOME={home}".encode()]
    argv = [str(strict), "run", "dw", "--", "true"]

    def sent(count: int) -> float:
        """Seconds from the client's start to the fake daemon's receipt of `count` variables (not
        the fallback after it: the stand-in for Python is a shell, which takes a variable in a
        time that grows with the number it has, ~14 s for 100,000)."""
        received: list[float] = []

        def answer(conn: socket.socket) -> None:
            received.append(time.monotonic())
            send_frame(conn, b"fallback not today")

        with _fake_daemon(path, answer) as got:
            started = time.monotonic()
            status, err = _started_with(argv, [*base, *(b"V%06d=x" % i for i in range(count))], tmp_path,
                                        timeout=300)
        assert received, f"no request with {count} variables reached the fake daemon in its 10 s"
        assert (status, err) == (FELL_BACK, FELL_BACK_SAID)  # the fake daemon's fallback
        assert isinstance(got[0], bytes) and got[0].count(b"\0V0") == count
        return received[0] - started

    fewer, all_of_them = sent(10_000), sent(100_000)
    assert all_of_them < 30 * fewer, (all_of_them, fewer)
    many = [b"V%06d=x" % i for i in range(100_000)]
    for odd in ([*base, *many, b"V000007=again"], [*base, b"V000007=first", *many], [*base, *many[:9], b"NO_EQUALS"]):
        with _fake_daemon(path, lambda conn: None) as got:
            assert _started_with(argv, odd, tmp_path) == (FELL_BACK, FELL_BACK_SAID)
        assert got == [None, 0]  # connected, and sent nothing


def test_a_pid_that_is_not_the_peers_child_gets_no_signal(strict: Path, tmp_path: Path) -> None:
    home, path = _fake_home(tmp_path)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "WARDEN_HOME": str(home)}
    # The victim: a process of this user's that is no child of the fake daemon's (this process).
    keeper = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE)
    assert keeper.stdout is not None
    victim = int(keeper.stdout.readline())
    go_on = threading.Event()

    def answer(conn: socket.socket) -> None:
        send_frame(conn, f"pid {victim}".encode())
        go_on.wait(30)
        send_frame(conn, b"status 5")

    try:
        with _fake_daemon(path, answer):
            proc = subprocess.Popen([str(strict), "run", "dw", "--", "true"], env=environ, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=at_a_terminal)
            wait_until(lambda: _handles(proc.pid, signal.SIGTERM, signal.SIGINT), timeout=10,
                       message="the client did not take the pid")
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
                proc.send_signal(sig)
            time.sleep(0.5)
            go_on.set()
            assert proc.wait(timeout=30) == 5  # not 128 + a signal: it dies by none
        assert Path(f"/proc/{victim}").exists() and keeper.poll() is None, "a signal reached the victim"
    finally:
        go_on.set()
        keeper.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
        keeper.wait()


def test_a_socket_of_another_users_is_never_sent_a_request(strict: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to listen as another user")
    import pwd

    other = pwd.getpwnam("nobody")
    home, path = _fake_home(tmp_path)
    door = Path(f"/tmp/warden-native-door-{os.getpid()}")
    door.mkdir(mode=0o777)
    door.chmod(0o777)
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the listener, as that user: how many bytes a client sent it
        try:
            os.setgroups([])
            os.setgid(other.pw_gid)
            os.setuid(other.pw_uid)
            with socket.socket(socket.AF_UNIX) as listener:
                listener.bind(str(door / "sock"))
                listener.listen(1)
                os.write(report_w, b"ready\n")
                listener.settimeout(30)
                conn, _ = listener.accept()
                conn.settimeout(3)
                try:
                    sent = len(conn.recv(65536))
                except OSError:
                    sent = 0
                os.write(report_w, f"{sent}\n".encode())
        finally:
            os._exit(0)
    os.close(report_w)
    try:
        with os.fdopen(report_r, "rb") as report:
            assert report.readline() == b"ready\n"
            os.link(door / "sock", path)
            environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
                       "WARDEN_HOME": str(home)}
            done = subprocess.run([str(strict), "run", "dw", "--", "true"], env=environ, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=60, check=False)
            assert (done.returncode, done.stderr) == (FELL_BACK, FELL_BACK_SAID), done
            assert report.readline() == b"0\n", "the client sent its request to another user's socket"
    finally:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        shutil.rmtree(door, ignore_errors=True)


def test_doctor_says_which_client_warden_is(client: Path, env: dict[str, str], tmp_path: Path) -> None:
    doctor = run(client, env, "doctor", "--json", WARDEN_DAEMON="0")
    assert f"{client} is the native client" in doctor.stdout.decode(), doctor.stderr
    script = tmp_path / "warden"
    script.write_text("#!/usr/bin/python3\n")
    check = _client_check(script)
    assert "is the Python client" in check.detail and "apt-get install -y gcc" in check.fix and check.ok
    assert "no " in _client_check(tmp_path / "none").detail


# Held where Python starts `warden` (a `sitecustomize` on PYTHONPATH, imported by `site`): it says
# so in a file, then waits, at Python's start or as the CLI's modules are looked for.
_HELD_AT = {
    "python's start": "import os, time\nopen(os.environ['HELD'], 'w').close()\ntime.sleep(1)\n",
    "the CLI's import": ("import os, sys, time\n"
                         "class Held:\n"
                         "    def find_spec(self, name, path=None, target=None):\n"
                         "        if name == 'warden.interfaces.cli.main':\n"
                         "            open(os.environ['HELD'], 'w').close()\n"
                         "            time.sleep(5)\n"
                         "        return None\n"
                         "sys.meta_path.insert(0, Held())\n"),
}


@pytest.mark.parametrize("where", list(_HELD_AT))
def test_a_ctrl_c_as_warden_starts_is_interrupted_not_a_traceback(client: Path, tmp_path: Path, where: str) -> None:
    """Ctrl-C while Python starts `warden` (no daemon: the client execs Python) or loads the CLI's
    modules, before the CLI takes Ctrl-C itself: it ended in a traceback (KeyboardInterrupt) or
    "Fatal Python error: init_import_site". Now the client holds it across its exec, and it is
    Warden's "interrupted" (130), nothing run."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_HELD_AT[where])
    held = tmp_path / "held"
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "WARDEN_HOME": str(tmp_path / "home"),
               "WARDEN_DAEMON": "0", "PYTHONPATH": str(tmp_path / "site"), "HELD": str(held)}
    proc = subprocess.Popen([str(client), "run", "dw", "--", "true"], env=environ, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=at_a_terminal)
    wait_until(held.exists, timeout=30, message="Python never started")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, b"", b"warden: interrupted\n")
