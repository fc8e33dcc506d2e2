"""One sandboxed command: what the sandbox is asked to run, what came of it, and the record of
one still running."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple, Protocol

from warden.core.bwrap_argv import Bind
from warden.core.durations import format_duration
from warden.core.echo import echoed
from warden.core.errors import InvalidInput, Unavailable
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy
from warden.core.paths import canonical, normalize, within
from warden.core.policy import EffectivePaths

__all__ = ["NO_NETWORK_ENV", "NetEvent", "RunInProgress", "RunResult", "RunWatch", "SandboxRequest", "Sink",
           "StoppedAsItStarted", "Usage", "explain_denied_path", "explain_failure", "explain_not_started",
           "nearest_program", "usage_of",
           "workspace_cwd"]

# Where a command's output goes as it comes (a terminal, a socket), chunk by chunk.
Sink = Callable[[bytes], None]


class RunInProgress(NamedTuple):
    """A run's intent in the registry, written before it starts and removed with its outcome: one
    left behind by a killed Warden is a lost run (`run.lost`)."""

    run_id: str
    workspace: str
    actor: str
    node: str
    pid: int
    pid_start: int
    started_at: str
    argv: tuple[str, ...]


class NetEvent(Protocol):
    """One decision of the sandbox's filtering proxy: what was asked and what was decided."""

    @property
    def method(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def allowed(self) -> bool: ...

    @property
    def rule(self) -> str: ...

    @property
    def reason(self) -> str: ...

    def to_json(self) -> dict[str, object]: ...


class RunWatch(Protocol):
    """A watch over a run (the disk quota's) that a runner waiting on its command may keep from its
    own loop rather than from a thread of its own: `take()` hands it over (False: it keeps its
    thread); the runner then waits on `fileno()` beside the command, at most `due()` seconds
    (None: no limit), and calls `look()` after each wait."""

    def take(self) -> bool: ...

    def fileno(self) -> int: ...

    def due(self) -> float | None: ...

    def look(self) -> None: ...


@dataclass(frozen=True)
class SandboxRequest:
    """One command for the sandbox runner (core.ports.SandboxRunner): what runs where, what it
    sees besides its workspace, within which limits, and where its output goes."""

    workspace: str  # the folder it runs in (read-write, its HOME and working folder)
    argv: tuple[str, ...]
    limits: Limits
    # The command's working folder: a folder of the workspace (absolute, as the sandbox sees it),
    # already judged by the run service (workspace_cwd, then by descriptor); None: the workspace.
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # the caller's variables, checked by the runner
    ro_paths: tuple[str, ...] = ()  # env layers and interpreters, bound read-only
    binds: tuple[Bind, ...] = ()  # allowed paths with their mode
    bind_fds: tuple[tuple[str, int], ...] = ()  # allowed paths already opened (and judged) by descriptor
    ro_zones: tuple[str, ...] = ()  # folders of the workspace bound read-only
    keep_zones: tuple[str, ...] = ()  # folders of the workspace where nothing may be removed or renamed
    denied: tuple[str, ...] = ()  # hidden wherever they lie inside a bound tree
    protected: tuple[str, ...] = ()  # workspace files bound read-only (.git entries, policy files)
    network: NetworkPolicy | None = None  # None: no network at all
    stdin: bytes | int | None = None  # bytes to feed, or a descriptor to pass on (None: /dev/null)
    # The slave side of a pseudo-terminal the caller holds the master of: the command's stdin,
    # stdout and stderr and its controlling terminal, in a session of its own (stdin is then
    # ignored and the output reaches only the master, never the sinks). None: pipes.
    terminal: int | None = None
    on_stdout: Sink | None = None
    on_stderr: Sink | None = None
    capture: bool = True  # keep the output in the result (else only the sinks see it)
    max_capture: int | None = None  # bytes kept per stream (None: the runner's own cap)
    on_net_event: Callable[[NetEvent], None] | None = None
    # Called once the command runs, with a function that kills its whole tree (the disk quota's).
    on_started: Callable[[Callable[[], None]], None] | None = None
    # The disk quota's watch, for a runner that waits on the command itself to keep (RunWatch);
    # one that does not leaves it to its own thread (started by on_started).
    watch: RunWatch | None = None
    # The session whose path lists were applied too (`warden run --session`), or None: a live
    # sandbox started for it compares the path policy of that session with the one now.
    policy_session: str | None = None
    # The path policy's answer the binds, zones and denied paths above were made from: a live
    # sandbox started for this request records the digest of this very answer, not of one read
    # again a moment later (a tightening in between would be recorded over the older mounts, and
    # never stop the sandbox).
    policy: EffectivePaths | None = None


@dataclass(frozen=True)
class Usage:
    """What a run used, as far as it could be measured (None: not here).

    `cpu_s`: user and system CPU time of the command and of every process of it that ended
    before it (the kernel adds a reaped child's time to its parent's), or of its cgroup.
    `memory_peak_bytes` with `memory_measured`: "cgroup" — the whole run at its highest (its
    memory cgroup's peak); "process" — its largest single process at its highest (no cgroup).
    `measured_by`: "cgroup" when the run's cgroup gave the figures (the whole tree, orphans
    included; CPU from wait4 under cgroup v1, which does not count it), "rusage" when wait4 did."""

    cpu_s: float | None
    memory_peak_bytes: int | None
    memory_measured: str | None  # "cgroup", "process" or None
    measured_by: str | None = None  # "cgroup" or "rusage"

    def to_json(self) -> dict[str, object]:
        return {"cpu_s": None if self.cpu_s is None else round(self.cpu_s, 3),
                "memory_peak_bytes": self.memory_peak_bytes, "memory_measured": self.memory_measured,
                "measured_by": self.measured_by}


def usage_of(*, cpu_s: float | None = None, maxrss_kib: int | None = None, cgroup_peak: int | None = None,
             cgroup_cpu_s: float | None = None) -> Usage | None:
    """A run's Usage from what its runner could read: CPU seconds from wait4 (`cpu_s`) or the
    cgroup (`cgroup_cpu_s`, preferred: it also counts what was never reaped), the largest
    process's peak (Linux's ru_maxrss, in KiB) and the memory cgroup's peak; None when it read
    nothing."""
    from_cgroup = False
    if cgroup_peak is not None and cgroup_peak > 0:
        peak, how, from_cgroup = cgroup_peak, "cgroup", True
    elif maxrss_kib is not None and maxrss_kib > 0:
        peak, how = maxrss_kib * 1024, "process"
    else:
        peak, how = None, None
    if cgroup_cpu_s is not None:
        cpu_s, from_cgroup = cgroup_cpu_s, True
    if cpu_s is None and peak is None:
        return None
    return Usage(None if cpu_s is None else max(cpu_s, 0.0), peak, how, "cgroup" if from_cgroup else "rusage")


class StoppedAsItStarted(Unavailable):
    """A background start refused because a stop claimed its process as it started: that stop
    recorded the process killed and audited its `run` outcome (with why), so the refusal is not
    audited as a second outcome of the same run."""


@dataclass(frozen=True)
class RunResult:
    """What a sandboxed command did: its status, output and how it ended.

    The runner fills in how the limits applied, what the network proxy decided and what the run
    used; the run service adds Warden's own lines to `stderr` and `stopped_by`. Only the first
    six fields are in the JSON.
    """

    exit_code: int  # as a shell reports it: 124 timed out, 128+N killed by signal N
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    signal: int | None = None
    # The quota setting that stopped the run (workspace.max_disk, ...); not in the JSON, whose
    # stderr already ends with the note saying so.
    stopped_by: str | None = None
    oom_killed: bool = False
    limits_via: str = "rlimit"  # or "cgroup v2", "cgroup v1"
    seccomp: bool = False  # whether the syscall filter was in place
    net_events: tuple[NetEvent, ...] = ()
    net_events_dropped: int = 0  # decisions past the proxy's cap, not in net_events
    truncated: bool = False  # output beyond the capture cap was dropped
    notes: tuple[str, ...] = ()  # what the runner could not set up, and did without
    # The end of stderr, kept whether or not output was captured: what failed, in its own words.
    stderr_tail: str = ""
    usage: Usage | None = None  # CPU and peak memory (None: the runner could not tell)
    # Why Warden stopped the live sandbox the command ran in, killing it (a revoke, a lost lease):
    # the run service says so on stderr and in the audit, as for a lifecycle change's kill.
    ended_by: str | None = None

    def to_json(self) -> dict[str, object]:
        # Exactly these six: `warden run --json`'s data (INTERFACES.md). `usage` goes where a
        # shape is open to more (the HTTP answer, the audit event).
        return {"exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr,
                "duration_s": round(self.duration_s, 6), "timed_out": self.timed_out, "signal": self.signal}


# What a program prints when it needs the network and has none (pip, uv, npm, curl, git, Python).
_NO_NETWORK = ("Network is unreachable", "Temporary failure in name resolution", "Could not resolve host",
               "Name or service not known", "getaddrinfo EAI_AGAIN", "getaddrinfo ENOTFOUND",
               "No address associated with hostname", "nodename nor servname",
               # pip without retries (NO_NETWORK_ENV) says only that the index had nothing.
               "(from versions: none)")
# The exit status that alone says a name did not resolve (or, wget's, the network failed), for the
# programs an agent most often silences: `curl -s`, `curl -fsSL`, `wget -q` print nothing at all.
_SILENT_NO_NETWORK = {"curl": 6, "wget": 4}
# Installers retry a dead network for 8-60 s before they fail; without network there is nothing
# to wait for, so a run without it tells them not to (the run's own variables win).
NO_NETWORK_ENV = {"PIP_RETRIES": "0", "npm_config_fetch_retries": "0", "UV_HTTP_RETRIES": "0"}
_SIGXFSZ = 25
_SIGXCPU = 24
# How a program that could not start says so: bwrap's exec (and a live sandbox's forked command,
# worded alike), or what starts a live sandbox's command: Warden's sealed launcher
# (adapters/sandbox/rlimit_exec.c) or, where there is none, the sealed copy of util-linux's prlimit.
_EXEC_FAILED = ("bwrap: execvp ", "warden-rlimit-exec: failed to execute ", "prlimit: failed to execute ",
                "warden-forwarder: failed to execute ")  # the relay a run with network starts through
# What a shell, Python or Node prints when fork or clone fails on the process limit (EAGAIN).
_NO_FORK = ("Cannot fork", "fork: Resource temporarily unavailable", "fork: retry",
            "BlockingIOError: [Errno 11] Resource temporarily unavailable", "spawn EAGAIN",
            "can't start new thread", "Resource temporarily unavailable (os error 11)")


def workspace_cwd(cwd: str, workspace: str) -> str:
    """A run's working folder `cwd` as a canonical workspace-relative path (`/` is the workspace).

    `cwd` is hostile input: relative to the workspace, or absolute as the sandbox sees it (the
    workspace is mounted at its own path `workspace`). `..` may not climb out of it and an
    absolute path must lie inside it (InvalidInput otherwise). Lexical only: the run service
    then opens the folder beneath the workspace by descriptor, refusing links and non-folders.
    """
    if not isinstance(cwd, str) or not cwd:
        raise InvalidInput("cwd is empty: give a folder of the workspace, e.g. src")
    if "\0" in cwd:
        raise InvalidInput("cwd contains a NUL byte: give a folder of the workspace, e.g. src")
    if cwd.startswith("/"):
        if not within(cwd, [workspace]):
            # Named relative: the workspace's own path would tell a bot Warden's home and the person's.
            raise InvalidInput(f"cwd {cwd!r} is outside the workspace: give a folder inside it, relative "
                               "to the workspace, e.g. src")
        return normalize(cwd)[len(normalize(workspace)):] or "/"
    try:
        return canonical(cwd)
    except InvalidInput:
        raise InvalidInput(f"cwd {cwd!r} climbs out of the workspace: give a folder inside it, e.g. src") from None


_READ_ONLY = ("Read-only file system", "EROFS")

_EXTERNALLY_MANAGED = "error: externally-managed-environment"
_NO_PIP_MODULE = "No module named pip"

_NO_MEMORY = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory",
              "JavaScript heap out of memory")


