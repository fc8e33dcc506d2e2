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
from pathlib import Path

from warden.adapters.atomic import write_atomic

__all__ = ["HELD", "intact", "intact_in", "mount_points", "record"]

HELD = "mounts.json"  # in the sandbox's folder of Warden's run directory (the host's alone)
_MOUNTINFO_READ = 1 << 20  # a sandbox has a few dozen mounts
_HELD_READ = 1 << 20


def mount_points(pid: object) -> list[str] | None:
    """The mount points of `pid`'s mount namespace (as /proc prints them, escapes kept), or None
    when it cannot be read (the process is gone)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as info:
            text = info.read(_MOUNTINFO_READ)
    except OSError:
        return None
    points = []
    for line in text.splitlines():
        fields = line.split(b" ", 5)
        if len(fields) > 4:
            points.append(fields[4].decode("latin-1"))
    return points


def intact(pid: object, mounts: object, unmasked: object) -> bool:
    """Whether `pid`'s namespace still holds every one of `mounts` and no path of `unmasked`
    exists (False when either was not recorded: never compared, so not to be trusted)."""
    if not isinstance(mounts, list) or not isinstance(unmasked, list):
        return False
    now = mount_points(pid)
    if now is None or not set(mounts) <= set(now):
        return False
    return not any(isinstance(p, str) and os.path.lexists(p) for p in unmasked)


def record(folder: Path, pid: int, mounts: list[str], unmasked: list[str]) -> None:
    write_atomic(folder / HELD, json.dumps({"pid": pid, "mounts": mounts, "unmasked": unmasked}).encode(),
                 mode=0o600)


def intact_in(folder: Path) -> bool:
    """`intact` for the sandbox whose folder this is, from what `record` wrote there (True when
    nothing was: a sandbox started by an older Warden, or one starting; its sweep decides)."""
    try:
        with open(folder / HELD, "rb") as held:
            found = json.loads(held.read(_HELD_READ))
    except (OSError, ValueError):
        return True
    if not isinstance(found, dict):
        return True
    return intact(found.get("pid"), found.get("mounts"), found.get("unmasked"))
