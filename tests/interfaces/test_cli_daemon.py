"""The home's daemon and the thin `warden` client (interfaces/cli/daemon.py, entry.py), for real:
a `warden run` goes through a forked child of the daemon with the client's own stdin, stdout,
stderr, folder and environment, and gives what running it alone gives; Ctrl-C and a killed
client stop the command; a daemon of other code or another environment is never used; only its
owner reaches it; it ends when idle; two clients at once start one daemon; a daemon killed
mid-run costs the client nothing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import at_a_terminal
from tests.support.waiting import poll, wait_until
from warden.interfaces.cli import daemon as daemon_module
from warden.interfaces.cli.entry import daemon_paths, encode_request, recv_frame, send_frame

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

WARDEN = [sys.executable, "-m", "warden"]


def _session(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def daemon_pids(home: Path) -> list[int]:
    """The daemon of `home` and its children that run a client's command (each in a session of
    its own, as the daemon is), not the spare that waits for the next request (`spare_pids`)."""
    return [pid for pid in _daemon_processes(home) if _session(pid) == pid]


def spare_pids(home: Path) -> list[int]:
    """The daemon's child forked ahead of the next request (still in the daemon's session)."""
    return [pid for pid in _daemon_processes(home) if _session(pid) not in (pid, None)]


def open_files(pid: int) -> dict[int, str]:
    """What each descriptor of `pid` is open on now. The process opens and closes files as it
    works (and may end): a descriptor listed and gone before it is read is not counted."""
    found = {}
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
                found[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return found


def _daemon_processes(home: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # Its home is `home` or lies under it (the session's end ends all of its tests').
        if b"warden.interfaces.cli.daemon" in argv and any(
                a == os.fsencode(str(home)) or a.startswith(os.fsencode(f"{home}/")) for a in argv):
            found.append(int(entry))
    return sorted(found)


def the_daemon(home: Path) -> int:
    """The daemon of `home` itself, not one of its children: the one whose parent is none of
    them (not the lowest pid: pids wrap around, at 32,768 on many machines, so a child may have
    a lower one, and a test killing "the daemon" killed the command instead)."""
    pids = daemon_pids(home)
    [daemon] = [pid for pid in pids if _parent(pid) not in (*pids, 0)]
    return daemon


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # it ended meanwhile (a child that ran its command)
        return 0
    return int(stat[stat.rindex(")") + 2:].split()[1])


def stop_daemon(home: Path) -> None:
    for pid in daemon_pids(home):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    poll(lambda: daemon_pids(home), timeout=10, want=False)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("daemon-home") / "warden-home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "TERM", "TZ", "TMPDIR"}}
    environ = {**keep, "HOME": str(home.parent), "WARDEN_HOME": str(home), "WARDEN_DAEMON_IDLE": "120"}
    created = subprocess.run([*WARDEN, "create", "dw", "--json"], env=environ, capture_output=True, timeout=120,
                             check=False)
    assert created.returncode == 0, created.stderr
    yield environ
    stop_daemon(home)


def warden(env: dict[str, str], *args: str, stdin: bytes = b"", extra: dict[str, str] | None = None,
           cwd: str | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*WARDEN, *args], input=stdin, env={**env, **(extra or {})}, capture_output=True,
                          timeout=120, check=False, cwd=cwd)


def served(env: dict[str, str]) -> Path:
    """The daemon of the test's home is up (the first client started it)."""
    home = Path(env["WARDEN_HOME"])
    path, _ = daemon_paths(str(home))
    warden(env, "run", "dw", "--", "true")

    def listening() -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            return probe.connect_ex(path) == 0

    wait_until(listening, timeout=30, message="the daemon did not start")
    return home


CASES = [
    ("run", "dw", "--", "sh", "-c", "echo out; echo err >&2; exit 3"),
    ("run", "dw", "--json", "--", "sh", "-c", "printf 'a\\nb'; exit 7"),
    ("run", "dw", "--env", "GREETING=hi there", "--", "sh", "-c", 'echo "$GREETING"; ulimit -t'),
    ("run", "dw", "--", "cat"),
    ("run", "dw", "--timeout", "1", "--", "sleep", "30"),
    ("run", "nosuch", "--", "true"),
    ("run", "dw", "--cwd", "../..", "--", "pwd"),
    ("run", "dw", "--", "no-such-program"),
    ("run", "dw", "--bogus", "--", "true"),
    ("run", "dw", "--", "sh", "-c", "kill -TERM $$"),
]


def _timeless(out: bytes) -> bytes:
    return re.sub(rb'"duration_s": [0-9.e-]+', b'"duration_s": 0', out)


def test_a_run_through_the_daemon_gives_what_a_run_alone_gives(env: dict[str, str]) -> None:
    home = served(env)
    for args in CASES:
        alone = warden(env, *args, stdin=b"fed\n", extra={"WARDEN_DAEMON": "0"})
        through = warden(env, *args, stdin=b"fed\n")
        # Durations differ; the rest of what was said does not.
        assert (through.returncode, _timeless(through.stdout), through.stderr) == \
            (alone.returncode, _timeless(alone.stdout), alone.stderr), args
    # The non-UTF-8 bytes of a command line travel as they are.
    odd = os.fsdecode(b"caf\xe9")
    through = warden(env, "run", "dw", "--", "printf", "%s", odd)
    assert through.returncode == 0 and through.stdout == b"caf\xe9"
    assert daemon_pids(home), "the commands did not go through a daemon"


def assert_through_a_child(home: Path, env: dict[str, str]) -> None:
    """A `warden run` with `env` runs in a child of the daemon (the client is not the one
    running it): the daemon and that child are seen while it runs."""
    proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sleep", "5"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: len(daemon_pids(home)) >= 2, timeout=10, message="no child of the daemon ran it")
    finally:
        proc.kill()
        proc.wait()


def assert_not_through_a_child(home: Path, env: dict[str, str], stdin: int = subprocess.DEVNULL) -> None:
    """A `warden run` with `env` and `stdin` runs in the client: the daemon gets no child."""
    # An earlier run's child may still be closing the registry: its client had its output and
    # status before that (the child lets go of them as it tells the status).
    wait_until(lambda: len(daemon_pids(home)) <= 1, timeout=10, message="an earlier run's child lived on")
    proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sleep", "3"], env=env, stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert poll(lambda: len(daemon_pids(home)) > 1, timeout=2) is False
    finally:
        proc.kill()
        proc.wait()


def test_the_command_runs_in_a_child_of_the_daemon(env: dict[str, str]) -> None:
    assert_through_a_child(served(env), env)


def test_ctrl_c_and_a_killed_client_stop_the_command(env: dict[str, str]) -> None:
    home = served(env)
    ws = home / "workspaces" / "dw"
    for how, status in ((signal.SIGINT, 130), (signal.SIGKILL, -9)):
        mark = ws / f"after-{how.name}"
        mark.unlink(missing_ok=True)
        proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", f"echo started; sleep 3; touch {mark.name}"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=at_a_terminal)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"started\n"
        proc.send_signal(how)
        assert proc.wait(timeout=30) == status, proc.stderr.read() if proc.stderr else b""
        time.sleep(4)  # past the command's own end, had it gone on
        assert not mark.exists(), f"the command went on after {how.name}"
        wait_until(lambda: len(daemon_pids(home)) == 1, timeout=10, message="the daemon's child lived on")


