"""The pure builder `SandboxSpec → bwrap argv` (no I/O: the adapter gathers host facts first).

Mount order matters to bubblewrap (each operation applies in turn), so the argv is laid in
layers: namespaces and process hygiene; the read-only system; a fresh /proc, /dev and a
private /tmp; the /etc entries programs need; read-only interpreter prefixes and env
layers; the workspace read-write at its own host path; extra allowed paths; then the
read-only re-binds of protected files and ro zones, which must come after the workspace
bind to cover it; masks over denied paths; and last the root made read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from warden.core.policy import PROTECTED_WORKSPACE_PATHS

__all__ = [
    "DEFAULT_ETC",
    "PROC_MASKED_DIRS",
    "PROC_MASKED_FILES",
    "PROC_READONLY",
    "PROTECTED_NAMES",
    "PROXY_SOCKET",
    "Bind",
    "SandboxSpec",
    "bwrap_argv",
    "bwrap_environ",
    "bwrap_options",
    "is_loader_variable",
    "sandbox_path",
]

# Only the /etc entries ordinary programs read: the loader cache, name service, TLS roots,
# Debian's alternatives links, time zone, OS identity and fontconfig. Never pip.conf, .netrc-like files,
# machine-id or the host's passwd (a synthesized one is bound instead).
DEFAULT_ETC = (
    "/etc/ld.so.cache", "/etc/nsswitch.conf", "/etc/ssl", "/etc/ca-certificates",
    "/etc/alternatives", "/etc/localtime", "/etc/os-release",
    "/etc/fonts",  # fontconfig's configuration: without it matplotlib and fc-* print a Fontconfig error
)
# Files and folders of a workspace a command must not change, as workspace-relative names:
# the policy's one list (Warden's metadata, .git, shell start-up files).
PROTECTED_NAMES = tuple(p.lstrip("/") for p in PROTECTED_WORKSPACE_PATHS)
# Where the network proxy's Unix socket appears inside the sandbox.
PROXY_SOCKET = "/run/warden/proxy.sock"
# Kernel-wide knobs in the fresh /proc. When Warden runs as root, the sandbox's uid 0 is the
# host's uid 0 (bwrap maps it 1:1), and /proc/sys checks only that uid, not capabilities:
# `echo '|/x' > /proc/sys/kernel/core_pattern` from inside would make the host kernel run
# /x as root on the next crash. bwrap covers /proc/sys only when it can open the *folder*
# for writing, which procfs never allows, so Warden covers these itself, read-only (as
# Docker does). Host-wide information leaks (other processes in timer_list, kernel memory
# maps) are hidden the same way.
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs")
PROC_MASKED_FILES = ("/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list",
                     "/proc/timer_stats", "/proc/sched_debug", "/proc/latency_stats",
                     "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup")
PROC_MASKED_DIRS = ("/proc/acpi", "/proc/scsi", "/proc/asound")
# Variables that the dynamic loader and libc of *bwrap itself* act on. bwrap runs on the
# host, unsandboxed (as root when Warden is root), so `LD_PRELOAD=<ws>/evil.so` in its
# environment would run the bot's code outside the sandbox. These reach the command through
# `--setenv` instead, which bwrap applies after it has started.
_LOADER_NAMES = frozenset({
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZ", "TZDIR",
})


@dataclass(frozen=True)
class Bind:
    """One host path mounted at the same path inside, read-only or read-write."""

    path: str
    mode: Literal["ro", "rw"] = "ro"


@dataclass(frozen=True)
class SandboxSpec:
    """Everything bubblewrap needs to know about one run; built by the sandbox adapter."""

    workspace: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    # The command's working folder inside the sandbox (None: the workspace). bwrap changes to it
    # after pivoting into the sandbox's root, so it resolves only within what the sandbox sees.
    cwd: str | None = None
    # The read-only system: directories bound at their own path, and (target, link) pairs
    # for merged-/usr links such as /bin → usr/bin.
    system_ro: tuple[str, ...] = ("/usr",)
    system_links: tuple[tuple[str, str], ...] = (("usr/bin", "/bin"), ("usr/lib", "/lib"))
    etc: tuple[str, ...] = DEFAULT_ETC
    # /etc entries that are symlinks on the host (localtime, os-release): recreated as links.
    etc_links: tuple[tuple[str, str], ...] = ()
    # (fd, destination) pairs of synthesized files (passwd, group, hosts) read by bwrap.
    data_files: tuple[tuple[int, str], ...] = ()
    # (fd, destination) pairs of programs written the same way, executable and readable by no one:
    # a process running one is not dumpable (no /proc/PID/mem or ptrace by its neighbours).
    sealed_programs: tuple[tuple[int, str], ...] = ()
    # Interpreter prefixes (a venv's base Python) and env layers, read-only at their own path.
    ro_paths: tuple[str, ...] = ()
    # Extra paths allowed by the path policy (global, workspace, session), with their mode.
    extra_binds: tuple[Bind, ...] = ()
    # Existing protected files and ro zones inside the workspace, re-bound read-only.
    protected: tuple[str, ...] = ()
    ro_zones: tuple[str, ...] = ()
    # Zones where nothing may be removed or renamed: the command runs under the Landlock
    # launcher (adapters/sandbox/landlock.py), whose source is one of the data files.
    keep_zones: tuple[str, ...] = ()
    # Directories bound onto themselves read-write so that they cannot be renamed away from
    # the read-only mounts inside them (`mv .git x && mkdir -p .git/hooks` otherwise works).
    pinned: tuple[str, ...] = ()
    # Denied paths that lie inside a mounted tree: directories hidden under an empty
    # read-only tmpfs, files under /dev/null.
    masked_dirs: tuple[str, ...] = ()
    masked_files: tuple[str, ...] = ()
    # For each denied path inside a mounted tree that did not exist (bwrap has nothing to mount
    # over), the first name on the way to it that did not: one made later would be seen, so a
    # live sandbox is not used again once such a name exists.
    unmasked_denied: tuple[str, ...] = ()
    network: Literal["none", "proxy"] = "none"
    proxy_socket: str | None = None  # host path of the proxy's Unix socket
    seccomp_fd: int | None = None
    disable_userns: bool = True
    # A live sandbox (adapters/sandbox/live.py) outlives the Warden process that starts it, so
    # it is started without --die-with-parent; Warden stops it through the registry instead.
    die_with_parent: bool = True
    tmp_size: int | None = None
    hostname: str = "warden"
    # Parts of the fresh /proc covered read-only / hidden (the adapter keeps those that exist).
    proc_readonly: tuple[str, ...] = ("/proc/sys",)
    proc_masked_files: tuple[str, ...] = ()
    proc_masked_dirs: tuple[str, ...] = ()
    # (path, fd) pairs of sources inside the workspace, opened by the runner without
    # following links: bwrap mounts that very inode instead of resolving the path again,
    # which a concurrent command could have swapped for a link to `..` in between.
    bind_fds: tuple[tuple[str, int], ...] = ()

    def workspace_sources(self) -> list[str]:
        """The mount sources that lie inside the (bot-writable) workspace."""
        inside = [b.path for b in self.extra_binds] + [*self.pinned, *self.protected, *self.ro_zones]
        prefix = self.workspace.rstrip("/") + "/"
        return list(dict.fromkeys(p for p in inside if p.startswith(prefix)))


def is_loader_variable(name: str) -> bool:
    """Whether the dynamic loader or libc of a host program would act on variable `name`."""
    return name.startswith(("LD_", "MALLOC_")) or name in _LOADER_NAMES


def bwrap_environ(spec: SandboxSpec) -> dict[str, str]:
    """The environment of the bwrap process itself: the sandbox's, without loader variables."""
    return {k: v for k, v in spec.env.items() if not is_loader_variable(k)}


