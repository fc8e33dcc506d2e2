"""The bubblewrap runner, run for real: status, output, stdin, environment, limits."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from warden.adapters.sandbox import cgroups, host, runner
from warden.core.errors import Denied, Terminated, Unavailable
from warden.core.limits import Limits
from warden.core.runs import RunResult

Run = Callable[..., RunResult]


def test_exit_status_and_output_pass_through(sandbox: Run) -> None:
    out = sandbox(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (out.exit_code, out.stdout, out.stderr) == (7, "out\n", "err\n")
    assert not out.timed_out and out.signal is None


def test_a_signal_gives_128_plus_n(sandbox: Run) -> None:
    out = sandbox(["sh", "-c", "kill -TERM $$"])
    assert (out.exit_code, out.signal) == (143, 15)


def test_missing_program_is_127(sandbox: Run) -> None:
    out = sandbox(["no-such-program-here"])
    assert out.exit_code == 127 and "no-such-program-here" in out.stderr


def test_stdin_bytes_and_fd(sandbox: Run, tmp_path: Path) -> None:
    assert sandbox(["cat"], stdin=b"hello\n" * 50000).stdout == "hello\n" * 50000
    source = tmp_path / "in.txt"
    source.write_text("from a file\n")
    with open(source, "rb") as fh:
        assert sandbox(["cat"], stdin=fh.fileno()).stdout == "from a file\n"
    assert sandbox(["cat"]).stdout == ""  # no stdin: /dev/null


def test_output_streams_live(sandbox: Run, workspace: Path) -> None:
    arrivals: list[bytes] = []

    def sink(chunk: bytes) -> None:
        arrivals.append(chunk)
        (workspace / "go").touch()

    # The second line comes only once the first has reached the sink (which makes "go"): held
    # back until the command ends, the first would never come, and the run would time out.
    out = sandbox(["sh", "-c", "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"],
                  on_stdout=sink, limits=Limits(timeout_s=30))
    assert not out.timed_out
    assert arrivals[0] == b"first\n"
    assert out.stdout == "first\nsecond\n"


def test_capture_is_bounded(sandbox: Run) -> None:
    out = sandbox(["head", "-c", "100000", "/dev/zero"], max_capture=1000)
    assert len(out.stdout) == 1000 and out.truncated


def test_environment_is_an_allowlist(sandbox: Run, workspace: Path) -> None:
    caller = {**os.environ, "AWS_SECRET_ACCESS_KEY": "leak", "LANG": "C.UTF-8", "TZ": "UTC"}
    out = sandbox(["env"], caller_env=caller, env={"MY_FLAG": "1"})
    env = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert env.pop("PWD", None) in (None, str(workspace))
    assert set(env) == {"PATH", "HOME", "LANG", "TERM", "TZ", "MY_FLAG"}
    assert env["HOME"] == str(workspace)
    assert env["PATH"].split(":")[:2] == [f"{workspace}/.venv/bin", f"{workspace}/node_modules/.bin"]


def test_workspace_is_cwd_and_writable_system_is_not(sandbox: Run, workspace: Path) -> None:
    out = sandbox(["sh", "-c", "pwd; echo hi > made.txt; echo t > /tmp/t && cat /tmp/t; "
                   "touch /usr/x /x /etc/x 2>/dev/null || echo ro"])
    assert out.stdout.split() == [str(workspace), "t", "ro"]
    assert (workspace / "made.txt").read_text() == "hi\n"


def test_rlimits_are_applied(sandbox: Run) -> None:
    limits = Limits(open_files=77, cpu_seconds=9, file_size=2 * 1024 * 1024, timeout_s=30)
    out = sandbox(["sh", "-c", "ulimit -n; ulimit -t; ulimit -f; ulimit -c"], limits=limits)
    assert out.stdout.split() == ["77", "9", "4096", "0"]


def test_cpu_limit_kills_a_busy_loop(sandbox: Run) -> None:
    out = sandbox(["sh", "-c", "while :; do :; done"], limits=Limits(cpu_seconds=1, timeout_s=20))
    assert not out.timed_out
    assert out.signal in (24, 9)  # SIGXCPU at the soft limit, SIGKILL at the hard one


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run cgroups need root here")
def test_cgroups_are_used_and_removed(sandbox: Run) -> None:
    support = cgroups.detect()
    if support.pids is None:
        pytest.skip("no writable pids cgroup")
    base, prefix = support.pids[1], f"warden-{os.getpid()}-"
    made: list[str] = []  # this process's run cgroups, seen from the host while the command runs
    own = Path("/proc/thread-self/cgroup").read_text()
    out = sandbox(["cat", "/proc/self/cgroup"], limits=Limits(pids=20, timeout_s=30),
                  on_started=lambda stop: made.extend(d for d in os.listdir(base) if d.startswith(prefix)))
    assert Path("/proc/thread-self/cgroup").read_text() == own  # the thread that started bwrap in them, back
    assert out.limits_via.startswith("cgroup")
    line = next(x for x in out.stdout.splitlines() if ":pids:" in x or x.startswith("0::"))
    # Inside, the run's cgroup by name; or the root of the sandbox's cgroup namespace, when the
    # run was moved into its cgroup before bwrap made that namespace (bwrap's start-up races
    # the move; a busy machine makes it likely).
    name = line.rsplit("/", 1)[-1] or (made[0] if len(made) == 1 else "")
    assert name.startswith("warden-") and name in made, (line, made)
    assert not any(name in d for _, d in [support.pids] if os.path.exists(f"{d}/{name}"))


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run cgroups need root here")
def test_a_bwrap_whose_starting_thread_could_not_leave_its_cgroups_never_runs_the_command(
        sandbox: Run, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap is started from inside its run's cgroups: should the starting thread fail to come
    back, the run fails, its bwrap is ended and reaped (not left to find its --block-fd closed as
    the run unwinds, and go on without its limits), and the command never runs."""
    support = cgroups.detect()
    if not any(spec is not None and spec[0] == "v1" for spec in (support.memory, support.pids)):
        pytest.skip("no cgroup v1 hierarchy here: bwrap is moved into its cgroups, not born in them")
    real = cgroups._go_back

    def back_then_fail(fds: list[int]) -> None:
        real(fds)  # really back (this test process must not stay in a run's cgroups), then as if not
        raise OSError(errno.EACCES, "Permission denied")

    def bwrap_children() -> set[int]:
        found = set()
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError, IndexError):
                comm, _, rest = Path(f"/proc/{entry}/stat").read_text().rpartition(")")
                if comm.endswith("(bwrap") and int(rest.split()[1]) == os.getpid():
                    found.add(int(entry))
        return found

    before = bwrap_children()
    monkeypatch.setattr(cgroups, "_go_back", back_then_fail)
    with pytest.raises(OSError, match="Permission denied"):
        sandbox(["sh", "-c", "touch ran"], limits=Limits(timeout_s=30))
    monkeypatch.setattr(cgroups, "_go_back", real)
    assert bwrap_children() <= before  # ended and reaped, not left to go on
    time.sleep(0.5)  # time enough for a bwrap left waiting on --block-fd to go on and run it
    assert not (workspace / "ran").exists()


