"""Warden's launcher for live sandboxes (adapters/sandbox/rlimit_exec.c), the program itself: it
sets every limit it is given, soft and hard, before it execs the program; it refuses anything
malformed without running anything; and it says why an exec failed, in one line Warden explains,
with a shell's status. Run here as a plain program (it is one: a live sandbox seals it in), and
in a bwrap sandbox with no /bin/sh, where a file no binary format takes cannot fall back to it."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from tests.support.launcher import build_launcher
from warden.adapters.sandbox.host import bwrap_path

NOFILE, CPU, FSIZE, AS = resource.RLIMIT_NOFILE, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE, resource.RLIMIT_AS


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_launcher(tmp_path_factory.mktemp("launcher") / "warden-rlimit-exec"))


def _run(launcher: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([launcher, *args], capture_output=True, text=True, env=env or {"PATH": "/usr/bin:/bin"},
                          cwd="/", timeout=30, check=False)


def _limits(text: str) -> dict[str, tuple[str, str]]:
    """/proc/PID/limits: (soft, hard) by the limit's name."""
    rows = {}
    for line in text.splitlines()[1:]:
        name, soft, hard = line[:26].strip(), *line[26:].split()[:2]
        rows[name] = (soft, hard)
    return rows


def test_it_sets_each_limit_soft_and_hard_then_runs_the_program_with_its_own_name(launcher: str) -> None:
    ran = _run(launcher, f"{NOFILE}=50:60", f"{CPU}=5:9", f"{FSIZE}=4096:8192", "--", "/bin/cat", "cat",
               "/proc/self/limits")
    assert ran.returncode == 0, ran.stderr
    limits = _limits(ran.stdout)
    assert limits["Max open files"] == ("50", "60")
    assert limits["Max cpu time"] == ("5", "9")
    assert limits["Max file size"] == ("4096", "8192")
    # The program is PATH, found beforehand; it sees ARG0 as its name, and the environment as given.
    named = _run(launcher, "--", "/bin/cat", "as-given", "/proc/self/cmdline")
    assert (named.returncode, named.stdout) == (0, "as-given\0/proc/self/cmdline\0"), named.stderr
    env = _run(launcher, "--", "/usr/bin/env", "env", env={"WHO": "me", "LD_PRELOAD": "/no/such.so"})
    assert (env.returncode, env.stdout) == (0, "WHO=me\nLD_PRELOAD=/no/such.so\n"), env.stderr
    # No loader read LD_PRELOAD before the limits: the program's own alone complains of it.
    assert env.stderr.count("cannot be preloaded") == 1, env.stderr


def test_the_limits_are_in_place_when_the_program_is_loaded(launcher: str) -> None:
    # An address space too small for the program's own loader and libraries: it never gets to run.
    starved = _run(launcher, f"{AS}=1048576:1048576", "--", "/bin/sh", "sh", "-c", "echo ran")
    assert starved.returncode != 0 and "ran" not in starved.stdout
    # With room to load, the same program runs.
    assert _run(launcher, f"{AS}=1073741824:1073741824", "--", "/bin/sh", "sh", "-c", "echo ran").stdout == "ran\n"


RUN = ["--", "/bin/sh", "sh", "-c", "echo ran"]


@pytest.mark.parametrize("args", [
    [], ["--"], ["--", "/bin/sh"], ["7=1:2", "--", "/bin/sh"],  # no PATH and ARG0
    ["7=1:2", "/bin/sh", "sh", "-c", "echo ran"],  # no "--"
    *([limit, *RUN] for limit in ("x=1:2", "=1:2", "16=1:2", "+7=1:2", "-7=1:2",  # not a resource it knows
                                  "7=1", "7=1:", "7=:2", "7=1:2:3", "7=1:2 ", "7=-1:2", "7=1:unlimited", "7==1:2",
                                  "7=1:99999999999999999999",  # past 2**64
                                  "7=3:2")),  # soft above hard
    ["7=1:2", "7=1:2", *RUN],  # twice
    ["4=1:2", "7=x", *RUN],  # one bad among good ones
])
def test_anything_malformed_is_refused_and_nothing_runs(launcher: str, args: list[str]) -> None:
    refused = _run(launcher, *args)
    assert refused.returncode == 126 and refused.stdout == "", refused
    assert refused.stderr.startswith("warden-rlimit-exec: ") and refused.stderr.count("\n") == 1, refused.stderr


