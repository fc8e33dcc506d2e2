"""Escape attempts, each really run INSIDE the bubblewrap sandbox, each judged from the host.

Importable by the tests (run as root in the pytest process) and runnable as a script with a
plain system interpreter, so the very same attacks run as an unprivileged user:

    setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3.11 escapes.py

prints one JSON object {attack: null | "how it escaped"} (the attacks named after the script,
else all). Only the standard library,
warden's own modules (the runner's code path) and the tests' standard-library poll helper
are imported, bashlex excepted for the allowlist checks, which are skipped when it is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.waiting import poll
from warden.adapters.sandbox.host import build_spec
from warden.adapters.sandbox.runner import run_sandboxed
from warden.core.limits import Limits
from warden.core.runs import RunResult

MiB = 1024 * 1024
PY = "/usr/bin/python3"


@dataclass
class Lab:
    """A host-side layout: Warden's home with a workspace inside it, secrets around it."""

    base: Path
    marker: str = field(default_factory=lambda: "SECRET-" + secrets.token_hex(8))

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def ws(self) -> Path:
        return self.home / "workspaces" / "ws"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def secret(self) -> Path:
        return self.outside / "secret.txt"

    def build(self) -> Lab:
        self.ws.mkdir(parents=True)
        (self.home / "keys").mkdir()
        (self.home / "keys" / "pepper").write_text(self.marker)
        (self.home / "warden.db").write_text(self.marker)
        self.outside.mkdir()
        self.secret.write_text(self.marker)
        (self.ws / ".workspace.json").write_text('{"name": "ws"}')
        (self.ws / ".git" / "hooks").mkdir(parents=True)
        (self.ws / ".git" / "config").write_text("[core]\n")
        return self

    def run(self, argv: list[str], *, limits: Limits | None = None, stdin: bytes | int | None = None,
            caller_env: dict[str, str] | None = None, env: dict[str, str] | None = None) -> RunResult:
        spec = build_spec(str(self.ws), argv, caller_env=caller_env or dict(os.environ), env=env or {})
        return run_sandboxed(spec, limits or Limits(memory=256 * MiB, pids=64, timeout_s=20))


Attack = Callable[[Lab], str | None]
ATTACKS: dict[str, Attack] = {}


def attack(fn: Attack) -> Attack:
    ATTACKS[fn.__name__] = fn
    return fn


def _out(o: RunResult) -> str:
    return o.stdout + o.stderr


# -- files -------------------------------------------------------------------------------
@attack
def read_outside_absolute(lab: Lab) -> str | None:
    o = lab.run(["cat", str(lab.secret)])
    return "read a file outside the workspace" if lab.marker in _out(o) else None


@attack
def write_outside_absolute(lab: Lab) -> str | None:
    target = lab.outside / "pwned"
    lab.run(["sh", "-c", f"echo x > {target}; mkdir -p {lab.base}/made; echo x > /usr/pwned"])
    if target.exists() or (lab.base / "made").exists() or Path("/usr/pwned").exists():
        return "wrote outside the workspace"
    return None


@attack
def symlink_read(lab: Lab) -> str | None:
    (lab.ws / "link").symlink_to(lab.secret)
    (lab.ws / "dirlink").symlink_to(lab.outside)
    o = lab.run(["sh", "-c", "cat link; cat dirlink/secret.txt; ln -s / root; cat root" + str(lab.secret)])
    return "followed a symlink out" if lab.marker in _out(o) else None


@attack
def symlink_write(lab: Lab) -> str | None:
    (lab.ws / "outlink").symlink_to(lab.outside)
    lab.run(["sh", "-c", "echo x > outlink/via-link; echo x > outlink/secret.txt"])
    if (lab.outside / "via-link").exists() or lab.secret.read_text() != lab.marker:
        return "wrote through a symlink"
    return None


@attack
def proc_root(lab: Lab) -> str | None:
    o = lab.run(["sh", "-c", f"for p in /proc/[0-9]*; do cat $p/root{lab.secret} $p/root/proc/1/root{lab.secret}; "
                 "cat $p/environ; done 2>/dev/null; cat /proc/1/cmdline"])
    return "read the host through /proc/*/root" if lab.marker in _out(o) else None