def test_another_environment_or_changed_code_is_run_by_the_client_itself(env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    # Its own copy of Warden's code and its own home: touching that copy makes this test's daemon
    # stale, never the daemons other tests (or a person) run from the real tree at the same time.
    code = tmp_path / "code"
    shutil.copytree(Path(daemon_module.__file__).parents[2], code / "warden",
                    ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "warden-home"
    home.mkdir()
    own = {**env, "HOME": str(tmp_path), "WARDEN_HOME": str(home), "PYTHONPATH": str(code)}
    assert warden(own, "create", "dw", "--template", "minimal").returncode == 0
    try:
        served(own)
        log = home / "run" / "daemon.log"
        other = warden(own, "run", "dw", "--", "sh", "-c", "echo fine", extra={"WARDEN_SOMETHING": "else"})
        assert (other.returncode, other.stdout) == (0, b"fine\n")
        assert "environment differs" in log.read_text() and "WARDEN_SOMETHING" in log.read_text()
        before = the_daemon(home)
        # The code on disk changes (an upgrade): the daemon takes no more commands and ends.
        module = code / "warden" / "interfaces" / "cli" / "daemon.py"
        stat = module.stat()
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

        def noticed() -> bool:  # it looks at the code once a second at most
            changed = warden(own, "run", "dw", "--", "sh", "-c", "echo still fine")
            assert (changed.returncode, changed.stdout) == (0, b"still fine\n")
            return "code changed" in log.read_text()

        wait_until(noticed, timeout=20, interval=0.3, message="the daemon did not notice the change")
        wait_until(lambda: before not in daemon_pids(home), timeout=10, message="the stale daemon lived on")
    finally:
        stop_daemon(home)


def test_only_its_owner_reaches_it(env: dict[str, str]) -> None:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root to act as another user")
    home = served(env)
    path, _ = daemon_paths(str(home))
    # Even through a path anyone may use (a link to the socket in /tmp, the socket's mode opened
    # to all), the daemon serves no other user: it checks the peer's credentials.
    door = Path(f"/tmp/warden-daemon-door-{os.getpid()}.sock")
    os.link(path, door)
    mode = door.stat().st_mode & 0o7777
    try:
        door.chmod(0o777)
        # The system interpreter and our sources (this test's own interpreter may be out of its reach).
        src = str(Path(daemon_module.__file__).parents[3])
        probe = "\n".join([
            f"import sys; sys.path.insert(0, {src!r})",
            "import socket",
            "from warden.interfaces.cli.entry import send_frame, encode_request, recv_frame",
            f"s = socket.socket(socket.AF_UNIX); s.connect({str(door)!r})",
            "try:",
            "    send_frame(s, encode_request(['run', 'dw', '--', 'touch', 'by-nobody'], {}, '/'),"
            " (0, 1, 2, 0, 0))",
            "    print(recv_frame(s)[0])",
            "except OSError as exc:",
            "    print('closed', type(exc).__name__)",
        ])
        out = subprocess.run([str(shutil.which("runuser")), "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c",
                              probe], capture_output=True, timeout=30, check=False)
    finally:
        door.chmod(mode)
        door.unlink()
    if b"No module named" in out.stderr or b"Permission denied: '/" in out.stderr:
        pytest.skip(f"the checkout is not readable by nobody: {out.stderr.strip()[-200:]!r}")
    # Closed on it at once: nothing answered, nothing ran.
    assert out.stdout.strip() in (b"None", b"closed BrokenPipeError", b"closed ConnectionResetError"), out
    assert not (home / "workspaces" / "dw" / "by-nobody").exists()


def test_a_daemon_killed_mid_run_costs_the_client_nothing(env: dict[str, str]) -> None:
    home = served(env)
    proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; sleep 1; echo done; exit 5"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"started\n"
    daemon = the_daemon(home)
    os.kill(daemon, signal.SIGKILL)
    assert proc.wait(timeout=30) == 5
    assert proc.stdout.read() == b"done\n"
    # The next client starts a new daemon (the dead one's socket is taken over).
    assert warden(env, "run", "dw", "--", "true").returncode == 0
    wait_until(lambda: daemon_pids(home) and daemon not in daemon_pids(home), timeout=30,
               message="no new daemon")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_daemon_told_to_stop_lets_its_running_command_end_then_ends(env: dict[str, str],
                                                                     sig: signal.Signals) -> None:
    """SIGTERM, SIGHUP or SIGINT (a service manager's stop, a person's `kill -HUP`): the daemon
    takes no new client, waits for its children (it reaps them, and says the status of one that a
    signal kills) and ends, its socket removed. SIGHUP ended it at once, SIGINT raised in it."""
    home = served(env)
    path, _ = daemon_paths(str(home))
    proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; sleep 1; echo done; exit 5"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"started\n"
    daemon = the_daemon(home)
    os.kill(daemon, sig)
    time.sleep(0.3)
    assert proc.poll() is None and daemon in daemon_pids(home), "the daemon did not wait for its running command"
    assert proc.wait(timeout=30) == 5
    assert proc.stdout.read() == b"done\n"
    wait_until(lambda: daemon not in daemon_pids(home), timeout=10, message="the daemon did not end")
    assert not os.path.exists(path)


def test_two_clients_at_once_start_one_daemon_and_an_idle_one_ends(env: dict[str, str]) -> None:
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    # Idle long enough that the one daemon is seen alone on a loaded machine, between the other
    # starters' exit (they find its lock taken) and its own idle end (CI saw neither at 2 s).
    quick = {**env, "WARDEN_DAEMON_IDLE": "6"}
    procs = [subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", f"exit {n}"], env=quick,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for n in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 1, 2, 3]
    wait_until(lambda: len(daemon_pids(home)) == 1, timeout=30, message="not exactly one daemon")
    path, _ = daemon_paths(str(home))
    wait_until(lambda: not daemon_pids(home) and not os.path.exists(path), timeout=30,
               message="the idle daemon did not end and remove its socket")


def test_a_terminal_on_stdin_or_wardens_switch_keeps_the_command_here(env: dict[str, str]) -> None:
    home = served(env)
    off = warden(env, "run", "dw", "--", "true", extra={"WARDEN_DAEMON": "0"})
    assert off.returncode == 0
    # With the daemon off nothing goes through it: its count of children stays at none.
    assert_not_through_a_child(home, {**env, "WARDEN_DAEMON": "0"})
    # A terminal on stdin: Ctrl-C there must reach the program, as in a run alone.
    import pty

    master, slave = pty.openpty()
    try:
        assert_not_through_a_child(home, env, stdin=slave)
    finally:
        os.close(master)
        os.close(slave)


def test_closed_streams_and_a_parents_signals_end_it_as_a_run_alone_would(env: dict[str, str]) -> None:
    home = served(env)
    ws = home / "workspaces" / "dw"
    shell = " ".join(WARDEN)
    for mode in ("0", "1"):
        for closed in (">&-", "2>&-", "<&-"):
            mark = f"mark-{mode}-{len(closed)}"
            # A closed stdout or stderr once gave a traceback, or a silent 1 with the command never run.
            proc = subprocess.run(["sh", "-c", f"exec {shell} run dw -- sh -c 'touch {mark}; echo ran' {closed}"],
                                  env={**env, "WARDEN_DAEMON": mode}, capture_output=True, timeout=60, check=False)
            assert proc.returncode == 0 and b"Traceback" not in proc.stderr, (mode, closed, proc)
            assert (ws / mark).exists(), (mode, closed)
        for how in (signal.SIGTERM, signal.SIGHUP):
            run = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; sleep 30"],
                                   env={**env, "WARDEN_DAEMON": mode}, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert run.stdout is not None and run.stdout.readline() == b"started\n"
            run.send_signal(how)
            # Killed by it, both ways: a parent sees the same death.
            assert run.wait(timeout=30) == -how, (mode, how.name)


def _sleeping(seconds: str) -> list[int]:
    """The processes running `sleep SECONDS` on this machine (a duration no other test uses)."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes() == f"sleep\0{seconds}\0".encode():
                found.append(int(entry))
    return found


def test_a_run_its_person_stops_ends_its_command_and_is_audited_interrupted(env: dict[str, str]) -> None:
    """Ctrl-C, SIGTERM (a supervisor's stop) and SIGHUP (a closed terminal), with and without the
    daemon: the command ends, and its outcome is a `run` event "interrupted" saying by what. A
    SIGTERM or SIGHUP used to end the process at once, with the run's intent and no outcome (a
    `run.lost` at the next sweep)."""
    served(env)
    stopped: list[str] = []
    for mode in ("0", "1"):
        for how, status in ((signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP)):
            run = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; exec sleep 47.25"],
                                   env={**env, "WARDEN_DAEMON": mode}, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=at_a_terminal)
            assert run.stdout is not None and run.stdout.readline() == b"started\n"
            run.send_signal(how)
            assert run.wait(timeout=30) == status, (mode, how.name, run.stderr.read() if run.stderr else b"")
            wait_until(lambda: _sleeping("47.25") == [], timeout=10, message=f"the command outlived {how.name}")
            listed = warden(env, "audit", "--workspace", "dw", "--limit", "3", "--json")
            events = json.loads(listed.stdout)["data"]
            outcome = max((e for e in events if e["action"] == "run"), key=lambda e: e["seq"])
            assert outcome["result"] == "interrupted", (mode, how.name, events)
            assert outcome["detail"]["interrupted_by"] == how.name
            assert outcome["detail"]["argv"][-1] == "echo started; exec sleep 47.25"
            stopped.append(outcome["detail"]["run_id"])
    assert warden(env, "run", "dw", "--", "true").returncode == 0  # the next run sweeps lost ones
    swept = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "200", "--json").stdout)["data"]
    assert [e for e in swept if e["action"] == "run.lost" and e["detail"]["run_id"] in stopped] == []


def test_a_sigterm_and_a_sighup_together_end_the_run_once_without_a_traceback(env: dict[str, str]) -> None:
    """Both pending at once (a supervisor's stop as the terminal closes; here: sent while the
    process is stopped): the first handled raises Terminated, the other passes over. The handler
    used to set SIG_IGN for the other, and Python, finding it ignored with its signal already
    on the way, printed "OSError: Signal 15 ignored due to race condition" with a traceback."""
    run = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; exec sleep 46.75"],
                           env={**env, "WARDEN_DAEMON": "0"}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    assert run.stdout is not None and run.stdout.readline() == b"started\n"
    run.send_signal(signal.SIGSTOP)
    run.send_signal(signal.SIGTERM)
    run.send_signal(signal.SIGHUP)
    run.send_signal(signal.SIGCONT)
    _, err = run.communicate(timeout=30)
    # Python runs the handler of the lower number first: SIGHUP's.
    assert (run.returncode, err) == (-signal.SIGHUP, b"warden: terminated (SIGHUP)\n")
    wait_until(lambda: _sleeping("46.75") == [], timeout=10, message="the command outlived its signals")
    events = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "3", "--json").stdout)["data"]
    outcome = max((e for e in events if e["action"] == "run"), key=lambda e: e["seq"])
    assert (outcome["result"], outcome["detail"]["interrupted_by"]) == ("interrupted", "SIGHUP")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stopping_signal_once_the_run_is_over_is_no_traceback(env: dict[str, str], sig: str) -> None:
    """SIGTERM or SIGINT as `warden` writes its last words (its command over, its outcome
    audited), or after main() returned, as the interpreter ends: the handler raised Terminated
    or KeyboardInterrupt there, which escaped main() or the interpreter's shutdown as a traceback
    ("Exception ignored in: <module 'threading'>"); in the daemon's child, whose client hangs up
    as soon as it has the status and which the daemon then interrupts, it cut the child's last
    lines short. It now ends with its command's status. The signal is sent by the process itself
    at that point, as a supervisor's or the daemon's could come; SIGINT handled as at a terminal."""
    program = ("import os, signal, sys, time\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "from warden.interfaces.cli.main import main\n"
               f"stop = lambda *_: os.kill(os.getpid(), signal.{sig})\n"
               "last = stop if sys.argv[1] == 'last' else None\n"
               "status = main(['run', 'dw', '--', 'sh', '-c', 'exit 3'], settled=last)\n"
               "if sys.argv[1] == 'after': stop(); time.sleep(0.2)\n"
               "sys.exit(status)\n")
    for when in ("last", "after"):
        done = subprocess.run([sys.executable, "-c", program, when], env={**env, "WARDEN_DAEMON": "0"},
                              capture_output=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
        assert (done.returncode, done.stderr) == (3, b""), (when, done.stderr.decode(errors="replace"))


def _stopped_inside(env: dict[str, str], module: str, method: str, args: list[str],
                    sig: signal.Signals = signal.SIGTERM) -> subprocess.CompletedProcess[bytes]:
    """`warden ARGS` (without the daemon) sending itself `sig` as `module`'s `Class.method`
    begins: the signal lands exactly there. SIGINT is handled as at a terminal (Python's
    KeyboardInterrupt), whatever the test runner left it."""
    owner, name = method.split(".")
    program = ("import importlib, os, signal, sys\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "from warden.interfaces.cli.main import run\n"
               f"owner = getattr(importlib.import_module({module!r}), {owner!r})\n"
               f"original = getattr(owner, {name!r})\n"
               "def stopped_there(*args, **kwargs):\n"
               f"    os.kill(os.getpid(), {int(sig)})\n"
               "    return original(*args, **kwargs)\n"
               f"setattr(owner, {name!r}, stopped_there)\n"
               f"sys.argv = ['warden', *{args!r}]\n"
               "run()\n")
    return _python(env, program)


def _python(env: dict[str, str], program: str) -> subprocess.CompletedProcess[bytes]:
    """`program` run by this Python without the daemon, its stdin closed: a CLI patched in place."""
    return subprocess.run([sys.executable, "-c", program], env={**env, "WARDEN_DAEMON": "0"}, capture_output=True,
                          timeout=120, check=False, stdin=subprocess.DEVNULL)


def _stopped_as(sig: signal.Signals) -> tuple[int, bytes, bytes]:
    """How `warden run` (no output of its command) ends by `sig`: its status, stdout and stderr."""
    said = b"warden: terminated (SIGTERM)\n" if sig == signal.SIGTERM else b"warden: interrupted\n"
    return (-sig if sig == signal.SIGTERM else 130), b"", said


def _audited_interrupted(env: dict[str, str], sig: signal.Signals) -> None:
    """The last two events of workspace dw are one run's start and its end, interrupted by `sig`."""
    events = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "2", "--json").stdout)["data"]
    started, ended = events
    assert (started["action"], ended["action"], ended["result"]) == ("run.start", "run", "interrupted"), events
    assert ended["detail"]["run_id"] == started["detail"]["run_id"]
    assert ended["detail"]["interrupted_by"] == sig.name


def test_a_termination_signal_as_the_outcome_is_written_leaves_no_run_in_progress(env: dict[str, str]) -> None:
    """SIGTERM while the run's lease is given back with its outcome (a few milliseconds): the
    handler's Terminated rolled that write back, leaving the run "in progress" (a `run.lost` at
    the next sweep) and its lease held until it expired. It is now raised once the write is
    done: the outcome audited, the lease free, and `warden` still ends by the signal. The signal
    is sent by the process itself at that point (the outcome's write, patched to send it first)."""
    done = _stopped_inside(env, "warden.services.runs_in_progress", "RunsInProgress.end",
                           ["run", "dw", "--", "sh", "-c", "echo stopped-as-written; exit 4"])
    assert (done.returncode, done.stdout, done.stderr) == (-signal.SIGTERM, b"stopped-as-written\n",
                                                          b"warden: terminated (SIGTERM)\n"), done
    events = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "3", "--json").stdout)["data"]
    outcome = max((e for e in events if e["action"] == "run"), key=lambda e: e["seq"])
    assert outcome["result"] == "4" and outcome["detail"]["argv"][-1] == "echo stopped-as-written; exit 4", events
    assert warden(env, "run", "dw", "--", "true").returncode == 0  # the next run sweeps lost ones
    swept = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "20", "--json").stdout)["data"]
    lost = [e for e in swept if e["action"] == "run.lost" and e["detail"]["run_id"] == outcome["detail"]["run_id"]]
    assert lost == []