def test_timeout_is_124_and_bounded(sandbox: Run) -> None:
    start = time.monotonic()
    out = sandbox(["sleep", "30"], limits=Limits(timeout_s=0.5))
    assert out.timed_out and out.exit_code == 124
    assert time.monotonic() - start < 15


def test_workspace_venv_interpreter_prefix_is_mounted(tmp_path: Path, sandbox: Run, workspace: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(workspace / ".venv")], check=True)
    prefix = os.path.realpath(sys.base_prefix)
    out = sandbox(["python", "-c", "import sys, json; print(sys.prefix); print(json.dumps(1))"],
                  spec_kw={"ro_paths": [prefix]})
    assert out.exit_code == 0, out.stderr
    assert out.stdout.split() == [str(workspace / ".venv"), "1"]


def test_pyvenv_cfg_home_written_by_a_bot_mounts_nothing(tmp_path: Path, sandbox: Run, workspace: Path) -> None:
    """A bot edits .venv/pyvenv.cfg to point `home` at a host folder; it must stay invisible."""
    secret_dir = tmp_path / "host-secrets" / "bin"
    secret_dir.mkdir(parents=True)
    (secret_dir.parent / "id_rsa").write_text("PRIVATE KEY")
    (workspace / ".venv").mkdir()
    (workspace / ".venv" / "pyvenv.cfg").write_text(f"home = {secret_dir}\n")
    out = sandbox(["sh", "-c", f"cat {secret_dir.parent}/id_rsa 2>&1; ls {secret_dir.parent} 2>&1"])
    assert "PRIVATE KEY" not in out.stdout
    assert out.stdout.count("No such file") == 2


def test_ro_zone_and_denied_path(sandbox: Run, workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "in.csv").write_text("a,b\n")
    (workspace / "private").mkdir()
    (workspace / "private" / "key").write_text("k")
    (workspace / ".env").write_text("TOKEN=x")
    out = sandbox(["sh", "-c", "cat data/in.csv; echo x > data/new || echo zone-ro; ls private; cat .env; echo"],
                  spec_kw={"ro_zones": [str(workspace / "data")],
                           "denied": [str(workspace / "private"), str(workspace / ".env")]})
    text = out.stdout
    assert "a,b" in text and "key" not in text and "TOKEN" not in text
    assert not (workspace / "data" / "new").exists()