@attack
def warden_state(lab: Lab) -> str | None:
    o = lab.run(["sh", "-c", f"ls -la {lab.home} {lab.home}/keys; cat {lab.home}/keys/pepper "
                 f"{lab.home}/warden.db; cat ../../keys/pepper ../../warden.db"])
    text = _out(o)
    if lab.marker in text or "pepper" in o.stdout:
        return "saw Warden's own state"
    return None


@attack
def host_tmp(lab: Lab) -> str | None:
    fd, path = tempfile.mkstemp(prefix="warden-escape-", dir="/tmp")
    try:
        os.write(fd, lab.marker.encode())
        os.close(fd)
        o = lab.run(["sh", "-c", f"cat {path}; ls /tmp; echo x > {path}"])
        if lab.marker in _out(o) or os.path.basename(path) in o.stdout:
            return "saw the host /tmp"
        if Path(path).read_text() != lab.marker:
            return "wrote the host /tmp"
        return None
    finally:
        os.unlink(path)


@attack
def protected_files(lab: Lab) -> str | None:
    lab.run(["sh", "-c", "echo evil > .git/hooks/post-checkout; echo evil >> .git/config; "
             "echo '{}' > .workspace.json; rm -rf .git; mv .git .git2; mkdir -p .git/hooks; "
             "echo evil > .git/hooks/pre-commit"])
    hooks = list((lab.ws / ".git" / "hooks").iterdir())
    if hooks or "evil" in (lab.ws / ".git" / "config").read_text() \
            or (lab.ws / ".workspace.json").read_text() != '{"name": "ws"}' or (lab.ws / ".git2").exists():
        return "changed a protected file"
    return None


@attack
def allowed_path_link_to_home(lab: Lab) -> str | None:
    """A bot plants a link where an allowed (not yet existing) path will be: never mounted."""
    from warden.adapters.sandbox.mountsrc import open_binds, state_guard
    from warden.core.bwrap_argv import Bind

    shared = lab.outside / "shared"
    shared.mkdir(exist_ok=True)
    binds = [Bind(str(shared), "rw"), Bind(str(shared / "ref"), "ro")]

    def run(argv: list[str]) -> RunResult:
        guard = lambda: state_guard(str(lab.home), str(lab.home / "workspaces"), str(lab.ws))  # noqa: E731
        with open_binds(binds, guard, str(lab.ws)) as (kept, fds, _skipped):
            spec = build_spec(str(lab.ws), argv, caller_env=dict(os.environ), env={}, extra_binds=kept,
                              bind_fds=fds)
            return run_sandboxed(spec, Limits(memory=256 * MiB, pids=64, timeout_s=20))

    run(["ln", "-s", os.path.relpath(lab.home, shared), str(shared / "ref")])
    o = run(["sh", "-c", f"cat {shared}/ref/keys/pepper {shared}/ref/warden.db; ls {shared}/ref/"])
    return "mounted Warden's home through a planted link" if lab.marker in _out(o) else None


@attack
def host_git_steered(lab: Lab) -> str | None:
    """A bot leaves git control files; the sweep after the run must move them aside."""
    from warden.adapters.gitguard import GitGuard

    guard = GitGuard(str(lab.ws))
    guard.before(bot_active=False)
    lab.run(["sh", "-c", "mkdir -p sub && printf 'gitdir: ../evil\\n' > sub/.git; mkdir -p bare/refs bare/objects; "
             "echo 'ref: refs/heads/x' > bare/HEAD; ln -s /tmp deep.git; mkdir -p n/.GIT; "
             "mkdir -p locked/in/.git; chmod 000 locked"])
    guard.after()
    try:  # a folder the bot made unreadable is opened up and swept like any other
        os.lstat(lab.ws / "locked" / "in" / ".git")
        return "a .git in a folder the bot made unreadable was left in place"
    except FileNotFoundError:
        pass
    except PermissionError:
        return "a folder the bot made unreadable was not opened up (its .git unchecked)"
    left = [p for p in lab.ws.rglob("*") if p.name.lower() == ".git" and p.parent != lab.ws]
    if left or (lab.ws / "bare" / "HEAD").exists():
        return f"git control files left in place: {[str(p) for p in left]}"
    return None


