"""Facts of this host that the sandbox needs, gathered once, and the SandboxSpec built from them.

Everything here is cheap and cached per process: `warden run` must start in well under
150 ms, so the bwrap features are read from the binary itself (a scan for the option
name, ~50 µs) instead of running `bwrap --help`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path

from warden.core.bwrap_argv import (
    DEFAULT_ETC,
    PROC_MASKED_DIRS,
    PROC_MASKED_FILES,
    PROC_READONLY,
    PROTECTED_NAMES,
    Bind,
    SandboxSpec,
    is_loader_variable,
    sandbox_path,
)
from warden.core.errors import Denied, InvalidInput, Unavailable, WardenError
from warden.core.shell_env import refuse_shell_startup_env

__all__ = [
    "build_spec",
    "bwrap_has",
    "bwrap_path",
    "data_files",
    "python3_path",
    "system_layout",
]

_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ENV_NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


@cache
def bwrap_path() -> str | None:
    """The bubblewrap binary, looked up in the system folders first (not a bot-writable PATH)."""
    for candidate in ("/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"):
        if os.access(candidate, os.X_OK):
            return candidate
    import shutil

    return shutil.which("bwrap")


@cache
def bwrap_has(option: str) -> bool:
    """Whether this bwrap knows `option` (its help text is in the binary)."""
    path = bwrap_path()
    if path is None:
        return False
    try:
        data = Path(path).read_bytes()
    except OSError:
        return False
    return option.encode() + b"\0" in data or option.encode() + b" " in data


@cache
def system_layout() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(read-only system folders, merged-/usr links) of this host."""
    ro = ["/usr"]
    links: list[tuple[str, str]] = []
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isdir(path):
            ro.append(path)
    return tuple(ro), tuple(links)


@cache
def etc_layout() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(/etc entries to bind, (target, link) for those that are symlinks into /usr)."""
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for path in DEFAULT_ETC:
        if os.path.islink(path):
            target = os.readlink(path)
            resolved = os.path.normpath(os.path.join("/etc", target))
            if resolved.startswith("/usr/"):
                links.append((target, path))
                continue
        if os.path.lexists(path):
            binds.append(path)
    return tuple(binds), tuple(links)


@cache
def proc_layout() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(read-only, masked files, masked folders) of /proc that exist on this kernel.

    The sandbox's /proc is a fresh mount of the same kernel, so the host's entries tell
    which ones it will have (bwrap cannot mount over an entry that does not exist).
    """
    return (tuple(p for p in PROC_READONLY if os.path.exists(p)),
            tuple(p for p in PROC_MASKED_FILES if os.path.isfile(p)),
            tuple(p for p in PROC_MASKED_DIRS if os.path.isdir(p)))