def test_protected_symlink_is_refused(sandbox: Run, workspace: Path) -> None:
    (workspace / ".bashrc").symlink_to("/etc/hostname")
    from warden.core.errors import Denied

    with pytest.raises(Denied):
        sandbox(["true"])


def test_missing_bwrap_refuses_with_the_fix(monkeypatch: pytest.MonkeyPatch, sandbox: Run) -> None:
    monkeypatch.setattr(runner, "bwrap_path", lambda: None)
    with pytest.raises(Unavailable, match="apt-get install bubblewrap"):
        sandbox(["true"])


def test_setup_failure_is_unavailable_not_a_command_status(workspace: Path) -> None:
    from dataclasses import replace

    spec = host.build_spec(str(workspace), ["true"], caller_env=os.environ, env={})
    broken = replace(spec, ro_paths=(str(workspace / "gone"),))
    with pytest.raises(Unavailable, match="could not be set up"):
        runner.run_sandboxed(broken, Limits(timeout_s=10))


def test_a_protected_path_swapped_for_a_link_after_the_check_mounts_nothing(tmp_path: Path) -> None:
    # A second command running in the same workspace can swap `.bashrc` (a folder when Warden
    # looked) for a link to `..` between Warden's check and bwrap's mount. bwrap would then
    # resolve the link on the host and mount the folder above the workspace (every other
    # workspace, or Warden's home) into the sandbox. The runner pins what it checked.
    base = tmp_path / "home"
    ws = base / "workspaces" / "ws"
    ws.mkdir(parents=True)
    (base / "keys").mkdir()
    (base / "keys" / "pepper").write_text("SECRET-PEPPER")
    (ws / ".bashrc").mkdir()
    spec = host.build_spec(str(ws), ["sh", "-c", f"cat {base}/keys/pepper; ls {base}"],
                           caller_env={}, env={})
    assert str(ws / ".bashrc") in spec.protected
    (ws / ".bashrc").rmdir()
    (ws / ".bashrc").symlink_to("../..")
    try:
        out = runner.run_sandboxed(spec, Limits(timeout_s=20))
    except (Denied, Unavailable):
        return  # refused: the run did not start
    assert "SECRET-PEPPER" not in out.stdout and "keys" not in out.stdout, out.stdout


def test_no_nested_user_namespace_even_without_disable_userns(workspace: Path) -> None:
    # bwrap < 0.8 has no --disable-userns; the seccomp filter alone must still refuse
    # unshare/clone(CLONE_NEWUSER) and clone3 (whose flags it cannot see), while threads work.
    from dataclasses import replace

    script = ("import ctypes, os, threading\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)\n"
              "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
              "t = threading.Thread(target=print, args=('thread ok',)); t.start(); t.join()\n")
    spec = replace(host.build_spec(str(workspace), ["/usr/bin/python3", "-c", script], caller_env={}, env={}),
                   disable_userns=False)
    out = runner.run_sandboxed(spec, Limits(timeout_s=30))
    assert out.seccomp, out.notes
    lines = out.stdout.splitlines()
    assert lines == ["unshare -1 1", "child 1", "thread ok"], (lines, out.stderr)


def test_bwrap_options_never_on_a_command_line(sandbox: Run, workspace: Path) -> None:
    """bwrap's argv is world-readable (/proc/PID/cmdline), on the host and as pid 1 inside:
    its options, with host paths and `--setenv` values, travel through `--args FD`."""
    secret = "s3cr3t-" + os.urandom(6).hex()
    script = ("import os; print(open('/proc/1/cmdline','rb').read().replace(b'\\0', b' ').decode()); "
              "print(os.environ['TZ'])")
    out = sandbox(["python3", "-c", script], env={"TZ": secret})  # TZ is a loader variable: --setenv
    assert out.exit_code == 0, out.stderr
    cmdline, tz = out.stdout.splitlines()
    assert tz == secret
    assert secret not in cmdline and "--setenv" not in cmdline
    assert str(workspace) not in cmdline and "--ro-bind" not in cmdline


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds every user but root")
def test_as_root_without_a_pids_cgroup_the_command_is_refused(monkeypatch: pytest.MonkeyPatch, sandbox: Run,
                                                              workspace: Path) -> None:
    # The kernel never applies RLIMIT_NPROC to uid 0: without a pids cgroup nothing would stop a
    # fork bomb, so the command must not start (it once ran under an rlimit that did nothing).
    monkeypatch.setattr(cgroups, "detect", lambda: cgroups.CgroupSupport(None, None, ("pids not delegated",)))
    with pytest.raises(Unavailable, match="process limit cannot be enforced") as refused:
        sandbox(["touch", "ran"])
    assert refused.value.rule == "sandbox.pids_unenforced"
    assert not (workspace / "ran").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds every user but root")