# A name worth suggesting: the workspace's .venv/bin and node_modules/.bin are the bot's to fill,
# so a name with a control character or an escape sequence is never echoed to a terminal.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def nearest_program(program: str, programs: Collection[str]) -> str:
    """`: did you mean NAME?` for a mistyped program name (`pyhton` → python), or "" when none is
    close, the name is a path (`./x`: a file, not a typo of a command) or it does exist."""
    if "/" in program or program in programs:
        return ""
    names = [name for name in programs if _PLAIN_NAME.fullmatch(name)]
    found = difflib.get_close_matches(program, names, n=1, cutoff=0.8)
    return f": did you mean {found[0]}?" if found else ""


def explain_not_started(exit_code: int, stderr_tail: str, *, programs: Collection[str] = (),
                        given_path: str | None = None, named: str | None = None) -> str | None:
    """Warden's line for a command whose program could not be started (exit 127 or 126 with the
    exec's own words last on stderr), or None: a foreground run's and a background process's.
    `named`: the program the command named (its argv[0]), where known: a line about another one
    is the command's own text, printed to have Warden vouch for it, not the exec's."""
    last = stderr_tail.strip().rsplit("\n", 1)[-1] if stderr_tail.strip() else ""
    could_not = next((prefix for prefix in _EXEC_FAILED if last.startswith(prefix)), None)
    if exit_code not in (126, 127) or could_not is None:
        return None
    program = last.removeprefix(could_not).rsplit(":", 1)[0]
    if named is not None and not _same_program(program, named):
        return None
    if exit_code == 127 and given_path is not None and "/" not in program and program in programs:
        return (f"warden: {echoed(program)} is not on the PATH the command was given "
                f"(PATH={echoed(given_path, 200)}), though it is on the sandbox's own (/usr/bin, /bin, the "
                "workspace's .venv/bin and node_modules/.bin): leave PATH out, or give it those folders too")
    if exit_code == 127:
        hint = nearest_program(program, programs)
        return (f"warden: {echoed(program)} is not in the sandbox{hint} (it sees /usr, /bin"
                " and the workspace's .venv/bin and node_modules/.bin); `warden install` adds Python or "
                "Node packages")
    return f"warden: {echoed(program)} is not executable inside the sandbox"


