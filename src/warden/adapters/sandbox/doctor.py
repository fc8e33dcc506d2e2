"""Probes of what this machine offers for sandboxing, each with the fix when it is missing."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from warden.adapters.sandbox import cgroups
from warden.adapters.sandbox.host import bwrap_has, bwrap_path, python3_path, system_layout

__all__ = ["Check", "delegation_fix", "run_checks", "userns_fix"]


@dataclass(frozen=True)
class Check:
    """One probe: its name, whether it passed, what was seen, and how to fix it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "required": self.required,
                "detail": self.detail, "fix": self.fix}


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return None


def userns_fix() -> str | None:
    """The sysctl that blocks unprivileged user namespaces here, with its fix, if one does."""
    if _sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return ("AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+/24.04): run "
                "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (persist it in "
                "/etc/sysctl.d/), or add an AppArmor profile that allows userns for /usr/bin/bwrap")
    if _sysctl("kernel.unprivileged_userns_clone") == "0":
        return "run `sudo sysctl -w kernel.unprivileged_userns_clone=1` (Debian kernels before 5.10)"
    if _sysctl("user.max_user_namespaces") == "0":
        return "run `sudo sysctl -w user.max_user_namespaces=15000`"
    return None


def _bwrap_check() -> tuple[Check, str | None]:
    path = bwrap_path()
    if path is None:
        return Check("bubblewrap", False, "bwrap not found",
                     "apt-get install bubblewrap (dnf install bubblewrap, pacman -S bubblewrap)"), None
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                                 check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("bubblewrap", False, f"{path} does not run: {exc}", "reinstall bubblewrap"), None
    return Check("bubblewrap", True, f"{path} ({version or 'unknown version'})"), path