def test_as_root_a_cgroup_the_kernel_refuses_refuses_the_command(monkeypatch: pytest.MonkeyPatch, sandbox: Run,
                                                                 workspace: Path) -> None:
    if cgroups.detect().pids is None:
        pytest.skip("no writable pids cgroup")

    def refused_by_kernel(*args: object, **kwargs: object) -> cgroups.Cgroup:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cgroups, "create", refused_by_kernel)
    with pytest.raises(Unavailable, match="No space left on device"):
        sandbox(["touch", "ran"])
    assert not (workspace / "ran").exists()


def test_a_read_only_zone_holds_from_the_first_run_and_cannot_be_renamed_away(sandbox: Run, workspace: Path) -> None:
    # The zone's folder did not exist yet: the command once made it and wrote in it, read-only
    # only from the next run on.
    zone = workspace / "docs" / "final"
    out = sandbox(["sh", "-c", "mkdir -p docs/final; echo x > docs/final/new || echo refused"],
                  spec_kw={"ro_zones": [str(zone)]})
    assert "refused" in out.stdout and zone.is_dir() and not (zone / "new").exists()
    (zone / "kept.txt").write_text("the person's")
    # A rename of a folder above it would take the mount along and free the zone's name for a
    # new, writable folder from the next run on.
    out = sandbox(["sh", "-c", "mv docs elsewhere || echo pinned; mkdir -p docs/final; "
                               "echo x > docs/final/kept.txt || echo refused"],
                  spec_kw={"ro_zones": [str(zone)]})
    assert "pinned" in out.stdout and "refused" in out.stdout
    assert (zone / "kept.txt").read_text() == "the person's" and not (workspace / "elsewhere").exists()


def test_a_link_where_a_read_only_zone_is_refuses_the_run(sandbox: Run, workspace: Path) -> None:
    from warden.core.errors import Denied

    (workspace / "real").mkdir()
    (workspace / "docs").symlink_to("real")
    with pytest.raises(Denied, match="symbolic link"):
        sandbox(["touch", "ran"], spec_kw={"ro_zones": [str(workspace / "docs" / "final")]})
    assert not (workspace / "ran").exists() and not (workspace / "real" / "final").exists()


def test_a_signal_as_bwrap_starts_ends_its_sandbox_before_the_command_starts(monkeypatch: pytest.MonkeyPatch,
                                                                             sandbox: Run, workspace: Path) -> None:
    # SIGTERM (the CLI's Terminated) landing while bwrap starts, before the runner follows it (on
    # a v1 cgroup, moving bwrap takes ~10 ms): the unwinding closed --block-fd, and the sandbox
    # went on to start the command without its limits, or, its bwrap parent gone, waited forever.
    handed = runner._Held.close_handed

    def then_terminated(self: runner._Held, keep: tuple[int, ...]) -> None:
        handed(self, keep)
        raise Terminated(signal.SIGTERM, "SIGTERM")

    monkeypatch.setattr(runner._Held, "close_handed", then_terminated)
    with pytest.raises(Terminated):
        sandbox(["sh", "-c", "touch ran; exec sleep 31.75"])
    time.sleep(1)  # time enough for a sandbox left behind to start its command
    assert not (workspace / "ran").exists()
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs(int(pid), b"sleep 31.75")]


def _runs(pid: int, words: bytes) -> bool:
    """Whether process `pid` runs a command line holding `words`."""
    try:
        return words in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False


def test_a_sigterm_inside_bwraps_start_ends_its_sandbox_before_the_command_starts(
        monkeypatch: pytest.MonkeyPatch, sandbox: Run, workspace: Path) -> None:
    # The CLI's SIGTERM handler, and the signal coming inside Popen, past the fork (a supervisor's
    # stop as bwrap starts): Terminated was raised there, no one knew bwrap's pid to end it, and
    # its sandbox started the command without its limits once --block-fd closed.
    from warden.interfaces.cli.main import _terminate_as_interrupt

    class SignalledAsItStarts(subprocess.Popen):  # type: ignore[type-arg]
        def _execute_child(self, *args: object, **kwargs: object) -> None:
            super()._execute_child(*args, **kwargs)  # type: ignore[misc]
            os.kill(os.getpid(), signal.SIGTERM)

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(subprocess, "Popen", SignalledAsItStarts)
    for sig in before:
        signal.signal(sig, signal.SIG_DFL)
    try:
        _terminate_as_interrupt()
        with pytest.raises(Terminated):
            sandbox(["sh", "-c", "touch ran; exec sleep 31.5"])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    time.sleep(1)  # time enough for a sandbox left behind to start its command
    assert not (workspace / "ran").exists()
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs(int(pid), b"sleep 31.5")]