def _same_program(said: str, named: str) -> bool:
    """Whether the exec's words `said` are about `named`: as named, or the path a launcher found it at."""
    return said == named or ("/" not in named and said.endswith("/" + named))


def timed_out_line(timeout_s: float, *, again: str = "run") -> str:
    """What `warden run` says when its wall-clock limit killed a command: the limit it reached and
    how to give a longer one, as the other limits' lines do (a person who never chose a timeout
    has met sandbox.timeout's default and needs its name)."""
    shown = format_duration(timedelta(seconds=timeout_s)) if timeout_s == int(timeout_s) else f"{timeout_s:g}s"
    return (f"warden: timed out after {shown}; the command and its processes were killed; {again} it with "
            "--timeout DURATION (e.g. 30m) or set sandbox.timeout")


_NOT_FOUND = "No such file or directory"
# An absolute path as programs print it: `cat: /a/b: …`, `[Errno 2] No such file or directory: '/a/b'`.
_ABSOLUTE = re.compile(r"(?<![\w.~-])/[^\s:'\"`]+")


def explain_denied_path(stderr_tail: str, denied: Sequence[str], *, workspace: str,
                        levels: Sequence[tuple[str, str]] = (), session: str | None = None) -> str | None:
    """The line for a command that did not find a path of this host which a `warden sandbox remove`
    (a deny, at any level) hides from the workspace's commands, or None.

    The program says "No such file or directory", as for a path that does not exist: without
    Warden's line a person who had just denied, or not yet forgotten, a folder went looking for it
    on the host. For a person's run only: a bot is not told the person's path lists. `levels`:
    (path, level) of each deny, so the `sandbox forget` named is the one that takes it back (a
    session's or the global level's deny is not in the workspace's lists, where a bare
    `--workspace` looks: that answered exit 4); `session`: the run's session.
    """
    for line in stderr_tail.splitlines():
        if _NOT_FOUND not in line:
            continue
        for found in _ABSOLUTE.findall(line):
            path = normalize(found.rstrip(".,;)"))
            hidden = next((d for d in denied if within(path, [d])), None)
            if hidden is not None:
                return _denied_line(hidden, [level for path, level in levels if path == hidden],
                                    workspace=workspace, session=session)
    return None