@cache
def python3_path() -> str | None:
    """A system python3 visible inside the sandbox (for the network forwarder)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def data_files(uid: int, gid: int, workspace: str) -> list[tuple[str, bytes]]:
    """Synthesized /etc files: who the sandbox user is, without the host's user list."""
    users = {0: "root", 65534: "nobody"}
    groups = {0: "root", 65534: "nogroup"}
    name = users.get(uid, "warden")
    passwd = [f"{users[u]}:x:{u}:{u if u == 0 else 65534}:{users[u]}:/nonexistent:/bin/sh"
              for u in users if u != uid]
    passwd.append(f"{name}:x:{uid}:{gid}:{name}:{workspace}:/bin/sh")
    group_lines = [f"{groups[g]}:x:{g}:" for g in groups if g != gid]
    group_lines.append(f"{groups.get(gid, 'warden')}:x:{gid}:")
    hosts = "127.0.0.1\tlocalhost warden\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    return [("/etc/passwd", ("\n".join(passwd) + "\n").encode()),
            ("/etc/group", ("\n".join(group_lines) + "\n").encode()),
            ("/etc/hosts", hosts.encode())]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _protected(workspace: str, extra: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(existing protected paths, folders to pin); Denied when one is reached via a symlink."""
    protected: list[str] = []
    pinned: list[str] = []
    names = list(PROTECTED_NAMES)
    for path in extra:
        rel = os.path.relpath(os.path.normpath(path), workspace)
        if not rel.startswith("..") and rel != "." and rel not in names:
            names.append(rel)
    for name in names:
        path = os.path.join(workspace, name)
        if not os.path.lexists(path):
            continue
        # A symlink cannot be covered by a mount (the mount lands on its target), and a bot
        # could swap it afterwards: refuse rather than leave hooks or rc files writable.
        current = workspace
        for part in name.split("/"):
            current = os.path.join(current, part)
            if os.path.islink(current):
                raise Denied(f"{current} is a symlink; Warden protects it read-only, so replace "
                             "the link with the real file or folder", rule="sandbox.protected_symlink")
        protected.append(path)
        if "/" in name:
            # Pin the top folder (e.g. .git) so it cannot be renamed away from the mounts.
            parent = os.path.join(workspace, name.split("/")[0])
            if parent not in pinned:
                pinned.append(parent)
    return protected, pinned


def open_beneath(workspace: str, path: str, *, make_folders: bool = False) -> int:
    """An O_PATH descriptor of `path` inside `workspace`, no component followed if a link;
    `make_folders`: its missing components made as folders first (a read-only zone's), and it
    must be a folder.

    Raises Denied for a link (or a file where a folder must be) and Unavailable when the path
    changed since it was checked.
    """
    rel = os.path.relpath(path, workspace)
    parts = rel.split("/")
    # Messages name the path as the file API does (`/.venv`): a bot reads them, and the host
    # path would tell it Warden's home and the person's.
    shown = "/" + rel
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            if part in ("", ".", ".."):
                raise Denied(f"{shown} is not inside the workspace", rule="sandbox.protected_symlink")
            if make_folders:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise Unavailable(f"{shown} changed while the sandbox was being set up ({exc.strerror}); "
                                  "run the command again", rule="sandbox.setup_raced") from None
            os.close(fd)
            fd = nxt
            mode = os.fstat(fd).st_mode
            folder = index < len(parts) - 1 or make_folders
            if stat.S_ISLNK(mode) or (folder and not stat.S_ISDIR(mode)):
                raise Denied(f"{shown} is a symbolic link or goes through one (or through a file); Warden "
                             "mounts only real files and folders of the workspace: replace the link",
                             rule="sandbox.protected_symlink")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _innermost(path: str, roots: Iterable[str]) -> str | None:
    """The innermost of `roots` that holds `path` below it (None: none does)."""
    holding = [r for r in roots if path != r and _under(path, r)]
    return max(holding, key=len) if holding else None


def _refuse_link_above(path: str, writable_roots: Iterable[str]) -> None:
    """Denied: a link in a tree the command can write between its root and denied `path`. The
    mask lands where the link points, a folder behind a link is never pinned, and the command
    can point the link elsewhere: `mv b c` (or `ln -sfn x a`) took the file away from `a/key`'s
    deny, and the next command read it (as one planted where a denied path did not exist yet)."""
    root = _innermost(path, writable_roots)
    if root is None:
        return
    current = root
    for part in os.path.relpath(path, root).split("/")[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            # The denied path is not named: a bot reads this, and is not told the person's lists.
            raise Denied(f"a denied path goes through the symbolic link {current}, which a command can point "
                         "elsewhere: deny the real path (`warden sandbox remove`) and remove the link",
                         rule="sandbox.denied_through_link")
        if not os.path.isdir(current):
            return


def _first_missing(path: str, writable_roots: Iterable[str]) -> str:
    """The first name on the way from the innermost writable root holding `path` to it that does
    not exist (`path` itself outside every writable root: nothing there is made by a command)."""
    current = _innermost(path, writable_roots)
    if current is None:
        return path
    for part in os.path.relpath(path, current).split("/"):
        current = os.path.join(current, part)
        if not os.path.lexists(current):
            return current
    return path


def _pins_between(path: str, writable_roots: Iterable[str]) -> list[str]:
    """The real folders strictly between the innermost writable root holding `path` and it."""
    root = _innermost(path, writable_roots)
    if root is None:
        return []
    pins: list[str] = []
    current = root
    for part in os.path.relpath(path, root).split("/")[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current) or not os.path.isdir(current):
            break
        pins.append(current)
    return pins


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """The caller's --env pairs, checked: names are shell-style, values have no NUL, and no
    name makes a shell run code at start-up (Denied; core/shell_env)."""
    checked: dict[str, str] = {}
    for key, value in env.items():
        if not key or key[0].isdigit() or not set(key) <= _ENV_NAME_OK:
            raise InvalidInput(f"bad environment name {key!r}: use letters, digits and _")
        if "\0" in value:
            raise InvalidInput(f"bad value for {key}: it contains a NUL byte")
        checked[key] = value
    refuse_shell_startup_env(checked)
    return checked


def build_spec(workspace: str, command: Sequence[str], *, caller_env: Mapping[str, str],
               env: Mapping[str, str], ro_paths: Iterable[str] = (),
               extra_binds: Iterable[Bind] = (), ro_zones: Iterable[str] = (), keep_zones: Iterable[str] = (),
               denied: Iterable[str] = (), protected: Iterable[str] = (), network: bool = False,
               tmp_size: int | None = None, bind_fds: Iterable[tuple[str, int]] = (),
               cwd: str | None = None) -> SandboxSpec:
    """Gather the host facts for one run into a SandboxSpec (fds are added by the runner);
    `cwd`: the command's working folder, judged by the caller (None: the workspace)."""
    ws = os.path.realpath(workspace)
    if not os.path.isdir(ws):
        raise InvalidInput(f"workspace folder {workspace} is missing; `warden health` can repair it")
    system_ro, system_links = system_layout()
    etc, etc_links = etc_layout()
    proc_ro, proc_files, proc_dirs = proc_layout()
    base_env = {"PATH": sandbox_path(ws), "HOME": ws,
                "LANG": caller_env.get("LANG") or "C.UTF-8",
                "TERM": caller_env.get("TERM") or "dumb"}
    if caller_env.get("TZ"):
        base_env["TZ"] = caller_env["TZ"]
    full_env = {**base_env, **check_env(env)}
    protected_paths, pinned = _protected(ws, protected)
    # Interpreter prefixes and env layers come only from the caller (the registry row Warden
    # wrote), never from the workspace's own pyvenv.cfg: a bot can edit that file and would
    # point `home` at any host folder to have it mounted.
    mounted_ro = list(dict.fromkeys(ro_paths))
    # Inside the workspace only a read-only entry changes anything (the workspace is rw).
    opened = dict(bind_fds)  # sources the caller opened by descriptor and judged (mountsrc)
    binds = [b for b in extra_binds
             if (b.path in opened or os.path.exists(b.path)) and (b.mode == "ro" or not _under(b.path, ws))]
    roots = [*system_ro, ws, *mounted_ro, *(b.path for b in binds)]
    masked_dirs: list[str] = []
    masked_files: list[str] = []
    unmasked: list[str] = []
    writable = [ws, *(b.path for b in binds if b.mode == "rw")]
    for path in denied:
        # Denied paths outside every mounted tree are simply absent; inside one, hide them.
        if not any(_under(path, root) for root in roots):
            continue
        _refuse_link_above(path, writable)
        if not os.path.lexists(path):
            # Nothing to mount over: the first name on the way to it that does not exist is
            # watched instead (a live sandbox in which it appears is stopped), and the folders
            # above are pinned, so a command that made `later/` cannot move it away with the file
            # the person then wrote in it before the look (the denied path itself gone: "intact").
            unmasked.append(_first_missing(path, writable))
            pinned += _pins_between(path, writable)
            continue
        if os.path.islink(path):
            continue  # the link itself reveals nothing; its target is judged on its own
        (masked_dirs if os.path.isdir(path) else masked_files).append(path)
        # A mask covers a name. In a tree the command can write, the folders between the tree's
        # root and the denied path are pinned (bound onto themselves, so a mount point that
        # cannot be renamed): else `mv a b` takes the denied file along to where no mask is.
        pinned += _pins_between(path, writable)
    kept = [z for z in dict.fromkeys(keep_zones) if _under(z, ws) and z != ws]
    if kept:
        from warden.adapters.sandbox.landlock import LAUNCHER_PATH, abi, needed_abi

        python = python3_path()
        if abi() >= needed_abi and python is not None:
            # Variables the dynamic loader reads (LD_PRELOAD, LD_LIBRARY_PATH, …) would load the
            # caller's code into the launcher before its rules hold (a preloaded `syscall` that
            # skips landlock_restrict_self). The launcher starts without them and sets them only
            # for the command it execs, after the rules are in force.
            loader = [(k, v) for k, v in full_env.items() if is_loader_variable(k)]
            full_env = {k: v for k, v in full_env.items() if not is_loader_variable(k)}
            command = (python, "-I", "-S", LAUNCHER_PATH, *(x for k, v in loader for x in ("--setenv", k, v)),
                       *kept, "--", *command)
        else:  # cannot forbid only removal here: forbid every change instead
            ro_zones, kept = [*ro_zones, *kept], []
    for zone in kept:
        # Made now, as a read-only zone's is, refusing a link where it should be: else a command
        # could take the name first (a link it then may not remove blocks the zone for good).
        os.close(open_beneath(ws, zone, make_folders=True))
    zones = []
    for zone in dict.fromkeys(ro_zones):
        if not _under(zone, ws) or zone == ws:
            continue
        # A read-only zone is mounted read-only even before it has a folder (one the command
        # could make and fill in this very run), and the folders above it are pinned (a rename
        # of one would take the mount along and leave the zone's name free for a new folder).
        os.close(open_beneath(ws, zone, make_folders=True))
        zones.append(zone)
        pinned += _pins_between(zone, [ws, *(b.path for b in binds if b.mode == "rw")])
    return SandboxSpec(
        workspace=ws, command=tuple(command), env=full_env, cwd=cwd,
        system_ro=system_ro, system_links=system_links, etc=etc, etc_links=etc_links,
        ro_paths=tuple(p for p in mounted_ro if os.path.exists(p)),
        extra_binds=tuple(binds), protected=tuple(protected_paths), ro_zones=tuple(zones), keep_zones=tuple(kept),
        pinned=tuple(dict.fromkeys(pinned)), masked_dirs=tuple(masked_dirs), masked_files=tuple(masked_files),
        unmasked_denied=tuple(unmasked), network="proxy" if network else "none",
        proc_readonly=proc_ro, proc_masked_files=proc_files, proc_masked_dirs=proc_dirs,
        disable_userns=bwrap_has("--disable-userns"), tmp_size=tmp_size,
        bind_fds=tuple((path, fd) for path, fd in opened.items() if any(b.path == path for b in binds)))


# A folder's first entries only: a bot may fill its .venv/bin with a million names.
_NAMES_READ = 4096


def programs_on_path(workspace: str) -> set[str]:
    """The names a command in `workspace`'s sandbox could run by name: the entries of the folders
    on its PATH (core.bwrap_argv.sandbox_path), at most _NAMES_READ of each. The workspace's own
    (.venv/bin, node_modules/.bin) are the bot's, opened beneath the workspace with no link
    followed (a `.venv` linked to a host folder must not tell the bot what that folder holds)."""
    from warden.adapters.safefs import SafeRoot

    names: set[str] = set()
    root: SafeRoot | None = None
    try:
        for folder in sandbox_path(workspace).split(":"):
            try:
                if folder.startswith(workspace + "/"):
                    if root is None:
                        root = SafeRoot.open(workspace)
                    fd = root.open_dir(folder[len(workspace) + 1:])
                else:  # the host's own /usr/bin, /bin (a link on merged-/usr systems)
                    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except (OSError, WardenError):
                continue
            try:
                with os.scandir(fd) as entries:
                    names.update(entry.name for entry, _ in zip(entries, range(_NAMES_READ), strict=False))
            except OSError:
                pass
            finally:
                os.close(fd)
    finally:
        if root is not None:
            root.close()
    return names

