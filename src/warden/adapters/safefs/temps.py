"""Warden's temporary files in workspaces: named so a sweep can tell Warden's from a bot's.

An atomic write (root.py) or a rollback (trees.py) writes a new file beside its target and
renames it into place; a Warden killed in between leaves the new file in the workspace. Its
name says whose it is and whether it is dead:

    .LEAF.PID-START-NONCE-MAC.warden-tmp

PID and START (the kernel's start time of the writer, clock ticks since boot) name the one
process that wrote it: once that process is gone the file is a leftover. A bot can name a file
anything, so the name alone proves nothing; MAC is an HMAC of the rest of the name under a key
of the home (keys/temp-names.key, which no sandbox can read), so only a Warden process could
have made it. A bot can still copy a name it saw while Warden wrote it and
give that name to a file of its own after the write: the sweep then removes the bot's copy,
which the bot made to look like Warden's; it gains nothing (it may remove its own files
anyway). A process without the key (a key folder it cannot use) writes the old unsigned name,
`.LEAF.HEX.warden-tmp`, which no sweep removes.

The suffix `.warden-tmp` and the leading dot stay as before: checkpoints leave such files out
(core/checkpoints.is_temp).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator

from warden.adapters.processes import start_time
from warden.adapters.temp_key import key_source
from warden.core.errors import WardenError

__all__ = ["remove_temp", "sign_with", "signed_temps", "temp_name", "temp_owner"]

SUFFIX = ".warden-tmp"
_SIGNED = re.compile(r"\.(?P<leaf>.*)\.(?P<pid>\d{1,10})-(?P<start>\d{1,20})-(?P<nonce>[0-9a-f]{12})"
                     r"-(?P<mac>[0-9a-f]{32})" + re.escape(SUFFIX), re.DOTALL)
# How deep a sweep looks into a workspace for leftovers: each level holds a descriptor, and a bot
# can nest folders thousands deep. Deeper leftovers stay (named, harmless, left out of checkpoints).
MAX_DEPTH = 128

_key_source: Callable[[bool], bytes | None] | None = None
_key: bytes | None = None
_key_lock = threading.Lock()


def sign_with(source: Callable[[bool], bytes | None] | None) -> None:
    """Where this process's key for temporary names comes from: `source(make)` gives the key,
    made first when `make` (a write) and missing (a sweep only reads it). None: no key, names
    unsigned. bootstrap names the home's keys/temp-names.key through adapters/temp_key.py
    instead, which loads none of this; a source given here comes first."""
    global _key_source, _key
    with _key_lock:
        _key_source, _key = source, None


def _current_key(*, make: bool) -> bytes | None:
    global _key
    with _key_lock:
        source = _key_source or key_source()
        if _key is None and source is not None:
            try:
                _key = source(make)
            except (WardenError, OSError):  # no usable key folder: unsigned names, as before
                _key = None
        return _key


def _mac(key: bytes, leaf: str, pid: str, start: str, nonce: str) -> str:
    text = f"{leaf}\0{pid}\0{start}\0{nonce}".encode("utf-8", "surrogateescape")
    return hmac.new(key, text, hashlib.sha256).hexdigest()[:32]


def temp_name(leaf: str) -> str:
    """The name of a new temporary file for `leaf`, in `leaf`'s folder."""
    short = leaf[:64]
    nonce = os.urandom(6).hex()
    key = _current_key(make=True)
    pid = os.getpid()
    started = start_time(pid)
    if key is None or started is None:
        return f".{short}.{nonce}{SUFFIX}"
    return f".{short}.{pid}-{started}-{nonce}-{_mac(key, short, str(pid), str(started), nonce)}{SUFFIX}"


def temp_owner(name: str, key: bytes | None = None) -> tuple[int, int] | None:
    """The writer (pid, start time) of `name` when it is a temporary file a Warden process of
    this home made; None for any other name (a bot's, however it looks)."""
    if not name.endswith(SUFFIX):
        return None
    match = _SIGNED.fullmatch(name)
    key = key if key is not None else _current_key(make=False)
    if match is None or key is None:
        return None
    expected = _mac(key, match["leaf"], match["pid"], match["start"], match["nonce"])
    if not hmac.compare_digest(expected, match["mac"]):
        return None
    return int(match["pid"]), int(match["start"])


def signed_temps(workspace_fd: int) -> Iterator[tuple[str, int, int]]:
    """Warden's temporary files under the folder of descriptor `workspace_fd`: (relative path,
    writer's pid, its start time). Walked by descriptor, never through a link
    (O_NOFOLLOW on each folder), at most MAX_DEPTH folders deep. A bot's file never matches
    (temp_owner); a folder or a link with such a name is never a leftover either."""
    key = _current_key(make=False)
    if key is None:
        return  # no key yet: no Warden of this home ever signed a name
    yield from _walk(os.dup(workspace_fd), "", 0, key)


def _walk(fd: int, prefix: str, depth: int, key: bytes) -> Iterator[tuple[str, int, int]]:
    """`signed_temps` of the folder of `fd` (closed here), depth first. Only the folders on the
    way down are open, each with its listing read as it goes (two descriptors a level): opening
    every subfolder of a folder before going into any held one descriptor each, and a bot's folder
    of 30,000 empty folders took the server's last one (EMFILE) on each janitor pass."""
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    if (owner := temp_owner(entry.name, key)) is not None:
                        yield prefix + entry.name, *owner
                elif entry.is_dir(follow_symlinks=False) and depth + 1 < MAX_DEPTH:
                    try:
                        sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      dir_fd=fd)
                    except OSError:
                        continue  # gone, or swapped for a link since the listing
                    yield from _walk(sub, prefix + entry.name + "/", depth + 1, key)
    except OSError:
        return  # a folder that cannot be read (any more): nothing of it is swept
    finally:
        os.close(fd)


def remove_temp(workspace_fd: int, path: str) -> bool:
    """Remove temporary file `path` (of `signed_temps`) under the folder of `workspace_fd`: its
    folders opened one by one with O_NOFOLLOW, the file itself unlinked only if it is still a
    regular file with a name Warden signed. False when it is gone or no longer one."""
    *folders, leaf = path.split("/")
    if temp_owner(leaf) is None:
        return False
    fd = os.dup(workspace_fd)
    try:
        for folder in folders:
            sub = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = sub
        if not stat.S_ISREG(os.stat(leaf, dir_fd=fd, follow_symlinks=False).st_mode):
            return False
        # unlinkat removes the name, never what a link there would point to: a link or a folder
        # swapped in since the check is removed as a name (a link) or refused (EISDIR).
        os.unlink(leaf, dir_fd=fd)
        return True
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a folder on the way became a link
            return False
        raise
    finally:
        os.close(fd)