def _denied_line(hidden: str, levels: Sequence[str], *, workspace: str, session: str | None) -> str:
    where = {"global": " --level global", "workspace": f" --workspace {workspace}",
             "session": f" --workspace {workspace} --session {echoed(session or 'ID')}"}
    forgets = [f"`warden sandbox forget {echoed(hidden)}{where[level]}`"
               for level in ("session", "workspace", "global") if level in levels] or [
        f"`warden sandbox forget {echoed(hidden)} --workspace {workspace}`"]
    takes = forgets[0] + " takes" if len(forgets) == 1 else " and ".join(forgets) + " take"
    listed = f" --session {echoed(session)}" if session is not None else ""
    return (f"warden: {echoed(hidden)} is denied to this workspace's commands, so the sandbox hides it; "
            f"{takes} the deny back (`warden sandbox list --workspace {workspace}{listed}` shows at which "
            "level it is)")


def explain_failure(exit_code: int, signal: int | None, stderr_tail: str, *, oom_killed: bool,
                    network: bool, max_file_mb: int, memory: int, bot: bool = False,
                    pids: int | None = None, programs: Collection[str] = (),
                    cpu_seconds: int | None = None, given_path: str | None = None,
                    workspace: str = "NAME", mcp: bool = False,
                    read_only_folders: Sequence[str] = (), closed_folders: Sequence[str] = (),
                    kept_folders: Sequence[str] = (), program: str | None = None) -> str | None:
    """One line saying what Warden's sandbox had to do with a failed command, or None.

    A command that fails inside the sandbox says so in its own words (`bwrap: execvp pyhton`,
    "File too large", a DNS error); this names the limit or the missing piece behind it and
    the setting or flag that changes it (`bot`: in the words of the HTTP API, which a bot
    uses, rather than the CLI's). `programs`: the names the sandbox's PATH holds, for a
    "did you mean" when a program is not found; `given_path`: the PATH the command was given
    in its environment, if it was (a program then missing from it may well be in the sandbox).
    `workspace`: its name, for a command to copy; `mcp`: a bot's MCP call, whose tools can ask
    neither for network nor for packages (the person's `warden install` can); `read_only_folders`:
    the workspace's folders (its zones) mounted read-only in this run, relative to it, and
    `closed_folders` those of them the file API refuses to write too (a zone that is `ro` or blocks
    writes); `kept_folders`: its zones where nothing may be removed or renamed in runs (deletes
    that ask or are blocked); `program`: the command's argv[0], for a program known to fail without a
word when silenced (`curl -s` exits 6 on a name that does not resolve). Pure: the caller passes
the facts.
    """
    not_started = explain_not_started(exit_code, stderr_tail, programs=programs, given_path=given_path)
    if not_started is not None:
        return not_started
    # RLIMIT_CPU: SIGXCPU at the soft limit (a shell in between says it in its own words).
    if cpu_seconds is not None and (signal == _SIGXCPU or "CPU time limit exceeded" in stderr_tail):
        if bot:
            return (f"warden: the command used up its CPU time ({cpu_seconds} s, the server's "
                    "sandbox.cpu_seconds); split the work into shorter commands")
        return (f"warden: the command used up its CPU time ({cpu_seconds} s); run it with --cpu SECONDS "
                "or set sandbox.cpu_seconds")
    if signal == _SIGXFSZ or "File too large" in stderr_tail:
        return (f"warden: a file reached the sandbox's size limit ({max_file_mb} MB, "
                "sandbox.max_file_size_mb); `warden config set sandbox.max_file_size_mb N` raises it")
    # Killed by the cgroup's OOM killer, or (without a memory cgroup: RLIMIT_DATA) refused an
    # allocation, which programs report in their own words.
    if oom_killed or (exit_code != 0 and any(text in stderr_tail for text in _NO_MEMORY)):
        return (f"warden: the command ran out of memory (limit {memory >> 20} MiB); run it with "
                "--memory SIZE or set sandbox.memory")
    if pids is not None and exit_code != 0 and any(text in stderr_tail for text in _NO_FORK):
        if bot:
            return (f"warden: the command reached its process limit ({pids} processes and threads), "
                    "the server's sandbox.pids; run fewer at once")
        return (f"warden: the command reached its process limit ({pids} processes and threads); "
                "run it with --pids N or set sandbox.pids")
    # EROFS: the sandbox mounts the system and any `--mode ro` host path read-only, and the
    # program's own message ("Read-only file system") does not say that this is by design.
    if exit_code != 0 and any(text in stderr_tail for text in _READ_ONLY):
        if read_only_folders:
            return _read_only_zones_line(read_only_folders, closed_folders, bot=bot, mcp=mcp, workspace=workspace)
        if bot:
            return ("warden: that path is read-only in the sandbox (the system and read-only mounts); "
                    "write in the workspace, which is the command's folder, or in /tmp")
        return ("warden: that path is read-only in the sandbox (the system and read-only mounts); write in "
                "the workspace, which is the command's folder, or in /tmp; `warden sandbox add PATH --mode rw` "
                "mounts a host folder writable")
    # A workspace's venv is built by uv, without pip: `pip install` finds the system's pip, which
    # Debian marks externally managed (PEP 668) and which says "apt install python3-xyz".
    # `python -m pip`, as pip's own docs say it, finds the venv's Python, which has no pip module.
    no_pip = ("that pip is the system's (the workspace's venv has none)" if _EXTERNALLY_MANAGED in stderr_tail
              else "the workspace's venv has no pip" if _NO_PIP_MODULE in stderr_tail else None)
    if exit_code != 0 and no_pip is not None:
        if bot and mcp:
            return (f"warden: {no_pip}, and no MCP tool adds packages: ask the person to run "
                    f"`warden install {workspace} PACKAGE...`")
        if bot:
            return f"warden: {no_pip}; add packages to the workspace with POST /v1/workspaces/{workspace}/install"
        return (f"warden: {no_pip}; `warden install {workspace} PACKAGE...` adds packages to the workspace's venv, "
                "with the network it needs for that command")
    silenced = program is not None and _SILENT_NO_NETWORK.get(program.rsplit("/", 1)[-1]) == exit_code
    if not network and exit_code != 0 and (silenced or any(text in stderr_tail for text in _NO_NETWORK)):
        if bot and mcp:
            return ("warden: the sandbox has no network, and an MCP exec cannot ask for it; for packages, ask "
                    f"the person to run `warden install {workspace} PACKAGE...`")
        if bot:
            return ('warden: the sandbox has no network; ask for it for one command with "network": '
                    '{"allow": ["HOST:443"]} (within the domains your grant allows), or add packages '
                    f"with POST /v1/workspaces/{workspace}/install")
        return ("warden: the sandbox has no network; run with --net allow --allow-domain HOST "
                "(or `warden install` for packages)")
    # EACCES from Landlock: with a zone whose deletes ask or are blocked, no run of the workspace may
    # remove or rename there, nor directly in the workspace folder (Landlock only grants), and `rm`
    # says only "Permission denied": a person whose `rm x` at the top had always worked was lost.
    if kept_folders and exit_code != 0 and any(text in stderr_tail for text in _NO_PERMISSION):
        return _kept_zones_line(kept_folders, bot=bot, mcp=mcp, workspace=workspace)
    return None