@attack
def bwrap_argv_visible(lab: Lab) -> str | None:
    """bwrap's options (host paths, --setenv values) readable in /proc/1/cmdline inside."""
    o = lab.run(["cat", "/proc/1/cmdline"], env={"TZ": lab.marker})
    text = _out(o)
    return "bwrap's options are on its command line" if lab.marker in text or str(lab.home) in text else None


# -- inheritance -------------------------------------------------------------------------
@attack
def inherited_fd_and_env(lab: Lab) -> str | None:
    fd = os.open(lab.secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    env = {**os.environ, "WARDEN_TEST_SECRET": lab.marker}
    try:
        o = lab.run(["sh", "-c", f"env; cat /proc/self/fd/{fd} <&{fd}; ls /proc/self/fd; cat /proc/1/environ"],
                    caller_env=env)
    finally:
        os.close(fd)
    if lab.marker in _out(o):
        return "an inherited fd or variable leaked"
    fds = sorted(o.stdout.split("\n")[-4:])
    extra = [f for f in o.stdout.split() if f.isdigit() and int(f) > 3]
    return f"extra fds inside: {extra} ({fds})" if extra else None


@attack
def loader_variables_reach_host_bwrap(lab: Lab) -> str | None:
    # `--env LD_PRELOAD=<ws>/evil.so` (or a bot's env over the API) must only reach programs
    # inside: bwrap itself runs on the host. LD_DEBUG shows which programs the loader ran for
    # without needing a compiler to build a library.
    from warden.adapters.sandbox.host import bwrap_path

    bwrap = bwrap_path() or "/usr/bin/bwrap"
    o = lab.run(["true"], env={"LD_DEBUG": "libs", "LD_PRELOAD": str(lab.ws / "missing.so")})
    text = o.stderr
    if "transferring control: true" not in text:  # the command inside did get them
        return f"test did not run: {text[-300:]}"
    if f"transferring control: {bwrap}" in text:
        return f"the host-side {bwrap} ran with the caller's loader variables"
    return None


# -- kernel ------------------------------------------------------------------------------
@attack
def proc_kernel_knobs(lab: Lab) -> str | None:
    # As root the sandbox's uid 0 is the host's uid 0, and /proc/sys only checks the uid:
    # a writable kernel.core_pattern means host root code execution on the next crash.
    # Only open() for writing is tried, never a write.
    script = ("import os\n"
              "paths = ['/proc/sysrq-trigger']\n"
              "for root, dirs, files in os.walk('/proc/sys'):\n"
              "    paths += [os.path.join(root, f) for f in files]\n"
              "bad = []\n"
              "for p in paths:\n"
              "    try:\n"
              "        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)\n"
              "    except OSError:\n"
              "        continue\n"
              "    os.close(fd)\n"
              "    bad.append(p)\n"
              "print('CHECKED', len(paths), 'WRITABLE', *bad[:5])\n")
    o = lab.run([PY, "-c", script])
    words = o.stdout.split()
    if "CHECKED" not in words or int(words[words.index("CHECKED") + 1]) < 50:
        return f"test did not run: {_out(o)[-300:]}"
    writable = words[words.index("WRITABLE") + 1:]
    return f"kernel settings writable from inside: {writable}" if writable else None


@attack
def proc_host_wide_leaks(lab: Lab) -> str | None:
    # timer_list names host processes and their pids; keys lists kernel keyrings.
    o = lab.run(["sh", "-c", "cat /proc/timer_list /proc/keys /proc/key-users 2>/dev/null | head -c 2000"])
    return f"host-wide /proc files readable: {o.stdout[:200]!r}" if o.stdout.strip() else None


# -- processes ---------------------------------------------------------------------------
@attack
def see_and_kill_host_processes(lab: Lab) -> str | None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        o = lab.run(["sh", "-c", f"ls /proc; kill -9 {victim.pid} {os.getpid()}; kill -9 -1"])
        pids = [p for p in o.stdout.split() if p.isdigit()]
        if str(victim.pid) in pids or str(os.getpid()) in pids or len(pids) > 8:
            return f"saw host processes: {pids}"
        # Nothing to wait for when the kill failed, as it should: a short grace in which a
        # SIGKILL that did land would have ended the victim.
        time.sleep(0.1)
        return "killed a host process" if victim.poll() is not None else None
    finally:
        victim.kill()
        victim.wait()


@attack
def capabilities(lab: Lab) -> str | None:
    o = lab.run(["grep", "-E", "^Cap(Eff|Prm|Bnd|Amb)", "/proc/self/status"])
    lines = o.stdout.split("\n")
    values = [line.split()[1] for line in lines if line.strip()]
    if len(values) != 4 or any(int(v, 16) for v in values):
        return f"capabilities inside: {lines}"
    return None


@attack
def mount_and_userns(lab: Lab) -> str | None:
    o = lab.run(["sh", "-c", "mkdir -p m; mount -t tmpfs none m && echo MOUNTED; "
                 "unshare --user --map-root-user true && echo USERNS; unshare -m true && echo MNTNS; "
                 "cat /proc/sys/user/max_user_namespaces"])
    text = o.stdout
    for word in ("MOUNTED", "USERNS", "MNTNS"):
        if word in text:
            return f"{word.lower()} worked inside"
    return None


@attack
def tiocsti(lab: Lab) -> str | None:
    master, slave = os.openpty()
    try:
        script = ("import fcntl, termios, os\n"
                  "for req in (termios.TIOCSTI, termios.TIOCSTI | (1 << 32)):\n"
                  "    try:\n"
                  "        fcntl.ioctl(0, req, b'x'); print('INJECTED')\n"
                  "    except OSError as e: print('refused', e.errno)\n"
                  "try:\n"
                  "    os.open('/dev/tty', os.O_RDWR); print('TTY')\n"
                  "except OSError: pass\n")
        o = lab.run([PY, "-c", script], stdin=slave)
        os.set_blocking(slave, False)
        injected = b""
        with contextlib.suppress(BlockingIOError, OSError):
            injected = os.read(slave, 100)
        if "INJECTED" in o.stdout or b"x" in injected:
            return "TIOCSTI injected input into the terminal"
        if "TTY" in o.stdout:
            return "opened a controlling terminal"
        if "refused" not in o.stdout:
            return f"test did not run: {_out(o)}"
        return None
    finally:
        os.close(master)
        os.close(slave)


@attack
def seccomp_syscalls(lab: Lab) -> str | None:
    script = ("import ctypes, sys\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "for name, nr in (('ptrace', 101), ('io_uring_setup', 425), ('bpf', 321),"
              " ('userfaultfd', 323), ('perf_event_open', 298), ('keyctl', 250),"
              " ('process_vm_readv', 310)):\n"
              "    r = libc.syscall(nr, 0, 0, 0, 0, 0)\n"
              "    print(name, r, ctypes.get_errno())\n"
              "sys.stdout.flush()\n"
              "libc.syscall(0x40000000 | 39)\n"  # x32 ABI getpid: killed by the filter
              "print('X32 ALIVE')\n")
    o = lab.run([PY, "-c", script])
    text = o.stdout
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] != "1":  # EPERM from the filter
            return f"syscall not filtered: {line}"
    if "X32 ALIVE" in text or o.exit_code != 128 + signal.SIGSYS:
        return f"32-bit ABI not filtered (exit {o.exit_code}): {text}"
    return None


# -- network -----------------------------------------------------------------------------
@attack
def loopback_and_unix_sockets(lab: Lab) -> str | None:
    seen: list[str] = []
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.settimeout(0.2)
    unix_path = str(lab.outside / "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(8)
    unix.settimeout(0.2)
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = "\0warden-escape-" + secrets.token_hex(4)
    abstract.bind(abstract_name)
    abstract.listen(8)
    abstract.settimeout(0.2)
    stop = threading.Event()

    def accept(s: socket.socket, label: str) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = s.accept()
                seen.append(label)
                conn.close()

    threads = [threading.Thread(target=accept, args=(s, n)) for s, n in
               ((tcp, "tcp"), (unix, "unix"), (abstract, "abstract"))]
    for t in threads:
        t.start()
    try:
        port = tcp.getsockname()[1]
        script = ("import socket\n"
                  f"for fam, addr in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_UNIX, {unix_path!r}),"
                  f" (socket.AF_UNIX, {abstract_name!r})):\n"
                  "    s = socket.socket(fam)\n"
                  "    s.settimeout(2)\n"
                  "    try:\n"
                  "        s.connect(addr); print('CONNECTED', addr)\n"
                  "    except OSError as e: print('blocked', e.errno)\n")
        o = lab.run([PY, "-c", script])
    finally:
        stop.set()
        for t in threads:
            t.join()
        # A connection the script made before it ended waits in its listener's queue: take
        # what the accept threads had no time for, without waiting.
        for s, label in ((tcp, "tcp"), (unix, "unix"), (abstract, "abstract")):
            s.setblocking(False)
            with contextlib.suppress(OSError):
                s.accept()[0].close()
                seen.append(label)
            s.close()
    if seen or "CONNECTED" in o.stdout:
        return f"reached the host: {seen} {o.stdout!r}"
    if o.stdout.count("blocked") != 3:
        return f"test did not run: {_out(o)}"
    return None


# -- limits ------------------------------------------------------------------------------
def _host_pids_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


@attack
def timeout_kills_tree(lab: Lab) -> str | None:
    tag = f"{secrets.randbelow(10**6) + 10**6}"
    start = time.monotonic()
    o = lab.run(["sh", "-c", f"sleep 9{tag} & sleep 8{tag}"], limits=Limits(timeout_s=1))
    took = time.monotonic() - start
    if not o.timed_out or o.exit_code != 124:
        return f"no timeout: exit {o.exit_code}"
    if took > 10:
        return f"timeout took {took:.1f}s"
    left = poll(lambda: _host_pids_with(f"9{tag}") + _host_pids_with(f"8{tag}"), timeout=5, want=False)
    return f"processes left after timeout: {left}" if left else None


@attack
def orphans_killed(lab: Lab) -> str | None:
    tag = f"{secrets.randbelow(10**6) + 10**6}"
    o = lab.run(["sh", "-c", f"(sleep 7{tag} &) ; nohup setsid sleep 6{tag} >/dev/null 2>&1 & echo started"])
    if "started" not in o.stdout:
        return f"test did not run: {_out(o)}"
    left = poll(lambda: _host_pids_with(f"7{tag}") + _host_pids_with(f"6{tag}"), timeout=5, want=False)
    return f"orphans outlived the run: {left}" if left else None


# A shell function forking two copies of itself per call, each then blocked for good (opening a
# FIFO nobody writes to), so the sandbox fills up and stays full instead of churning. Once the
# host has seen the count settle, the shell that started it counts the processes of its sandbox
# with built-ins only (a glob over its own /proc: no fork needed) and prints the count.
FORK_BOMB = ("mkfifo hold; b() { b & b & read x < hold; }; b & "
             'while [ ! -e settled ]; do :; done; set -- /proc/[0-9]*; echo "counted $#"')


def fork_bomb_outcome(lab: Lab, *, pids: int, limit: int) -> str | None:
    """Run the bomb with a process limit of `pids` and judge it as a user would against `limit`:
    the bomb filled its sandbox up to the limit and no further (seen from inside and from the
    host), the command still ended on its own (it printed its count; it was not timed out),
    the host can start processes, and none of the bomb's processes outlive the run."""
    tag = f"bomb-{secrets.token_hex(6)}"  # $0 of the shell, and so of every copy the bomb forks
    done: list[RunResult] = []
    run = threading.Thread(target=lambda: done.append(lab.run(
        ["sh", "-c", FORK_BOMB, tag], limits=Limits(pids=pids, timeout_s=30, memory=256 * MiB))))
    run.start()
    seen: list[int] = []  # the host's count of the sandbox's processes (bwrap's carry the tag too)

    def settled() -> bool:
        seen.append(len(_host_pids_with(tag)))
        return len(seen) >= 20 and seen[-1] > 3 and len(set(seen[-20:])) == 1  # for a second

    poll(settled, timeout=20, interval=0.05)
    (lab.ws / "settled").touch()
    run.join(60)
    left = poll(lambda: _host_pids_with(tag), timeout=10, want=False)
    if not done:
        return "the bomb's run never ended"
    o = done[0]
    words = o.stdout.split()
    if o.timed_out or "counted" not in words:
        return f"the bomb was not stopped (timed out {o.timed_out}, {o.duration_s:.0f}s): {_out(o)[-300:]!r}"
    counted = int(words[words.index("counted") + 1])
    if max(counted, seen[-1]) > limit:
        return f"{counted} processes in a sandbox limited to {limit} ({seen[-1]} seen from the host)"
    if counted < limit // 2:
        return f"test did not run: the bomb made only {counted} processes of {limit}"
    if subprocess.run(["true"], check=False).returncode != 0:
        return "the host cannot start a process after the bomb"
    if left:
        return f"the bomb's processes outlived the run: {left[:10]}"
    return None


@attack
def fork_bomb(lab: Lab) -> str | None:
    return fork_bomb_outcome(lab, pids=48, limit=48)


@attack
def memory_bomb(lab: Lab) -> str | None:
    o = lab.run([PY, "-c", "a = []\nwhile True: a.append(bytearray(16 * 1024 * 1024))"],
                limits=Limits(memory=128 * MiB, timeout_s=20))
    if o.exit_code == 0 or o.timed_out:
        return f"memory bomb not stopped (exit {o.exit_code}, timed out {o.timed_out})"
    return None


@attack
def file_size(lab: Lab) -> str | None:
    o = lab.run(["sh", "-c", "head -c 8000000 /dev/zero > big"], limits=Limits(file_size=MiB))
    size = (lab.ws / "big").stat().st_size if (lab.ws / "big").exists() else 0
    if size > MiB or o.exit_code == 0:
        return f"wrote {size} bytes past a 1 MiB limit (exit {o.exit_code})"
    return None


@attack
def allowlist_bypasses(lab: Lab) -> str | None:
    from warden.core.commands import check_command

    allowed = ["python", "pip", "git", "sh", "ls"]
    trusted = ["/usr/bin", "/bin", f"{lab.ws}/.venv/bin"]
    cases = [["/usr/bin/rm", "x"], ["env", "rm", "x"], ["env", "-S", "rm x"], ["nice", "rm", "x"],
             ["timeout", "5", "rm", "x"], ["xargs", "rm"], ["busybox", "rm", "x"], ["./rm", "x"],
             ["/tmp/python"], ["find", ".", "-exec", "rm", "{}", ";"]]
    try:
        import bashlex  # noqa: F401
        cases += [["sh", "-c", "ls; rm x"], ["sh", "-c", "ls $(rm x)"], ["sh", "-c", "ls | rm x"],
                  ["sh", "-c", "eval rm x"], ["sh", "script.sh"], ["sh", "-c", "$X"]]
    except ImportError:
        pass
    passed = [c for c in cases if check_command(c, allowed, trusted_dirs=trusted, cwd=str(lab.ws)).allowed]
    return f"allowlist let through {passed}" if passed else None


@contextlib.contextmanager
def lab_at(base: Path) -> Iterator[Lab]:
    lab = Lab(base).build()
    try:
        yield lab
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_one(name: str, base: Path) -> str | None:
    with lab_at(base) as lab:
        return ATTACKS[name](lab)


def main() -> None:
    results: dict[str, str | None] = {}
    for name in sys.argv[1:] or ATTACKS:
        base = Path(tempfile.mkdtemp(prefix="warden-escape-"))
        try:
            results[name] = run_one(name, base)
        except Exception as exc:
            results[name] = f"attack crashed: {type(exc).__name__}: {exc}"
    json.dump({"uid": os.getuid(), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