def test_a_ctrl_c_as_the_outcome_is_written_leaves_no_run_in_progress(env: dict[str, str]) -> None:
    """Ctrl-C (SIGINT) while the run's lease is given back with its outcome: Python's
    KeyboardInterrupt, raised there, rolled that write back as SIGTERM's Terminated did (the run
    "in progress", a `run.lost` later, its outcome never audited, its lease held until it
    expired). It is held back the same way: the outcome audited, the lease free, `warden` says
    it was interrupted (130)."""
    done = _stopped_inside(env, "warden.services.runs_in_progress", "RunsInProgress.end",
                           ["run", "dw", "--", "sh", "-c", "echo interrupted-as-written; exit 5"], signal.SIGINT)
    assert (done.returncode, done.stdout, done.stderr) == (130, b"interrupted-as-written\n",
                                                          b"warden: interrupted\n"), done
    events = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "3", "--json").stdout)["data"]
    outcome = max((e for e in events if e["action"] == "run"), key=lambda e: e["seq"])
    assert outcome["result"] == "5" and outcome["detail"]["argv"][-1] == "echo interrupted-as-written; exit 5", events
    held = warden(env, "run", "dw", "--", "true")  # the lease is free, and the next run sweeps lost ones
    assert held.returncode == 0, held.stderr
    swept = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "20", "--json").stdout)["data"]
    lost = [e for e in swept if e["action"] == "run.lost" and e["detail"]["run_id"] == outcome["detail"]["run_id"]]
    assert lost == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_as_a_class_is_made_is_a_stop_not_an_internal_error(env: dict[str, str], sig: signal.Signals) -> None:
    """A stop that lands in a class's `__set_name__` (a module of dataclasses loading as the run
    goes: 1 `warden run` in 60 of a fuzz of signals) is wrapped by Python 3.11 in a RuntimeError:
    `warden` said "internal error" (1) and the run's intent stayed without an outcome. It is the
    stop it carries: "terminated" or "interrupted", the run's outcome audited as interrupted."""
    program = ("import os, signal, sys\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "from warden.interfaces.cli.main import run\n"
               "from warden.services import runs\n"
               "original = runs.RunService._sandboxed\n"
               "class Stopping:\n"
               "    def __set_name__(self, owner, name):\n"
               f"        os.kill(os.getpid(), {int(sig)})\n"
               "        for _ in range(1000): pass  # its handler runs here, raising the stop\n"
               "def stopped_there(*args, **kwargs):\n"
               "    class Loading:\n"
               "        field = Stopping()\n"
               "    return original(*args, **kwargs)\n"
               "runs.RunService._sandboxed = stopped_there\n"
               "sys.argv = ['warden', 'run', 'dw', '--', 'echo', 'never']\n"
               "run()\n")
    done = _python(env, program)
    assert (done.returncode, done.stdout, done.stderr) == _stopped_as(sig), done
    _audited_interrupted(env, sig)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_in_a_weakref_callback_is_not_lost(env: dict[str, str], sig: signal.Signals) -> None:
    """A stop whose handler runs inside a weakref callback (importlib's module lock's, as a
    module loads: 1 `warden checkpoint` in 40 of a sweep of SIGTERMs) or a `__del__` is one
    Python can only print: "Exception ignored in: <function _get_module_lock.<locals>.cb>",
    a traceback, and the command went on to its end (0) with every later SIGTERM passed over.
    It is the stop it is: "terminated" or "interrupted", the run's outcome audited as such.
    The callback (of an object dropped as the run starts) sends the signal itself."""
    program = ("import os, signal, sys, weakref\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "from warden.interfaces.cli.main import run\n"
               "from warden.services import runs\n"
               "original = runs.RunService._sandboxed\n"
               "class Dropped: pass\n"
               "def stopping(_ref):\n"
               f"    os.kill(os.getpid(), {int(sig)})\n"
               "    for _ in range(1000): pass  # its handler runs here, inside the callback\n"
               "def stopped_there(*args, **kwargs):\n"
               "    dropped = Dropped()\n"
               "    ref = weakref.ref(dropped, stopping)\n"
               "    del dropped  # the callback runs now\n"
               "    return original(*args, **kwargs)\n"
               "runs.RunService._sandboxed = stopped_there\n"
               "sys.argv = ['warden', 'run', 'dw', '--', 'sh', '-c', 'sleep 20; echo never']\n"
               "run()\n")
    done = _python(env, program)
    # Where the stop comes again (as the run starts, or in its command) is the interpreter's to
    # say; that it comes, and what it leaves, is not.
    code, _, said = _stopped_as(sig)
    assert (done.returncode, done.stdout) == (code, b""), done
    assert done.stderr.endswith(said) and b"Traceback" not in done.stderr, done
    _audited_interrupted(env, sig)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_as_a_background_process_starts_leaves_it_neither_running_nor_unrecorded(
        env: dict[str, str], sig: signal.Signals) -> None:
    """`warden run --detach` stopped just as the supervisor started its process (1 in 80 of a
    fuzz of signals): the process ran on, its row left "starting" (or deleted), while the start
    said "interrupted" and audited the run interrupted; a later archive killed it, a second
    outcome. Now the stop waits until it is recorded running, then it is killed: one outcome
    (137, background), nothing left running. The signal is sent as the spawn returns."""
    seconds = "4711" if sig == signal.SIGTERM else "4712"  # its own process, found by its arguments
    program = ("import os, signal, sys\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "from warden.interfaces.cli.main import run\n"
               "from warden.adapters.sandbox.live import HostLiveSandboxes\n"
               "original = HostLiveSandboxes.spawn\n"
               "def spawned_then_stopped(*args, **kwargs):\n"
               "    meta = original(*args, **kwargs)\n"
               f"    os.kill(os.getpid(), {int(sig)})\n"
               "    for _ in range(1000): pass  # its handler runs here\n"
               "    return meta\n"
               "HostLiveSandboxes.spawn = spawned_then_stopped\n"
               f"sys.argv = ['warden', 'run', 'dw', '--detach', '--', 'sleep', '{seconds}']\n"
               "run()\n")
    done = _python(env, program)
    assert (done.returncode, done.stdout, done.stderr) == _stopped_as(sig), done
    try:
        wait_until(lambda: not _sleeping(seconds), timeout=10, message="the process it started runs on")
        listed = json.loads(warden(env, "ps", "dw", "--json").stdout)["data"]
        mine = [p for p in listed if p["cmd"] == ["sleep", seconds]]
        assert [p["status"] for p in mine] == ["killed"], listed
        events = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "40", "--json").stdout)["data"]
        ours = [e for e in events if e["detail"].get("run_id") == mine[0]["id"]]
        assert [(e["action"], e["result"]) for e in ours] == [("run.start", "started"), ("run", "137")], ours
    finally:
        for step in ("suspend", "resume"):  # its live sandbox stopped: a sandbox left up keeps the daemon going
            warden(env, step, "dw", extra={"WARDEN_DAEMON": "0"})


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_as_a_destroy_moves_its_folder_away_leaves_no_folder_behind(env: dict[str, str],
                                                                          sig: signal.Signals) -> None:
    """A stop once a destroy's row removal was committed, before its folder was moved to the
    trash: the workspace was gone from the registry while its folder stayed, and `warden create`
    of the name was refused ("already exists but is not a registered workspace") until a person
    moved it away. The folder goes with its row. The process sends itself the signal as the
    folder is about to be moved."""
    home, name = Path(env["WARDEN_HOME"]), f"dd{int(sig)}"
    made = warden(env, "create", name, "--template", "minimal")
    assert made.returncode == 0, made.stderr
    done = _stopped_inside(env, "warden.services.folders", "FolderService.trash", ["destroy", name, "--yes"], sig)
    assert b"Traceback" not in done.stderr, done
    assert not (home / "workspaces" / name).exists(), done
    assert warden(env, "info", name).returncode != 0
    again = warden(env, "create", name, "--template", "minimal")
    assert again.returncode == 0, again.stderr