def sandbox_path(workspace: str) -> str:
    """PATH inside: the workspace's venv and node tools first, then the system."""
    return f"{workspace}/.venv/bin:{workspace}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"


def bwrap_argv(spec: SandboxSpec, bwrap: str = "bwrap") -> list[str]:
    """The full argv: bwrap, its options, `--`, then the command."""
    return [bwrap, *bwrap_options(spec), "--", *spec.command]


def bwrap_options(spec: SandboxSpec) -> list[str]:
    """bwrap's options for `spec`, without the command.

    The runner hands these to bwrap through `--args FD` rather than on its command line: a
    process's argv is world-readable in /proc/PID/cmdline, on the host and (bwrap's init is pid
    1 there) inside the sandbox, and these name host paths and carry `--setenv` values.
    """
    if not spec.command:
        raise ValueError("empty command")
    if not spec.workspace.startswith("/"):
        raise ValueError("workspace must be an absolute path")
    argv = [# As root, --unshare-all alone keeps the host user namespace: ask for one.
            "--unshare-all", "--unshare-user"]
    if spec.disable_userns:
        argv.append("--disable-userns")
    if spec.die_with_parent:
        argv.append("--die-with-parent")
    argv += ["--new-session",  # setsid: no controlling tty, so no TIOCSTI injection
             "--cap-drop", "ALL",
             "--hostname", spec.hostname]
    for path in spec.system_ro:
        argv += ["--ro-bind", path, path]
    for target, link in spec.system_links:
        argv += ["--symlink", target, link]
    argv += ["--proc", "/proc"]
    for path in spec.proc_readonly:
        argv += ["--ro-bind", path, path]
    for path in spec.proc_masked_files:
        argv += ["--ro-bind", "/dev/null", path]
    for path in spec.proc_masked_dirs:
        argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    argv += ["--dev", "/dev", "--perms", "1777"]
    if spec.tmp_size:
        argv += ["--size", str(spec.tmp_size)]
    argv += ["--tmpfs", "/tmp"]  # noqa: S108 (a private tmpfs inside the sandbox)
    for path in spec.etc:
        argv += ["--ro-bind-try", path, path]
    if spec.network == "proxy":
        argv += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    for target, link in spec.etc_links:
        argv += ["--symlink", target, link]
    for fd, dest in spec.data_files:
        # A file written into the sandbox's root (read-only once the root is remounted):
        # cheaper than a bind mount per file.
        argv += ["--perms", "0444", "--file", str(fd), dest]
    for fd, dest in spec.sealed_programs:
        argv += ["--perms", "0111", "--file", str(fd), dest]
    for path in spec.ro_paths:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", spec.workspace, spec.workspace]
    fds = dict(spec.bind_fds)

    def bind(path: str, mode: str) -> list[str]:
        if path in fds:
            return ["--bind-fd" if mode == "rw" else "--ro-bind-fd", str(fds[path]), path]
        return ["--bind" if mode == "rw" else "--ro-bind", path, path]

    for extra in spec.extra_binds:
        argv += bind(extra.path, extra.mode)
    for path in spec.pinned:
        argv += bind(path, "rw")
    for path in (*spec.protected, *spec.ro_zones):
        argv += bind(path, "ro")
    for path in spec.masked_dirs:
        argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    for path in spec.masked_files:
        argv += ["--ro-bind", "/dev/null", path]
    if spec.network == "proxy":
        if not spec.proxy_socket:
            raise ValueError("network proxy without a socket")
        argv += ["--ro-bind", spec.proxy_socket, PROXY_SOCKET]
    argv += ["--remount-ro", "/", "--chdir", spec.cwd or spec.workspace]
    if spec.seccomp_fd is not None:
        argv += ["--seccomp", str(spec.seccomp_fd)]
    for name, value in spec.env.items():
        if is_loader_variable(name):
            argv += ["--setenv", name, value]
    return argv