_NO_PERMISSION = ("Permission denied", "permission denied", "EACCES")


def _zone_list(folders: Sequence[str]) -> str:
    return ", ".join(f"/{echoed(folder)}" for folder in folders[:5])


def _read_only_zones_line(read_only: Sequence[str], closed: Sequence[str], *, bot: bool, mcp: bool,
                          workspace: str) -> str:
    """EROFS in a workspace whose zones are mounted read-only: which zones, and how their files do
    change (through the file API, asking a person where the zone says so), or that they do not: a
    zone that is `ro` or blocks writes refuses the file API too, so sending anyone there ran in a
    circle (a person told `warden fs NAME write PATH` was then refused "zone input is ro")."""
    # "write in the workspace" alone sent a bot that had written in the workspace in circles.
    open_ = [folder for folder in read_only if folder not in closed]
    shut = [folder for folder in read_only if folder in closed]
    takes = "takes" if len(shut) == 1 else "take"
    if bot:
        said = (f"warden: that path is read-only in the sandbox (the system, read-only mounts, and this "
                f"workspace's folders {_zone_list(read_only)}); write elsewhere in the workspace or in /tmp")
        way = ("the write_file tool" if mcp else
               f"the file API (PUT /v1/workspaces/{workspace}/files/content?path=…, the SDK's files.write)")
        if open_:
            which = "those folders" if not shut else _zone_list(open_)
            said += f"; files in {which} change through {way}, which asks a person where the folder says so"
        if shut:
            said += f"; {_zone_list(shut)} {takes} no writes from you at all"
        return said
    said = (f"warden: that path is read-only in the sandbox (the system, read-only mounts, and the zones "
            f"{_zone_list(read_only)} of the workspace's .warden/zones.yaml); "
            "write elsewhere in the workspace or in /tmp")
    if open_:
        which = "a zone's files" if not shut else f"the files of {_zone_list(open_)}"
        said += f"; {which} change through `warden fs {workspace} write PATH`"
    if shut:
        said += (f"; {_zone_list(shut)} {takes} no writes, `warden fs` included (a zone that is ro or blocks "
                 "writes): change the files on the host, or the zone in .warden/zones.yaml")
    return said


def _kept_zones_line(kept: Sequence[str], *, bot: bool, mcp: bool, workspace: str) -> str:
    """EACCES in a workspace where runs may remove or rename nothing in some zones (nor directly in
    the workspace folder): say so, and the way that removes (the file API, under the zone's rule)."""
    said = (f"warden: runs of this workspace cannot remove or rename entries in the zones {_zone_list(kept)} "
            "(their deletes ask a person or are blocked), nor directly in the workspace folder or in a top-level "
            "folder a run made")
    if bot and mcp:
        return said + "; delete_file and move_file do it, asking a person where the zone says so"
    if bot:
        return (said + f"; the file API does it (DELETE /v1/workspaces/{workspace}/files?path=…, the SDK's "
                "files.delete), asking a person where the zone says so")
    return said + f"; `warden fs {workspace} rm PATH` (or `mv`) does it where the zone allows"