def test_a_destroy_killed_before_its_folder_moved_is_finished_by_the_next_sweep(env: dict[str, str]) -> None:
    """kill -9 once a destroy's row removal was committed, before its folder was moved to the
    trash: no handler runs, the folder stays, and `warden create` of the name is refused. The
    destroy's audit event (written with the row's removal) names the workspace's id, which its
    folder's `.workspace.json` names too: `warden doctor --fix` finishes the destroy. A folder no
    destroy recorded — a person's, or one naming another id — is left alone."""
    home, name = Path(env["WARDEN_HOME"]), "dk9"
    assert warden(env, "create", name, "--template", "minimal").returncode == 0
    killed = _stopped_inside(env, "warden.services.folders", "FolderService.trash", ["destroy", name, "--yes"],
                             signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL, killed
    folder = home / "workspaces" / name
    assert folder.is_dir() and warden(env, "info", name).returncode != 0
    refused = warden(env, "create", name, "--template", "minimal")
    assert refused.returncode != 0 and b"`warden doctor --fix` removes" in refused.stderr, refused
    persons = home / "workspaces" / "persons-own"  # a folder no destroy recorded, one with a copied id
    persons.mkdir()
    (persons / ".workspace.json").write_bytes((folder / ".workspace.json").read_bytes())
    planted = home / "workspaces" / "planted"
    planted.mkdir()
    (planted / ".workspace.json").write_text('{"id": "ws_0000000000000000"}')

    swept = warden(env, "doctor", "--fix", "--json", extra={"WARDEN_DAEMON": "0"})
    report = json.loads(swept.stdout)["data"]["swept"]
    assert report["destroyed_folders"] == [str(folder)], report
    assert str(persons) in report["orphan_folders"] and str(planted) in report["orphan_folders"], report
    assert not folder.exists() and persons.is_dir() and planted.is_dir()
    assert warden(env, "create", name, "--template", "minimal").returncode == 0

    # Killed again, then the folder moved away and copied back by hand (`cp -a`: its mtimes kept)
    # once the destroy is over a second old: a person's copy, newer than the destroy, stays.
    killed = _stopped_inside(env, "warden.services.folders", "FolderService.trash", ["destroy", name, "--yes"],
                             signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL and folder.is_dir(), killed
    aside = home / "workspaces" / "dk9-aside"
    folder.rename(aside)
    destroyed_at = time.time()
    wait_until(lambda: time.time() > destroyed_at + 1.5, message="the clock stopped")
    shutil.copytree(aside, folder, symlinks=True)  # copy2: mtimes kept, ctimes new
    report = json.loads(warden(env, "doctor", "--fix", "--json", extra={"WARDEN_DAEMON": "0"}).stdout)["data"]["swept"]
    assert report["destroyed_folders"] == [] and str(folder) in report["orphan_folders"], report
    assert folder.is_dir() and aside.is_dir()
    assert warden(env, "audit", "verify").returncode == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_as_a_rollback_changes_the_files_is_audited(env: dict[str, str], sig: signal.Signals) -> None:
    """A stop while a rollback wrote the workspace's files (or once it had): only a WardenError
    was audited, so the files were changed and the log said nothing of it. The rollback is
    audited "interrupted", with the checkpoint what was there was saved as. The process sends
    itself the signal as the files have been written."""
    home = Path(env["WARDEN_HOME"])
    (home / "workspaces" / "dw" / "kept.txt").write_text("old\n")
    saved = warden(env, "checkpoint", "dw", "--json")
    assert saved.returncode == 0, saved.stderr
    checkpoint = json.loads(saved.stdout)["data"]["id"]
    (home / "workspaces" / "dw" / "kept.txt").write_text("new\n")
    program = ("import os, signal, sys\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "from warden.interfaces.cli.main import run\n"
               "from warden.adapters.versions import HostVersionStore\n"
               "original = HostVersionStore.apply\n"
               "def applied_then_stopped(*args, **kwargs):\n"
               "    original(*args, **kwargs)\n"
               f"    os.kill(os.getpid(), {int(sig)})\n"
               "    for _ in range(1000): pass  # its handler runs here\n"
               "HostVersionStore.apply = applied_then_stopped\n"
               f"sys.argv = ['warden', 'rollback', 'dw', {checkpoint!r}]\n"
               "run()\n")
    done = _python(env, program)
    assert b"Traceback" not in done.stderr and done.returncode != 0, done
    assert (home / "workspaces" / "dw" / "kept.txt").read_text() == "old\n"
    events = json.loads(warden(env, "audit", "--workspace", "dw", "--limit", "20", "--json").stdout)["data"]
    rolled = [e for e in events if e["action"] == "checkpoint.rollback" and e["detail"]["checkpoint"] == checkpoint]
    assert [e["result"] for e in rolled] == ["interrupted"], events
    assert rolled[0]["detail"]["saved_as"] and rolled[0]["detail"]["interrupted_by"] == sig.name, rolled


def test_a_termination_signal_as_the_output_is_written_is_said_not_a_traceback(env: dict[str, str]) -> None:
    """SIGTERM as `warden` writes a command's output (after its handler, before its last words):
    Terminated escaped main() as a traceback (and a daemon's child serving a client ended with 1
    and no word). It ends as a stopped command does. The process sends the signal itself there."""
    done = _stopped_inside(env, "warden.interfaces.cli.output", "Output.human", ["list"])
    assert (done.returncode, done.stdout, done.stderr) == (-signal.SIGTERM, b"", b"warden: terminated (SIGTERM)\n")


def test_a_variable_warden_does_not_read_keeps_the_fast_way(env: dict[str, str]) -> None:
    extra = {**env, "SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22", "VIRTUAL_ENV": "/somewhere", "WARDEN_DAEMON": "1"}
    assert_through_a_child(served(env), extra)


def test_it_looks_after_the_homes_live_sandboxes(env: dict[str, str]) -> None:
    # Without a server running, a background process's end was audited only once someone
    # looked at it (`warden ps`, `logs`, `wait`); the daemon now looks every few seconds.
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    quick = {**env, "WARDEN_DAEMON_SWEEP": "1"}
    served(quick)
    started = warden(quick, "run", "dw", "--detach", "--", "sh", "-c", "exit 4")
    assert started.returncode == 0, started.stderr
    process_id = started.stdout.decode().strip()

    def audited() -> bool:
        shown = warden(quick, "audit", "--limit", "20", "--json", extra={"WARDEN_DAEMON": "0"})
        return any(e["action"] == "run" and e.get("detail", {}).get("run_id") == process_id
                   and e.get("detail", {}).get("exit_code") == 4 for e in json.loads(shown.stdout)["data"])

    wait_until(audited, timeout=30, interval=0.5, message="the background process's end was not audited")
    stop_daemon(home)


def test_background_processes_that_fill_the_workspace_past_its_quota_are_stopped(env: dict[str, str]) -> None:
    # The disk quota was watched for foreground runs only: a background process could fill the
    # disk in files each under the cap (the room left when it started).
    from warden.adapters.quota import HostDisk

    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    used = HostDisk().measure(str(home / "workspaces" / "dw")).bytes
    quota = {**env, "WARDEN_DAEMON_SWEEP": "1", "WARDEN_WORKSPACE_MAX_DISK": str(used + 3_000_000)}
    served(quota)
    started = warden(quota, "run", "dw", "--detach", "--", "sh", "-c",
                     "for i in 1 2 3 4 5 6; do head -c 1000000 /dev/zero > fill-$i; done; sleep 300")
    assert started.returncode == 0, started.stderr
    process_id = started.stdout.decode().strip()

    def stopped() -> dict[str, object] | None:
        shown = warden(quota, "audit", "--limit", "30", "--json", extra={"WARDEN_DAEMON": "0"})
        for event in json.loads(shown.stdout)["data"]:
            detail = event.get("detail", {})
            if event["action"] == "run" and detail.get("run_id") == process_id:
                return dict(detail)
        return None

    ended = wait_until(stopped, timeout=30, interval=0.5, message="the background process was not stopped")
    assert "over workspace.max_disk" in str(ended.get("stopped_by")) and ended.get("exit_code") == 137
    for i in range(1, 7):
        (home / "workspaces" / "dw" / f"fill-{i}").unlink(missing_ok=True)
    stop_daemon(home)


SCRIPT = Path(sys.executable).with_name("warden")  # the console script, as a person runs `warden`


def test_a_module_planted_in_the_current_folder_never_loads_in_the_daemon(env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    # The daemon was started with `python -m`, which puts the current folder first on the import
    # path: a bot's `selectors.py` in the workspace ran as the home's owner, outside the sandbox.
    if not SCRIPT.exists():
        pytest.skip("no console script next to this interpreter")
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    canary = tmp_path / "canary"
    planted = home / "workspaces" / "dw"
    (planted / "selectors.py").write_text(f"open({str(canary)!r}, 'a').write('loaded')\nraise ImportError\n")
    try:
        for _ in range(3):
            ran = subprocess.run([str(SCRIPT), "run", "dw", "--", "true"], env=env, cwd=planted,
                                 stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
            assert ran.returncode == 0, ran.stderr
            time.sleep(0.5)
        wait_until(lambda: daemon_pids(home), timeout=20, message="no daemon started")
        assert not canary.exists(), "a module of the current folder loaded in the daemon"
    finally:
        (planted / "selectors.py").unlink()
        stop_daemon(home)


def test_the_commands_umask_and_limits_are_the_clients(env: dict[str, str]) -> None:
    # A daemon started under `umask 077; ulimit -n 100` ran every later command with them.
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    shell = " ".join(WARDEN)
    probe = "run dw -- sh -c 'umask; ulimit -n'"
    first = subprocess.run(["sh", "-c", f"umask 077; ulimit -n 100; {shell} {probe} </dev/null"], env=env,
                           capture_output=True, timeout=60, check=False)
    assert first.stdout.split() == [b"0077", b"100"], first
    wait_until(lambda: daemon_pids(home), timeout=20, message="no daemon started")
    for mask, files in (("022", "1000"), ("027", "200")):
        alone = subprocess.run(["sh", "-c", f"umask {mask}; ulimit -n {files}; {shell} {probe} </dev/null"],
                               env={**env, "WARDEN_DAEMON": "0"}, capture_output=True, timeout=60, check=False)
        through = subprocess.run(["sh", "-c", f"umask {mask}; ulimit -n {files}; {shell} {probe} </dev/null"],
                                 env=env, capture_output=True, timeout=60, check=False)
        assert through.stdout == alone.stdout == f"0{mask}\n{files}\n".encode(), (through, alone)
    stop_daemon(home)


def test_a_client_that_trickles_its_request_holds_up_no_one_for_long(env: dict[str, str]) -> None:
    home = served(env)
    path, _ = daemon_paths(str(home))
    slow = socket.socket(socket.AF_UNIX)
    slow.connect(path)
    slow.sendall(struct.pack("!I", 1000) + b"w")  # promises 1000 bytes, sends one
    try:
        started = time.monotonic()
        ran = warden(env, "run", "dw", "--", "true")
        assert ran.returncode == 0 and time.monotonic() - started < 4, time.monotonic() - started
    finally:
        slow.close()


def test_a_run_folder_others_may_enter_is_not_trusted(env: dict[str, str]) -> None:
    home = served(env)
    run = home / "run"
    run.chmod(0o755)
    try:
        assert_not_through_a_child(home, env)  # it runs, in the client
        assert warden(env, "run", "dw", "--", "true").returncode == 0
    finally:
        run.chmod(0o700)


def _log_after(home: Path, start: int) -> str:
    log = home / "run" / "daemon.log"
    return log.read_text()[start:] if log.exists() else ""


def _log_size(home: Path) -> int:
    log = home / "run" / "daemon.log"
    return len(log.read_text()) if log.exists() else 0


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_client_confined_otherwise_is_never_served_and_never_confines_others(env: dict[str, str]) -> None:
    # The daemon took the client's word for its context, and compared only namespaces and
    # cgroups: a client under no_new_privs, other capabilities or CPUs was served by the
    # unconfined daemon; and a daemon started by a confined client confined everyone after.
    home = Path(env["WARDEN_HOME"])
    for confined in (["setpriv", "--no-new-privs"], ["taskset", "-c", "0"]):
        if shutil.which(confined[0]) is None or (confined[0] == "taskset" and (os.cpu_count() or 1) < 2):
            continue
        served(env)
        start = _log_size(home)
        ran = subprocess.run([*confined, *WARDEN, "run", "dw", "--", "echo", "fine"], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
        assert (ran.returncode, ran.stdout) == (0, b"fine\n"), ran
        assert "another" in _log_after(home, start), (confined, _log_after(home, start))
        # The other way round: a daemon a confined client started serves no plain client.
        stop_daemon(home)
        for _ in range(2):
            subprocess.run([*confined, *WARDEN, "run", "dw", "--", "true"], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60, check=False)
            time.sleep(0.5)
        wait_until(lambda: daemon_pids(home), timeout=20, message="the confined client started no daemon")
        start = _log_size(home)
        plain = warden(env, "run", "dw", "--", "echo", "plain")
        assert (plain.returncode, plain.stdout) == (0, b"plain\n")
        assert "another" in _log_after(home, start)
        stop_daemon(home)


def test_only_warden_run_on_its_home_with_a_right_to_write_there_is_served(env: dict[str, str]) -> None:
    home = served(env)
    path, lock = daemon_paths(str(home))

    def ask(argv: list[str], proof_flags: int, cwd: str | None = None) -> bytes | None:
        proof, me = os.open(lock, proof_flags), os.pidfd_open(os.getpid())
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                send_frame(sock, encode_request(argv, dict(env), cwd or str(home)), (0, 1, 2, proof, me))
                return recv_frame(sock, deadline=time.monotonic() + 30)[0]
        finally:
            os.close(proof)
            os.close(me)

    # What a well-formed request gets: served (the check below refuses for its own reasons).
    assert (ask(["run", "dw", "--", "true"], os.O_RDWR) or b"").startswith(b"pid")

    # Another command (the client sends only `run`): a confused deputy for the whole CLI.
    assert ask(["create", "w2"], os.O_RDWR) is not None and not (home / "workspaces" / "w2").exists()
    assert (ask(["create", "w2"], os.O_RDWR) or b"").startswith(b"fallback")
    # Its lock file open for reading only: no proof it may write in the home (a Landlock
    # ruleset or a read-only mount around the client refuses the write open).
    assert (ask(["run", "dw", "--", "touch", "by-reader"], os.O_RDONLY) or b"").startswith(b"fallback")
    assert not (home / "workspaces" / "dw" / "by-reader").exists()
    # Another home named on the command line, or a terminal asked for, as the CLI's parser reads
    # them (abbreviated: `--ho`, `--tt`; a relative home is the client's folder's).
    assert (ask(["run", "--home", "/tmp/elsewhere", "dw", "--", "true"], os.O_RDWR) or b"").startswith(b"fallback")
    assert (ask(["run", "--ho", "/tmp/elsewhere", "dw", "--", "true"], os.O_RDWR) or b"").startswith(b"fallback")
    assert (ask(["run", "--tt", "dw", "--", "true"], os.O_RDWR) or b"").startswith(b"fallback")
    elsewhere = home.parent / "client-folder"
    (elsewhere / str(home).lstrip("/")).mkdir(parents=True, exist_ok=True)  # `--home` relative to it
    relative = ["run", "--home", str(home).lstrip("/"), "dw", "--", "touch", "by-relative"]
    assert (ask(relative, os.O_RDWR, cwd=str(elsewhere)) or b"").startswith(b"fallback")
    # A `..` after a link: text says this home, the kernel another (the link's parent's).
    (home.parent / "other" / "sub").mkdir(parents=True, exist_ok=True)
    link = home.parent / "lnk"
    if not link.is_symlink():
        link.symlink_to(home.parent / "other" / "sub")
    dotted = ["run", "--home", f"{link}/../{home.name}", "dw", "--", "true"]
    assert (ask(dotted, os.O_RDWR) or b"").startswith(b"fallback")
    assert "on this daemon's home" in (home / "run" / "daemon.log").read_text()


def test_the_process_judged_is_the_one_that_asks(env: dict[str, str]) -> None:
    # The daemon judged the process that connected; a child it forked (or one it passed the
    # socket to), confined otherwise, could then send the request.
    home = served(env)
    path, lock = daemon_paths(str(home))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        child = os.fork()
        if child == 0:
            try:
                proof, mine = os.open(lock, os.O_RDWR), os.pidfd_open(os.getpid())
                send_frame(sock, encode_request(["run", "dw", "--", "touch", "by-child"], dict(env), str(home)),
                           (0, 1, 2, proof, mine))
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        answer = recv_frame(sock, deadline=time.monotonic() + 30)[0]
    assert (answer or b"").startswith(b"fallback"), answer
    assert not (home / "workspaces" / "dw" / "by-child").exists()
    assert "pidfd of the process that connected" in (home / "run" / "daemon.log").read_text()
    # Its parent's pidfd (the connector's) with the child's request: the kernel's stamp says who sent it.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        parents = os.pidfd_open(os.getpid())
        child = os.fork()
        if child == 0:
            try:
                proof = os.open(lock, os.O_RDWR)
                send_frame(sock, encode_request(["run", "dw", "--", "touch", "by-child"], dict(env), str(home)),
                           (0, 1, 2, proof, parents))
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        os.close(parents)
        answer = recv_frame(sock, deadline=time.monotonic() + 30)[0]
    assert (answer or b"").startswith(b"fallback"), answer
    assert "came from another process" in (home / "run" / "daemon.log").read_text()
    assert not (home / "workspaces" / "dw" / "by-child").exists()


def test_a_live_sandbox_folder_a_killed_warden_left_does_not_keep_it_going(env: dict[str, str]) -> None:
    # It stayed while any `run/sbx_…` folder existed: one with no sandbox behind it (a Warden
    # killed between its start and its record) kept it, and its sweeps, going for good.
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    # A live sandbox an earlier test's `--detach` left (idle for 10 min) rightly keeps the daemon
    # going: suspending the workspace stops it, so only the dead folder is left to be judged (run
    # alone, or with `-k live`, this test found the one test_it_looks_after_… left).
    for step in ("suspend", "resume"):
        done = warden(env, step, "dw")
        assert done.returncode == 0, done.stderr
    (home / "run").mkdir(mode=0o700, exist_ok=True)  # as Warden makes it: its own, closed to others
    left = home / "run" / f"sbx_{'0' * 16}"
    left.mkdir()
    try:
        quick = {**env, "WARDEN_DAEMON_SWEEP": "0.5", "WARDEN_DAEMON_IDLE": "1"}
        # Seen listening while its command runs: idle for 1 s after a quick one, a daemon that did
        # its job could be gone before a loaded machine looked (`served` then said it never started).
        path, _ = daemon_paths(str(home))
        running = subprocess.Popen([*WARDEN, "run", "dw", "--", "sleep", "3"], env=quick, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def listening() -> bool:
            with socket.socket(socket.AF_UNIX) as probe:
                return probe.connect_ex(path) == 0

        wait_until(lambda: listening() or running.poll() is not None, timeout=60, message="the run never ended")
        assert listening(), "the daemon did not start"
        _, err = running.communicate(timeout=120)
        assert running.returncode == 0, err
        wait_until(lambda: not daemon_pids(home), timeout=30, message="the daemon stayed for a dead sandbox's folder")
    finally:
        left.rmdir()


def test_a_run_without_a_name_finds_the_terminals_current_workspace_through_the_daemon(env: dict[str, str]) -> None:
    # A newcomer's `warden @dw` then `warden run -- pwd` from a script (no terminal on stdin, so
    # through the daemon): the client names its shell's session, which the daemon's child must
    # take as this terminal's, as the client alone would.
    home = served(env)
    assert warden(env, "ws", "set", "dw").returncode == 0
    alone = warden(env, "run", "--", "pwd", extra={"WARDEN_DAEMON": "0"})
    assert alone.returncode == 0 and alone.stdout.strip().endswith(b"/dw"), alone.stderr
    proc = subprocess.Popen([*WARDEN, "run", "--", "sh", "-c", "pwd; sleep 2"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: len(daemon_pids(home)) >= 2, timeout=10, message="no child of the daemon ran it")
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, alone.stdout), err
    # A client in another session that names this one's is not taken for it: its name is a
    # chosen one (hashed), which has no current workspace.
    mine = warden(env, "ws", "current", "--json").stdout
    assert b'"dw"' in mine
    from warden.adapters.terminal_id import session_terminal

    other = subprocess.run([*WARDEN, "run", "--", "pwd"], env={**env, "WARDEN_TERMINAL": session_terminal()},
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False,
                           start_new_session=True)
    assert other.returncode == 126 and b"none is current" in other.stderr, other.stderr


def test_a_spare_child_waits_for_the_next_command_and_runs_it(env: dict[str, str]) -> None:
    """While idle the daemon keeps one child forked ahead (its memory already its own): the next
    `warden run` is served by that very process, and another spare follows."""
    home = served(env)
    [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
    assert _parent(spare) == the_daemon(home)
    proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sleep", "3"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # The spare took the request: it is now the child running it, in a session of its own.
        wait_until(lambda: spare in daemon_pids(home), timeout=10, message="the spare did not take the command")
        assert spare not in spare_pids(home)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    new = wait_until(lambda: [p for p in spare_pids(home) if p != spare], timeout=10,
                     message="no new spare after the command")
    assert new and spare not in _daemon_processes(home)


def test_a_dead_spare_costs_the_next_command_nothing(env: dict[str, str]) -> None:
    home = served(env)
    for _ in range(2):  # killed while it waits; then killed and the command right behind it
        [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
        os.kill(spare, signal.SIGKILL)
        result = warden(env, "run", "dw", "--", "echo", "still served")
        assert (result.returncode, result.stdout) == (0, b"still served\n"), result.stderr
    assert_through_a_child(home, env)
    wait_until(lambda: spare_pids(home), timeout=10, message="no spare forked again")


def test_a_spare_that_dies_waiting_is_not_forked_again_and_again(env: dict[str, str]) -> None:
    """A spare that died waiting was replaced at once: one that cannot live (out of memory in
    its cgroup, a reaper of idle processes) was forked again and again, hundreds a second. The
    next is forked once a request has been served."""
    home = served(env)
    [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
    os.kill(spare, signal.SIGKILL)
    wait_until(lambda: spare not in _daemon_processes(home), timeout=10, message="the killed spare was not reaped")
    assert poll(lambda: spare_pids(home), timeout=2) == [], "a spare was forked again at once"
    result = warden(env, "run", "dw", "--", "echo", "served")
    assert (result.returncode, result.stdout) == (0, b"served\n"), result.stderr
    wait_until(lambda: spare_pids(home), timeout=10, message="no spare after the next request")


def test_the_spare_copies_the_pages_it_shares_with_the_daemon() -> None:
    """`_prefault` in a forked child makes the pages it shares with its parent its own (without
    changing them), so its command does not stop on a page fault for each."""
    if not os.access("/proc/self/pagemap", os.R_OK):
        pytest.skip("/proc/self/pagemap is not readable here")
    ballast = bytearray(os.urandom(16 << 20))  # 16 MiB present in both after the fork

    def private_kib() -> int:
        text = Path("/proc/self/smaps_rollup").read_text()
        return sum(int(line.split()[1]) for line in text.splitlines()
                   if line.startswith(("Private_Clean:", "Private_Dirty:")))

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            before = private_kib()
            digest = hash(bytes(ballast))
            daemon_module._prefault()
            after = private_kib()
            same = hash(bytes(ballast)) == digest
            os.write(write_end, json.dumps([before, after, same]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        before, after, same = json.loads(handle.read())
    os.waitpid(pid, 0)
    assert same, "the pages changed"
    assert after - before >= 16 << 10, (before, after)  # at least the ballast became the child's own


def test_a_spare_that_does_not_read_holds_up_no_one(env: dict[str, str]) -> None:
    """A spare not reading its socket (stopped here; still looking at cgroups, or paged out) was
    handed a request larger than the socket holds: the daemon waited in that send for as long
    as the spare did not read (no other client served, no child reaped, no heartbeat), the
    client ran its command itself after 10 s, and a caller reading its output waited on: the
    client's stdout and stderr were in the spare's socket."""
    home = served(env)
    [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
    os.kill(spare, signal.SIGSTOP)
    try:
        words = ["x" * 100_000] * 4  # a long command line (a list of files): past the socket's buffer
        for args in (["sh", "-c", "echo big", *words], ["echo", "small"]):
            started, ran = time.monotonic(), None
            with contextlib.suppress(subprocess.TimeoutExpired):  # its message holds the whole command line
                ran = subprocess.run([*WARDEN, "run", "dw", "--", *args], env=env, stdin=subprocess.DEVNULL,
                                     capture_output=True, timeout=30, check=False)
            took = time.monotonic() - started
            assert ran is not None, f"`warden run -- {args[0]} …` had not ended after 30 s"
            assert ran.returncode == 0 and ran.stdout in (b"big\n", b"small\n"), ran.stderr
            assert took < 8, f"`warden run -- {args[0]} …` took {took:.1f} s (a client gives the daemon 10 s)"
        # The spare that would not take the request is gone, not left holding it.
        wait_until(lambda: spare not in _daemon_processes(home), timeout=10, message="the stopped spare was kept")
    finally:
        with contextlib.suppress(OSError):
            os.kill(spare, signal.SIGCONT)


def _inheritable(pid: int) -> list[str]:
    """The descriptors of process `pid` past its stdio that a program it starts would inherit
    (not close-on-exec), as `FD -> what`."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            flags = re.search(r"^flags:\s*([0-7]+)", Path(f"/proc/{pid}/fdinfo/{fd}").read_text(), re.MULTILINE)
            if int(fd) > 2 and flags is not None and not int(flags[1], 8) & os.O_CLOEXEC:
                found.append(f"{fd} -> {os.readlink(f'/proc/{pid}/fd/{fd}')}")
    return found


def test_the_spare_and_each_child_hold_nothing_of_the_daemons_and_pass_on_only_stdio(env: dict[str, str]) -> None:
    """The spare took the client's connection and the report pipe from its socket inheritable
    across exec (a child forked for the request has them close-on-exec): a program it started
    without closing descriptors would hold the client's socket (and could say the command's
    status) and the report pipe (the daemon reading it waits for its end). The spare held the
    daemon's epoll while it waited, each child while it ran."""
    home = served(env)
    [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")

    def held() -> list[str]:
        return sorted(target for fd, target in open_files(spare).items()
                      if fd > 2 and target not in ("anon_inode:inotify", "anon_inode:[pidfd]"))

    # Once it waits (its look at cgroups and its copy of the pages done): its end of the channel
    # and the registry it opened itself for the run it will serve, nothing else (but the inotify
    # descriptor that watches the last run's workspace, and a pidfd of each process it asked after
    # (adapters/processes.alive), close-on-exec as every other).
    registry = sorted(str(home / name) for name in ("warden.db", "warden.db-shm", "warden.db-wal"))
    wait_until(lambda: len(held()) == 4 and held()[:3] == registry and held()[3].startswith("socket:"), timeout=10,
               message=lambda: f"the spare holds other than its channel and the registry: {held()}")
    assert _inheritable(spare) == []
    daemon, running = the_daemon(home), []
    try:
        for _ in range(2):  # the first is the spare's, the second a child forked for it while the first runs
            proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; sleep 3"], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            running.append(proc)
            assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        children = [pid for pid in daemon_pids(home) if pid != daemon]
        assert spare in children and len(children) == 2, children
        for child in children:
            assert _inheritable(child) == [], (child == spare, _inheritable(child))
    finally:
        for proc in running:
            proc.kill()
            proc.wait()


def test_a_daemon_just_started_has_its_spare_for_the_first_request(env: dict[str, str]) -> None:
    """The spare is forked before the daemon's first wait, not when that wait ends (a heartbeat,
    10 s, later): the first command after the one that started the daemon is served by it."""
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    served(env)  # its client ran the command itself and started the daemon
    wait_until(lambda: spare_pids(home), timeout=5, message="the new daemon forked no spare before its first wait")


def test_the_spare_serves_its_run_on_the_registry_connection_it_opened_while_waiting(env: dict[str, str]) -> None:
    """Connecting to the registry (its WAL, its pragmas, its schema) is done by the spare before
    the request comes: the run it serves writes through that very connection (the descriptors
    the spare held while it waited are the ones its run's commit went through)."""
    home = served(env)
    [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")

    def registry_fds() -> dict[str, str]:
        return {fd: target for fd, target in open_files(spare).items() if target.startswith(str(home / "warden.db"))}

    waiting = wait_until(lambda: len(registry_fds()) == 3 and registry_fds(), timeout=10,
                         message="the waiting spare did not open the registry")
    proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "sh", "-c", "echo started; sleep 3"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        assert spare in daemon_pids(home)  # the spare runs it
        assert registry_fds() == waiting  # on the connection it opened waiting, and no other
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_commit_made_while_the_spare_waits_reaches_the_registry_file(tmp_path: Path) -> None:
    """SQLite copies its write-ahead log into the database file (and syncs it) when the last
    connection closes. The waiting spare keeps one open, so no other command's close is the
    last: the daemon's heartbeat checkpoints instead, and a commit another command made while
    the spare waited is in the registry's file within a heartbeat, not 1,000 pages later."""
    home, environ = _beating_home(tmp_path)
    try:
        created = warden(environ, "create", "dw", "--template", "minimal")
        assert created.returncode == 0, created.stderr
        served(environ)
        [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
        wait_until(lambda: str(home / "warden.db") in open_files(spare).values(), timeout=10,
                   message="the waiting spare did not open the registry")
        marker = f"mark-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        done = warden(environ, "create", marker, "--template", "minimal")
        assert done.returncode == 0, done.stderr
        assert spare in spare_pids(home)  # still waiting, its connection open
        wait_until(lambda: marker.encode() in (home / "warden.db").read_bytes(), timeout=15,
                   message="the commit stayed in the write-ahead log")
    finally:
        stop_daemon(home)


def test_a_child_tells_its_client_the_status_before_it_closes_the_registry(tmp_path: Path) -> None:
    """`main`'s `settled` (the daemon's child answers its client there) is called with the status
    while the registry is still open: the close of its last connection, where SQLite checkpoints
    (and removes the write-ahead log), comes after, and no client waits for it."""
    environ = {**os.environ, "WARDEN_HOME": str(tmp_path / "home"), "WARDEN_DAEMON": "0"}
    first = subprocess.run([*WARDEN, "list"], env=environ, capture_output=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    code = ("import os, sys\n"
            "from warden.interfaces.cli.main import main\n"
            "wal = os.path.join(os.environ['WARDEN_HOME'], 'warden.db-wal')\n"
            "told = []\n"
            "status = main(['list', '--json'], settled=lambda code: told.append((code, os.path.exists(wal))))\n"
            "print(told, status, os.path.exists(wal), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[(0, True)] 0 False"


def test_a_registry_removed_while_the_daemon_idles_stays_missing(tmp_path: Path) -> None:
    """The daemon's heartbeat reconnects to the registry at each beat: once the registry is
    removed it must not make a new, empty one, which the next command would take for the home's
    registry (its workspaces, grants and audit log silently gone) instead of saying it is lost."""
    home, environ = _beating_home(tmp_path)
    try:
        for args in (("init",), ("create", "dw", "--template", "minimal")):
            done = warden(environ, *args)
            assert done.returncode == 0, done.stderr
        served(environ)
        daemon = the_daemon(home)
        for name in ("warden.db", "warden.db-wal", "warden.db-shm"):
            (home / name).unlink(missing_ok=True)
        beats = home / "run" / "daemon.log"
        wait_until(lambda: beats.exists() and b"could not register" in beats.read_bytes(), timeout=15,
                   message="the daemon's heartbeat did not try the registry")
        assert daemon in daemon_pids(home)
        assert not (home / "warden.db").exists()
        listed = warden(environ, "list")
        assert listed.returncode != 0 and b"is missing" in listed.stderr, listed.stderr
    finally:
        stop_daemon(home)


def _traced(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("TracerPid:", 1)[1].split()[0]) != 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_what_reads_the_clients_output_has_its_end_with_the_status(env: dict[str, str]) -> None:
    """`out=$(warden run …)` and `warden run … | cmd` wait for the end of the client's output,
    which the serving child holds too: it lets go of it as it tells the status, not once it has
    closed the registry and exited. Its exit is held back here (strace delays its exit_group) so
    that the two cannot be told apart by chance."""
    home = served(env)
    [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
    tracer = subprocess.Popen(["strace", "-q", "-o", "/dev/null", "-e", "trace=exit_group",
                               "-e", "inject=exit_group:delay_enter=3000000", "-p", str(spare)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert tracer.stderr is not None
        wait_until(lambda: tracer.poll() is not None or _traced(spare), timeout=10,
                   message="strace did not attach to the spare")
        assert tracer.poll() is None, tracer.stderr.read()
        proc = subprocess.Popen([*WARDEN, "run", "dw", "--", "echo", "out"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        assert proc.wait(timeout=30) == 0
        exited = time.monotonic()
        assert proc.stdout.read() == b"out\n"  # until the end of the output
        assert time.monotonic() - exited < 1.5
        assert spare in daemon_pids(home)  # it served the run and is still held at its exit
    finally:
        tracer.terminate()
        tracer.wait(timeout=10)
        # Its child ended, as the next test expects of the shared daemon (no child running).
        wait_until(lambda: spare not in daemon_pids(home), timeout=10, message="the traced child did not end")


def test_a_home_removed_while_the_daemon_idles_gets_no_new_registry_files(tmp_path: Path) -> None:
    """`rm -rf HOME` removes the registry's write-ahead log (held open by the waiting spare)
    before it reaches `warden.db`: a heartbeat in between made a new log and wrote its commit
    there, and with the spare's connection open its close was not the last, so the log stayed
    (`rm` then failed: the folder was not empty). The daemon now ends that spare before it beats."""
    home, environ = _beating_home(tmp_path)
    log = [home / f"warden.db{suffix}" for suffix in ("-wal", "-shm")]
    try:
        created = warden(environ, "create", "dw", "--template", "minimal")
        assert created.returncode == 0, created.stderr
        served(environ)
        [spare] = wait_until(lambda: spare_pids(home), timeout=10, message="the idle daemon forked no spare")
        wait_until(lambda: all(f.exists() for f in log), timeout=10, message="the spare did not connect")
        for f in log:  # what `rm -rf` may remove first; the rest of the home goes later
            f.unlink()
        wait_until(lambda: spare not in spare_pids(home), timeout=10,
                   message="the daemon kept a spare whose registry files were removed")
        daemon = the_daemon(home)
        time.sleep(2.5)  # two more heartbeats
        assert daemon in daemon_pids(home)
        assert [f.name for f in log if f.exists()] == []
        assert (home / "warden.db").exists()  # the registry itself, and its commits, are intact
        again = warden(environ, "run", "dw", "--", "true")
        assert again.returncode == 0, again.stderr
    finally:
        stop_daemon(home)


def test_a_daemon_whose_home_was_removed_ends(tmp_path: Path) -> None:
    """No client can reach a daemon whose home (and socket) is gone: it stayed until idle (15
    minutes by default; a helper found eight of them for homes long removed). It ends at its next beat."""
    home, environ = _beating_home(tmp_path)
    environ["WARDEN_DAEMON_IDLE"] = "900"
    try:
        assert warden(environ, "init").returncode == 0
        served(environ)
        daemon = the_daemon(home)
        # As a person's `rm -rf` would, tried again when the daemon's beat (its registry's
        # write-ahead log, its log line) put a file in a folder being removed.
        def removed() -> bool:
            shutil.rmtree(home, ignore_errors=True)
            return not home.exists()

        wait_until(removed, timeout=10, message="the home could not be removed")
        wait_until(lambda: daemon not in daemon_pids(home) and not spare_pids(home), timeout=15,
                   message="the daemon of a removed home is still there")
    finally:
        stop_daemon(home)


def _home_of_its_own(tmp_path: Path, **extra: str) -> tuple[Path, dict[str, str]]:
    """A home of its own under `tmp_path` (not the module's), its daemon idling a minute."""
    home = tmp_path / "home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "TERM", "TZ", "TMPDIR"}}
    return home, {**keep, "HOME": str(tmp_path), "WARDEN_HOME": str(home), "WARDEN_DAEMON_IDLE": "60", **extra}


def _beating_home(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A home of its own under `tmp_path` whose daemon beats every second."""
    return _home_of_its_own(tmp_path, WARDEN_NODE_HEARTBEAT_INTERVAL="1s")


def test_a_child_leaves_the_write_ahead_log_to_the_next_run_and_a_kill_loses_nothing(tmp_path: Path) -> None:
    """The daemon forks its spare once a child has exited, so a child's close would be the
    registry's last: SQLite would checkpoint, remove the write-ahead log, and the next run's first
    commit would sync a new log's header while its person waits (1.5–7 ms here). The child leaves
    its connection to its exit instead: the log keeps its frames for the next run. Nothing is lost
    by that: with the daemon and its spare killed at once, the run is in the audit log, whole."""
    home, environ = _home_of_its_own(tmp_path)
    try:
        created = warden(environ, "create", "dw", "--template", "minimal")
        assert created.returncode == 0, created.stderr
        served(environ)
        marker = f"mark-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        ran = warden(environ, "run", "dw", "--", "echo", marker)
        assert ran.returncode == 0 and ran.stdout == f"{marker}\n".encode(), ran.stderr

        def spare_connected() -> list[int]:
            return [pid for pid in spare_pids(home) if str(home / "warden.db") in open_files(pid).values()]

        wait_until(spare_connected, timeout=15, message="no spare connected to the registry after the run")
        assert (home / "warden.db-wal").stat().st_size > 0  # the log the run wrote, not a new one
        for pid in _daemon_processes(home):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _daemon_processes(home), timeout=15, message="the daemon outlived SIGKILL")
        alone = {**environ, "WARDEN_DAEMON": "0"}
        listed = warden(alone, "audit", "--json", "--limit", "50")
        assert listed.returncode == 0 and marker.encode() in listed.stdout, listed.stderr
        verified = warden(alone, "audit", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
    finally:
        stop_daemon(home)


def test_the_spare_watches_the_last_runs_workspace_and_the_run_it_serves_owns_only_its_changes(
        tmp_path: Path) -> None:
    """The spare walks and watches the workspace its home's last command ran in while it waits
    (a 5,000-folder workspace cost each `warden run` ~700 ms of walks): the run it serves applies
    what changed meanwhile. What the person changed while it waited is not the run's."""
    home, environ = _home_of_its_own(tmp_path)
    try:
        created = warden(environ, "create", "dw", "--template", "minimal")
        assert created.returncode == 0, created.stderr
        served(environ)
        assert warden(environ, "run", "dw", "--", "true").returncode == 0

        def watching_spare() -> list[int]:
            return [pid for pid in spare_pids(home) if "anon_inode:inotify" in open_files(pid).values()]

        wait_until(watching_spare, timeout=15, message="the spare does not watch the last run's workspace")
        ws = home / "workspaces" / "dw"
        (ws / "by-the-person.txt").write_text("p")
        (ws / "notes" / "deep").mkdir(parents=True)
        ran = warden(environ, "run", "dw", "--", "sh", "-c", "echo r > by-the-run.txt")
        assert ran.returncode == 0, ran.stderr
        shown = warden(environ, "audit", "--limit", "20", "--json", extra={"WARDEN_DAEMON": "0"})
        [event] = [e for e in json.loads(shown.stdout)["data"]
                   if e["action"] == "run" and e["detail"]["argv"][0] == "sh"]
        assert event["detail"]["changes"]["paths"] == ["/by-the-run.txt"], event["detail"]
    finally:
        stop_daemon(home)


def test_a_request_the_daemon_cannot_fork_for_leaves_no_descriptor_open(env: dict[str, str],
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Out of processes (the user's limit), the daemon answers by closing, and the client runs its
    command itself; the pipe its child would have reported on is closed too, not left per request."""
    home = env["WARDEN_HOME"]
    daemon = daemon_module.Daemon(home=home, idle_s=5, environ=dict(env))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # as the daemon's own (its senders)
    listener.bind(str(tmp_path / "d.sock"))
    listener.listen(1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    client.connect(str(tmp_path / "d.sock"))
    os.makedirs(os.path.dirname(daemon_paths(home)[1]), mode=0o700, exist_ok=True)
    proof = os.open(daemon_paths(home)[1], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    me = os.pidfd_open(os.getpid())
    try:
        request = encode_request(["run", "dw", "--", "true"], dict(env), "/")
        send_frame(client, request, (0, 1, 2, proof, me))

        def no_process() -> int:
            raise BlockingIOError(11, "Resource temporarily unavailable")

        monkeypatch.setattr(daemon_module.os, "fork", no_process)
        before = sorted(os.listdir("/proc/self/fd"))
        with selectors.DefaultSelector() as sel:
            daemon._accept(listener, sel)
        after = sorted(os.listdir("/proc/self/fd"))
        assert recv_frame(client, deadline=time.monotonic() + 5) == (None, [])  # closed: run it yourself
        assert daemon.children == {}
        # The accepted connection and the request's descriptors were closed before; now the pipe too.
        assert [fd for fd in after if fd not in before] == []
    finally:
        for fd in (proof, me):
            os.close(fd)
        client.close()
        listener.close()


def _live_cgroups(name_part: str) -> list[str]:
    """The command cgroups (`warden-live-<sandbox>-<process>`) whose name holds `name_part`."""
    found = []
    for hierarchy in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        for folder, subfolders, _ in os.walk(hierarchy):
            found += [os.path.join(folder, sub) for sub in subfolders
                      if sub.startswith("warden-live-") and name_part in sub and sub.count("-") == 3]
            if folder.count("/") > 6:
                subfolders.clear()
    return found


def test_the_commands_its_children_run_in_a_live_sandbox_leave_no_cgroup_behind(env: dict[str, str]) -> None:
    """A child of the daemon runs one command and ends by os._exit: the emptied cgroups its run
    kept for a next command (adapters/sandbox/live) were left behind, one more per command."""
    served(env)
    started = warden(env, "run", "dw", "--detach", "--", "sleep", "300")
    assert started.returncode == 0, started.stderr
    process_id = started.stdout.decode().strip()
    own = _live_cgroups(process_id)
    if not own:
        pytest.skip("no cgroups this user may use: a command has none to leave")
    sandbox = os.path.basename(own[0]).split("-")[2]
    for _ in range(3):
        assert warden(env, "run", "dw", "--", "true").returncode == 0
    try:
        wait_until(lambda: sorted(_live_cgroups(f"warden-live-{sandbox}-")) == sorted(own), timeout=10,
                   message=lambda: f"the commands' cgroups were left behind: "
                                   f"{sorted(set(_live_cgroups(f'warden-live-{sandbox}-')) - set(own))}")
    finally:
        # Its live sandbox stopped with the process: a sandbox left up keeps the daemon going,
        # which the module's other tests see end.
        for step in ("suspend", "resume"):
            assert warden(env, step, "dw", extra={"WARDEN_DAEMON": "0"}).returncode == 0
        stop_daemon(Path(env["WARDEN_HOME"]))


def test_a_dead_sandboxs_folder_with_mounts_recorded_does_not_fork_a_sweep_every_second(env: dict[str, str]) -> None:
    # The one-second look at the masks (held_mounts) asked for a sweep whenever a folder's record
    # did not hold: a folder a killed Warden left (its pid gone) never holds, so beside any live
    # sandbox the daemon forked a whole sweep (a bootstrap, the registry) every second for good.
    home = Path(env["WARDEN_HOME"])
    stop_daemon(home)
    quick = {**env, "WARDEN_DAEMON_SWEEP": "60"}
    served(quick)
    started = warden(quick, "run", "dw", "--detach", "--", "sleep", "120")
    assert started.returncode == 0, started.stderr
    left = home / "run" / f"sbx_{'0' * 16}"
    left.mkdir()
    try:
        (left / "mounts.json").write_text(json.dumps({"pid": 2 ** 22 + 1, "mounts": [["/etc", 1, 2]],
                                                     "unmasked": []}))
        daemon = the_daemon(home)
        time.sleep(1.5)  # the first look at it asks for one sweep, rightly
        sweeps: set[int] = set()
        end = time.monotonic() + 5
        while time.monotonic() < end:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{daemon}/task/{daemon}/children").read_text().split()
                sweeps |= {int(c) for c in children if _session(int(c)) == int(c)}
            time.sleep(0.01)
        assert len(sweeps) <= 1, f"{len(sweeps)} sweeps in 5 s for a folder with no sandbox behind it"
    finally:
        shutil.rmtree(left)
        warden(quick, "kill", "dw", started.stdout.decode().strip(), "--signal", "KILL")
        stop_daemon(home)
