"""Whether another user of this machine could put a folder of theirs in place of one of ours.

Warden checks a folder it trusts (its home, a shared layer cache) and then uses it by name: a
user who may rename an entry on the way could swap it in between. Such a user is the owner of
an entry met while the path is followed (a folder above it, or a link: in a sticky folder a
link's owner may replace it), or anyone when a folder on the way is writable by a group or
others and not sticky (as /tmp is: there only an entry's owner may rename it). A group that is
the user's own private one (Debian's and Ubuntu's user private groups: named as the user, the
user's primary group, no other member, no other user's primary group) is the user alone: a
folder made under umask 002 is writable by it, and no other user.

`home_problem` is the rule for Warden's home (home_state.check_owned words its refusals); the
native client (interfaces/cli/client.c, `trusted_home`) keeps the same list in C: change them
together.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["HomeProblem", "ancestor_problem", "home_problem", "others_may_write"]


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
    return not _private_group(st.st_gid, os.geteuid()) or _has_access_list(where)


def _has_access_list(where: str | int | os.PathLike[str]) -> bool:
    try:
        if isinstance(where, int):
            os.getxattr(where, "system.posix_acl_access")
        else:
            os.getxattr(where, "system.posix_acl_access", follow_symlinks=False)
    except OSError as exc:
        return exc.errno not in (errno.ENODATA, errno.ENOTSUP)  # none, or none possible there
    return True


# The answers so far, per (gid, uid): a process asks about the same few folders' groups. (A
# dict, not functools.lru_cache: this module is imported on the Python client's fast path, where
# every millisecond of imports is a run's.)
_PRIVATE: dict[tuple[int, int], bool] = {}


def _private_group(gid: int, uid: int) -> bool:
    found = _PRIVATE.get((gid, uid))
    if found is None:
        found = _PRIVATE[gid, uid] = _is_private_group(gid, uid)
    return found


def _is_private_group(gid: int, uid: int) -> bool:
    import grp
    import pwd

    try:
        me = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    if gid != me.pw_gid or group.gr_name != me.pw_name or not set(group.gr_mem) <= {me.pw_name}:
        return False
    # Another account made with `useradd -g alice` writes with alice's group all the same.
    return not any(other.pw_gid == gid and other.pw_uid != uid for other in pwd.getpwall())


# As the kernel's limit on links followed in one lookup (ELOOP, path_resolution(7)).
_MAX_LINKS = 40


def _met(folder: Path) -> list[Path]:
    """Every entry looked up while `folder` is followed as the kernel does, in order: each folder
    on the way and each link, then the folders its target names (from the link's own folder when
    the target is relative). The links' owners matter, not only the folders they lead to: one
    that leads to a folder of ours may be swapped by its owner. Entries not made yet are named."""
    met: list[Path] = []
    current = Path("/")
    pending = list(folder.absolute().parts[1:])
    links = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = current.parent  # `current` is always a real path: its parent is what .. is
            continue
        entry = current / part
        met.append(entry)
        try:
            is_link = stat.S_ISLNK(os.lstat(entry).st_mode)
        except OSError:
            is_link = False  # not made yet, or unreadable: ancestor_problem says which
        if not is_link:
            current = entry
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(40, os.strerror(40), str(folder))  # ELOOP, as open() would fail
        target = Path(os.readlink(entry))
        if target.is_absolute():
            current = Path("/")
        pending[:0] = target.parts[1:] if target.is_absolute() else target.parts
    return met


def ancestor_problem(folder: Path) -> tuple[str, str] | None:
    """Why an entry on the way to `folder` (a folder above it, or a link to it or above it) lets
    another user swap it, and the fix; None when none does. An entry not made yet is skipped."""
    fix = "give a folder on a path of yours or root's"
    try:
        met = _met(folder)
    except OSError as exc:
        return f"{folder} cannot be followed ({exc.strerror})", fix
    real = Path(os.path.realpath(folder))
    for entry in dict.fromkeys(met):
        if entry == real:
            continue  # the folder itself: its caller looks at its owner and mode
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            continue  # made later, by this user
        except OSError as exc:
            return f"{entry} cannot be checked ({exc.strerror})", fix
        named = f"{entry} (a link on the way to it)" if stat.S_ISLNK(st.st_mode) else f"{entry} above it"
        if st.st_uid not in (os.geteuid(), 0):
            return f"{named} belongs to uid {st.st_uid}, who could put a folder of theirs in its place", fix
        if stat.S_ISDIR(st.st_mode) and others_may_write(st, entry) and not st.st_mode & stat.S_ISVTX:
            # A folder of root's that a team's group may write (/srv/projects, 2775): the user may
            # not chmod it, and it is open on purpose; only the owner's own folder is theirs to close.
            mend = (f"chmod go-w {entry}" if st.st_uid == os.geteuid() else
                    f"give a folder outside {entry}, on a path only you and root may change")
            return (f"{entry} above it may be written by a group or other users, who could put a folder of "
                    "theirs in its place", mend)
    return None


class HomeProblem:
    """Why a home is not the user's alone. `rule`: "path" (a folder or link on the way to it,
    `why` and `fix` from ancestor_problem), "folder" (not one), "owner" (another user's) or
    "writable" (by others); `st`: the folder's stat for the last three. (A plain class: a
    dataclass would import `inspect`, ~20 ms of the Python client's every run.)"""

    __slots__ = ("fix", "rule", "st", "why")

    def __init__(self, rule: str, why: str = "", fix: str = "", st: os.stat_result | None = None) -> None:
        self.rule, self.why, self.fix, self.st = rule, why, fix, st


def home_problem(root: Path) -> HomeProblem | None:
    """What makes the home `root` one another user could change or swap; None when nothing does
    (nor when it is not made yet). check_owned words it; the daemon and its clients serve only a
    home it passes, used through a link to it (client.c's trusted_home: the same rules, in C)."""
    problem = ancestor_problem(root)
    if problem is not None:
        return HomeProblem("path", *problem)
    try:
        st = os.stat(root)  # through a link to the home: the folder it names is what must be ours
    except FileNotFoundError:
        return None  # to be made by this user, mode 0700 (and looked at again then)
    if not stat.S_ISDIR(st.st_mode):
        return HomeProblem("folder", st=st)
    if st.st_uid != os.geteuid():
        return HomeProblem("owner", st=st)
    if others_may_write(st, os.path.realpath(root)):
        return HomeProblem("writable", st=st)
    return None
