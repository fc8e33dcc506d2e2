"""Whether another user of this machine could put a folder of theirs in place of one of ours.

Warden checks a folder it trusts (its home, a shared layer cache) and then uses it by name: a
user who may rename an entry of a folder on the way could swap it in between. Such a user is
the owner of a folder above it, or anyone when that folder is writable by a group or others
and not sticky (as /tmp is: there only an entry's owner may rename it). A group that is the
user's own private one (Debian's and Ubuntu's user private groups: named as the user, the
user's primary group, no other member) is the user alone: a folder made under umask 002 is
writable by it, and no other user.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from pathlib import Path

__all__ = ["ancestor_problem", "others_may_write"]


def others_may_write(st: os.stat_result, where: str | int | os.PathLike[str]) -> bool:
    """Whether a user other than this one may write the file `st` describes (root aside): its
    mode lets others, or a group that is not this user's private group. `where`: its path (not
    followed) or an open descriptor, to read its access list."""
    if st.st_mode & 0o002:
        return True
    if not st.st_mode & 0o020:
        return False
    # With an access list (setfacl), the group bits are its mask: what its named users and groups
    # may at most do. `user:bob:rwx` on a folder of the user's private group gives it g+w, and
    # Bob, not the group, may then write it.
    return not _private_group(st.st_gid) or _has_access_list(where)


def _has_access_list(where: str | int | os.PathLike[str]) -> bool:
    try:
        if isinstance(where, int):
            os.getxattr(where, "system.posix_acl_access")
        else:
            os.getxattr(where, "system.posix_acl_access", follow_symlinks=False)
    except OSError as exc:
        return exc.errno not in (errno.ENODATA, errno.ENOTSUP)  # none, or none possible there
    return True


@functools.lru_cache(maxsize=8)
def _private_group(gid: int) -> bool:
    import grp
    import pwd

    try:
        me = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def ancestor_problem(folder: Path) -> tuple[str, str] | None:
    """Why a folder above `folder` lets another user swap it, and the fix; None when none does.
    Both the path as given and its real path are looked at; a folder not made yet is skipped."""
    real = Path(os.path.realpath(folder))
    for ancestor in dict.fromkeys([*folder.parents, *real.parents]):
        try:
            st = os.lstat(ancestor)
        except FileNotFoundError:
            continue  # made later, by this user
        except OSError as exc:
            return f"{ancestor} cannot be checked ({exc.strerror})", "give a folder on a path of yours or root's"
        if st.st_uid not in (os.geteuid(), 0):
            return (f"{ancestor} above it belongs to uid {st.st_uid}, who could put a folder of theirs in its place",
                    "give a folder on a path of yours or root's")
        if stat.S_ISDIR(st.st_mode) and others_may_write(st, ancestor) and not st.st_mode & stat.S_ISVTX:
            # A folder of root's that a team's group may write (/srv/projects, 2775): the user may
            # not chmod it, and it is open on purpose; only the owner's own folder is theirs to close.
            fix = (f"chmod go-w {ancestor}" if st.st_uid == os.geteuid() else
                   f"give a folder outside {ancestor}, on a path only you and root may change")
            return (f"{ancestor} above it may be written by a group or other users, who could put a folder of "
                    "theirs in its place", fix)
    return None
