"""Whether the kernel could hold a workspace's disk quota: project quotas (prjquota).

Detection only: Warden does not set project ids or limits itself yet, so adapters/quota.py's
watcher holds the quota either way; `warden doctor` reports what this finds.
"""

from __future__ import annotations

import os
import struct

from warden.core.paths import is_inside

__all__ = ["probe_project_id", "project_quota"]

_FS_IOC_FSGETXATTR = 0x801C581F  # _IOR('X', 31, struct fsxattr), 28 bytes
_FS_IOC_FSSETXATTR = 0x401C5820  # _IOW('X', 32, struct fsxattr)
_FS_XFLAG_PROJINHERIT = 0x200
_FSXATTR = struct.Struct("IIIII8x")  # xflags, extsize, nextents, projid, cowextsize
_PROJECT_OPTIONS = {"prjquota", "prjjquota", "pquota", "pqnoenforce"}


def _mount_of(path: str) -> tuple[str, str, str, set[str]]:
    """(mount point, type, source, options) of the filesystem holding `path` (mountinfo)."""
    found = ("/", "?", "?", set[str]())
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 6 or len(tail) < 2:
                continue
            point = fields[4].replace("\\040", " ")
            if is_inside(path, point) and len(point) >= len(found[0]):
                options = set(fields[5].split(",")) | set((tail[2] if len(tail) > 2 else "").split(","))
                found = (point, tail[0], tail[1], options)
    return found


def probe_project_id(folder: str) -> None:
    """Give a fresh folder inside `folder` a project id, as a project quota would (raises OSError)."""
    import fcntl
    import tempfile

    probe = tempfile.mkdtemp(prefix=".warden-prjquota-", dir=folder)
    try:
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            buf = bytearray(_FSXATTR.size)
            fcntl.ioctl(fd, _FS_IOC_FSGETXATTR, buf)
            xflags, extsize, nextents, _projid, cow = _FSXATTR.unpack(buf)
            fcntl.ioctl(fd, _FS_IOC_FSSETXATTR, bytearray(_FSXATTR.pack(
                xflags | _FS_XFLAG_PROJINHERIT, extsize, nextents, 0x5741, cow)))
        finally:
            os.close(fd)
    finally:
        os.rmdir(probe)


def project_quota(path: str) -> tuple[bool, str]:
    """Whether the kernel could enforce a project quota under `path`, and what was seen."""
    real = os.path.realpath(path)
    while not os.path.isdir(real) and real != "/":
        real = os.path.dirname(real)
    point, kind, source, options = _mount_of(real)
    where = f"{kind} {source} on {point}"
    if not options & _PROJECT_OPTIONS:
        return False, f"{where} is mounted without prjquota"
    try:
        probe_project_id(real)
    except OSError as exc:
        return False, f"{where} has prjquota, but setting a project id failed ({exc.strerror})"
    return True, f"{where} is mounted with prjquota and project ids can be set"
