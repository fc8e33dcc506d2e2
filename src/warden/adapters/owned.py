"""Whether another user of this machine could put a folder of theirs in place of one of ours.

Warden checks a folder it trusts (its home, a shared layer cache) and then uses it by name: a
user who may rename an entry of a folder on the way could swap it in between. Such a user is
the owner of a folder above it, or anyone when that folder is writable by a group or others
and not sticky (as /tmp is: there only an entry's owner may rename it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["ancestor_problem"]


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
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return (f"{ancestor} above it may be written by a group or other users, who could put a folder of "
                    "theirs in its place", f"chmod go-w {ancestor}")
    return None