def _userns_check(bwrap: str | None) -> Check:
    """Really start a sandbox as Warden would (user, pid, net namespaces) running `true`."""
    if bwrap is None:
        return Check("user namespaces", False, "not tested (no bwrap)", "install bubblewrap first")
    system_ro, links = system_layout()
    argv = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--cap-drop", "ALL"]
    for p in system_ro:
        argv += ["--ro-bind", p, p]
    for target, link in links:
        argv += ["--symlink", target, link]
    argv += ["--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp, check=False)
    uid = os.getuid()
    who = "root" if uid == 0 else f"uid {uid}"
    if proc.returncode == 0:
        return Check("user namespaces", True, f"a sandbox starts as {who}")
    message = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return Check("user namespaces", False, f"bwrap failed as {who}: {message[0]}",
                 userns_fix() or "enable unprivileged user namespaces in the kernel (CONFIG_USER_NS)")


def _seccomp_check() -> Check:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    if "Seccomp:" not in status:
        return Check("seccomp", False, "the kernel has no seccomp", "use a kernel built with CONFIG_SECCOMP_FILTER")
    from warden.adapters.sandbox.seccomp import filter_bpf, libseccomp_version

    version = libseccomp_version()
    if version is None:
        return Check("seccomp", False, "libseccomp not found (commands run without the syscall filter)",
                     "apt-get install libseccomp2")
    try:
        size = len(filter_bpf())
    except Exception as exc:
        return Check("seccomp", False, f"libseccomp {version} failed: {exc}", "reinstall libseccomp2")
    return Check("seccomp", True, f"libseccomp {version}, filter of {size // 8} BPF instructions")


def _landlock_check() -> Check:
    """What Landlock holds here: zones whose deletes need a person stay writable in runs but
    nothing can be removed or renamed in them (ABI 2+); without it such zones are read-only in runs."""
    from warden.adapters.sandbox.host import python3_path
    from warden.adapters.sandbox.landlock import abi, needed_abi

    version = abi()
    if version < needed_abi:
        why = f"Landlock ABI {version}" if version else "no Landlock in this kernel (or disabled at boot)"
        return Check("landlock", False, f"{why}: zones whose deletes are ask or blocked are read-only "
                     "inside runs (writes there go through `warden fs` and approvals)",
                     "boot Linux 5.19+ with lsm=landlock,... to keep them writable", required=False)
    if python3_path() is None:
        return Check("landlock", False, f"Landlock ABI {version}, but no system python3 to apply it in the "
                     "sandbox: zones whose deletes are ask or blocked are read-only inside runs",
                     "apt-get install python3-minimal", required=False)
    return Check("landlock", True, f"Landlock ABI {version}: no removing or renaming inside runs in zones "
                 "whose deletes are ask or blocked", required=False)


def _quota_check(workspaces_root: str) -> Check:
    """Which mechanism holds the workspace disk quota (workspace.max_disk, max_files) here."""
    from warden.adapters.disk_usage import inotify_works
    from warden.adapters.project_quota import project_quota
    from warden.adapters.quota import OVERSHOOT, RESCAN_S, realtime_allowed

    _kernel, seen = project_quota(workspaces_root)
    # Detection only: Warden does not set project quotas itself yet, so its watcher holds either way.
    kernel = f"kernel project quota not used ({seen})"
    if not inotify_works():
        return Check("disk quota", False, f"Warden's watcher rescans every {RESCAN_S} s (inotify unavailable): "
                     f"a fast writer passes the limit by what it writes meanwhile; {kernel}",
                     "raise fs.inotify.max_user_instances (sysctl)", required=False)
    if realtime_allowed():
        return Check("disk quota", True, f"Warden's watcher (inotify, real-time priority): overshoot bounded "
                     f"by {OVERSHOOT}; {kernel}", required=False)
    return Check("disk quota", False, "Warden's watcher (inotify, normal priority): a busy machine can delay it, "
                 f"and a fast writer's overshoot past the limit is then tens of MiB; {kernel}",
                 "give Warden's user real-time priority 1 (`USER - rtprio 1` in /etc/security/limits.conf) "
                 "or CAP_SYS_NICE", required=False)


def _systemd_user_manager(environ: dict[str, str] | None = None) -> bool:
    """Whether this user has a systemd user manager to ask (`systemd-run --user` needs one)."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return os.path.exists(os.path.join(runtime, "systemd", "private"))


def delegation_fix(environ: dict[str, str] | None = None) -> str:
    """How to get cgroups without root. `systemd-run --user` only works in a systemd user session
    (else "Failed to connect to bus"), so where there is none the fix says so."""
    delegated = "systemd-run --user --scope -p Delegate=yes warden ..."
    if _systemd_user_manager(environ):
        return f"run Warden as root, or in a delegated cgroup ({delegated})"
    return (f"run Warden as root, or in a cgroup delegated to this user (`{delegated}` needs a systemd user "
            "session, which this one has not: log in through systemd-logind, or `loginctl enable-linger USER`)")


def run_checks(workspaces_root: str | None = None) -> list[Check]:
    """Every probe, required ones first; the disk quota's when `workspaces_root` is given."""
    bwrap_check, bwrap = _bwrap_check()
    checks = [bwrap_check, _userns_check(bwrap)]
    disable = bwrap_has("--disable-userns")
    checks.append(Check("nested userns blocked", disable,
                        "bwrap --disable-userns" if disable else "this bwrap lacks --disable-userns",
                        "" if disable else "install bubblewrap 0.8 or newer", required=False))
    support = cgroups.detect()
    ok = support.memory is not None and support.pids is not None
    detail = f"per-run cgroups: {support.mode}"
    if support.notes:
        detail += "; " + "; ".join(support.notes)
    # RLIMIT_NPROC never binds uid 0: as root, nothing but a pids cgroup holds a process limit.
    root_without_pids = support.pids is None and os.getuid() == 0
    if ok:
        fallback, fix = "", ""
    elif root_without_pids:
        fallback = "; as root without a pids cgroup every command is refused (sandbox.pids_unenforced)"
        fix = "give Warden a writable pids cgroup (mount the pids controller, or run it in a delegated cgroup)"
    else:
        # Say what each missing controller changes, not only that one is missing.
        changes = []
        if support.memory is None:
            changes.append("the memory limit holds each process's private memory (RLIMIT_DATA), not the "
                           "run's total, and shared memory only up to an address-space cap")
        if support.pids is None:
            changes.append("the process limit counts all of this user's processes (RLIMIT_NPROC)")
        fallback = "; falling back to rlimits: " + "; ".join(changes)
        fix = delegation_fix()
    checks.append(Check("cgroups", ok, detail + fallback, fix, required=root_without_pids))
    checks.append(_seccomp_check())
    checks.append(_landlock_check())
    python = python3_path()
    checks.append(Check("network relay", python is not None,
                        f"{python} runs the in-sandbox proxy relay" if python else "no system python3",
                        "" if python else "apt-get install python3-minimal (needed for --net allow)",
                        required=False))
    checks.append(_live_check(python, ok))
    if workspaces_root is not None:
        checks.append(_quota_check(workspaces_root))
    return checks


def _live_check(python: str | None, cgroups_ok: bool) -> Check:
    """What live sandboxes (`run --detach`, background processes) need: a system python3 for the
    supervisor inside; with cgroups, each command's leftovers are killed at its end."""
    if python is None:
        return Check("live sandboxes", False, "no system python3 for the supervisor: background processes "
                     "(`warden run --detach`, `\"background\": true`) are refused",
                     "apt-get install python3-minimal", required=False)
    from warden.adapters.sandbox.live import HOST_PRLIMIT, HOST_RLIMIT_EXEC

    children = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    detail = f"{python} runs the supervisor; " + (
        "commands found through /proc/PID/task/TID/children" if children
        else "commands found by a scan of /proc (this kernel lacks CONFIG_PROC_CHILDREN: slower)")
    # Without either a command still starts with its limits, forked by the supervisor: ~2x the time.
    if os.access(HOST_RLIMIT_EXEC, os.X_OK):
        detail += f"; commands start through Warden's sealed launcher ({HOST_RLIMIT_EXEC})"
    elif os.access(HOST_PRLIMIT, os.X_OK):
        detail += ("; commands start through a sealed copy of prlimit, ~1 ms slower each than through Warden's "
                   "own launcher (install gcc, then run scripts/setup again)")
    else:
        detail += f"; no {HOST_PRLIMIT} (util-linux): each command is forked by the supervisor, slower"
    if not cgroups_ok:
        return Check("live sandboxes", False, detail + "; without cgroups a command that leaves its session "
                     "survives its end in the live sandbox (until the sandbox stops)",
                     "run Warden as root, or in a delegated cgroup", required=False)
    return Check("live sandboxes", True, detail + "; each command in a cgroup of its own", required=False)
