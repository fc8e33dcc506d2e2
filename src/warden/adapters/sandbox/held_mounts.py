"""What a live sandbox mounts over names of the host's folders, and whether it still does.

A mount over a name in a folder the sandbox shares with the host (a denied file's mask, a
read-only zone, a protected file, a pin) holds only while that name does: renamed over or removed
on the host (an editor's save, `git checkout`), the kernel takes the mount away in every other
namespace, and the sandbox then sees the new file unmasked, or writable. A denied path that did
not exist had nothing to mount over: made later, it is seen too. Neither can be prevented from
here, so a live sandbox is compared at each use (services/live.py `_problem`) and, for its
background processes, every second by whoever looks after it (`warden serve`, the CLI's daemon):
one whose mounts were undone is stopped and the next command gets a new one.

Kept small (no registry, no runner): the CLI's daemon reads it from the sandbox's folder.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.processes import alive, start_time

__all__ = ["HELD", "held", "intact", "intact_in", "record"]

HELD = "mounts.json"  # in the sandbox's folder of Warden's run directory (the host's alone)
_READ_MAX = 1 << 20  # a sandbox has a few dozen mounts: its mountinfo and record are far smaller


# The sandbox's own mounts (bwrap's root, /proc, /dev, /tmp): what is mounted on them holds, the
# host has no name there. (A workspace under the host's /tmp is a mount of its own on top.)
_SANDBOX_OWN = frozenset({b"/", b"/proc", b"/dev", b"/tmp"})


def _unescaped(point: bytes) -> bytes:
    """A mount point as /proc prints it (space, tab, newline and backslash as octal escapes)."""
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8) & 0xFF]), point)


def held(pid: object) -> list[list[object]] | None:
    """The mounts of `pid`'s namespace made over a name inside another mount of a host folder
    (a mask, a read-only zone or file, a pin inside the workspace or an allowed folder), each as
    [mount point, device, inode] as seen from inside; None when they cannot be read (it is gone).
    Mounts straight on the sandbox's own root hold whatever the host does to their names."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as info:
            text = info.read(_READ_MAX)
    except OSError:
        return None
    points: dict[bytes, bytes] = {}
    rows = []
    for line in text.splitlines():
        fields = line.split(b" ", 5)
        if len(fields) > 4:
            points[fields[0]] = _unescaped(fields[4])
            rows.append((fields[1], _unescaped(fields[4])))
    found: list[list[object]] = []
    for parent, point in rows:
        above = points.get(parent)
        if above is None or above in _SANDBOX_OWN:
            continue
        seen = _seen(pid, point)
        if seen is None:
            return None
        found.append([point.decode("latin-1"), *seen])
    return found


def _seen(pid: int, point: bytes) -> tuple[int, int] | None:
    """Which file `point` is inside `pid`'s namespace (its root's view): one stat."""
    try:
        st = os.lstat(b"/proc/%d/root%s" % (pid, point))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def intact(pid: object, mounts: object, unmasked: object) -> bool:
    """Whether each of `mounts` (as `held` gave them) is still what `pid` sees at its name and no
    path of `unmasked` exists (False when either was not recorded: never compared, so not to be
    trusted). A few stats, no parse: it is asked at every command."""
    if not isinstance(mounts, list) or not isinstance(unmasked, list) or not isinstance(pid, int):
        return False
    for item in mounts:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            return False
        if _seen(pid, item[0].encode("latin-1")) != (item[1], item[2]):
            return False
    return not any(isinstance(p, str) and os.path.lexists(p) for p in unmasked)


def record(folder: Path, pid: int, mounts: list[list[object]], unmasked: list[str]) -> None:
    write_atomic(folder / HELD, json.dumps({"pid": pid, "start": start_time(pid), "mounts": mounts,
                                            "unmasked": unmasked}).encode(), mode=0o600)


def intact_in(folder: Path) -> bool:
    """`intact` for the sandbox whose folder this is, from what `record` wrote there (True when
    nothing was: a sandbox started by an older Warden, or one starting; its sweep decides)."""
    try:
        with open(folder / HELD, "rb") as recorded:
            found = json.loads(recorded.read(_READ_MAX))
    except (OSError, ValueError):
        return True
    if not isinstance(found, dict):
        return True
    pid, start = found.get("pid"), found.get("start")
    if not isinstance(pid, int) or not isinstance(start, int) or not alive(pid, start):
        return True  # ended (a folder a killed Warden left): nothing of it to see; its sweep decides
    return intact(pid, found.get("mounts"), found.get("unmasked"))