def test_a_limit_the_kernel_refuses_fails_before_the_program_runs(launcher: str) -> None:
    # Open files past fs.nr_open: refused even to root.
    refused = _run(launcher, f"{CPU}=5:9", f"{NOFILE}=1:18446744073709551614", "--", "/bin/sh", "sh", "-c", "echo ran")
    assert (refused.returncode, refused.stdout) == (126, "")
    assert refused.stderr == (f"warden-rlimit-exec: could not set {NOFILE}=1:18446744073709551614: "
                              "Operation not permitted\n")


def _exec_failure(launcher: str, path: str, name: str = "prog", *args: str) -> tuple[int, str]:
    ran = _run(launcher, f"{CPU}=5:9", "--", path, name, *args)
    assert ran.stdout == ""
    return ran.returncode, ran.stderr


def test_an_exec_that_fails_is_said_in_one_line_with_a_shells_status(launcher: str, tmp_path: Path) -> None:
    said = "warden-rlimit-exec: failed to execute prog: "
    # Not there: 127, as a shell's "not found" and Warden's forked commands.
    assert _exec_failure(launcher, "/no/such/program") == (127, said + "No such file or directory\n")
    assert _exec_failure(launcher, "/etc/passwd/x") == (127, said + "Not a directory\n")
    # There, but it cannot run: 126.
    plain = tmp_path / "plain"
    plain.write_text("echo ran\n")
    assert _exec_failure(launcher, str(plain)) == (126, said + "Permission denied\n")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert _exec_failure(launcher, str(tmp_path / "a")) == (126, said + "Too many levels of symbolic links\n")
    # Arguments past what the stack limit it sets allows them (128 KiB at least, whatever the limit).
    too_long = _run(launcher, f"{resource.RLIMIT_STACK}=65536:65536", "--", "/bin/true", "prog", *["x" * 60_000] * 3)
    assert (too_long.returncode, too_long.stderr) == (126, said + "Argument list too long\n")
    busy = tmp_path / "busy"
    busy.write_bytes(Path("/bin/true").read_bytes())
    busy.chmod(0o755)
    with busy.open("ab"):  # still open for writing
        assert _exec_failure(launcher, str(busy)) == (126, said + "Text file busy\n")
    # An errno without a text of its own: its number.
    assert _exec_failure(launcher, "/" + "x" * 5000) == (126, said + "errno 36\n")  # ENAMETOOLONG


def test_a_script_without_its_first_line_runs_with_the_shell_as_execvp_runs_it(launcher: str, tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text('echo "$0 $1"; ulimit -Ht\n')
    script.chmod(0o755)
    ran = _run(launcher, f"{CPU}=5:9", "--", str(script), "script", "one")
    assert (ran.returncode, ran.stdout) == (0, f"{script} one\n9\n"), ran.stderr


def test_without_a_shell_a_file_no_binary_format_takes_cannot_run(launcher: str, tmp_path: Path) -> None:
    bwrap = bwrap_path()
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00\x01\x02 not a program")
    junk.chmod(0o755)
    ran = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--proc", "/proc", "--dev", "/dev",
                          "--ro-bind", launcher, "/launcher", "--ro-bind", str(junk), "/junk",
                          "--", "/launcher", f"{CPU}=5:9", "--", "/junk", "junk"],
                         capture_output=True, text=True, timeout=30, env={}, check=False)
    assert (ran.returncode, ran.stderr) == (126, "warden-rlimit-exec: failed to execute junk: Exec format error\n")
    assert os.path.exists("/bin/sh")  # here the same file runs, with the shell: see the test above
