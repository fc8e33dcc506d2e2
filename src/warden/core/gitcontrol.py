"""Git control files in a workspace: what makes a person's `git` run a program (pure).

When a person runs `git` anywhere in a workspace, git walks up from the current folder and, in
each folder, uses `.git` (a folder, a `gitdir:` file or a link) or, if the folder itself looks
like a repository (`HEAD` and `refs`; an "embedded bare repository"), the folder. Whatever
repository it lands in, git reads its `config` (core.fsmonitor, core.hooksPath, core.pager,
includes, commondir and worktree links) and runs the programs named there, on the host,
unsandboxed. So a bot that can leave such a structure anywhere in its workspace can run code
as the person. Warden's answer: git control structures belong to the person. Those present
between bot activity are the person's, bound read-only into every run; any that appear during
bot activity are moved aside (quarantined) before a person's `git` can see them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Literal, NamedTuple

__all__ = [
    "QUARANTINE_SUFFIX",
    "GitControl",
    "GitSweep",
    "adoptable",
    "is_git_name",
    "judge",
    "looks_like_git_dir",
    "touches_git_control",
]

QUARANTINE_SUFFIX = ".warden-quarantined"
Kind = Literal["dotgit", "gitdir"]


def is_git_name(name: str) -> bool:
    """`.git` in any letter case: case-insensitive filesystems (and git's own NTFS/HFS
    checks) treat `.GIT` as `.git`, so Warden does too."""
    return name.casefold() == ".git"


def looks_like_git_dir(names: Collection[str]) -> bool:
    """Whether a folder holding entries `names` could be taken by git for a repository.

    git's is_git_directory() needs a `HEAD` in the folder itself and `refs` and `objects`
    either there or in the folder a `commondir` file names (how linked worktrees share one
    repository). So a `HEAD` beside any of `refs`, `objects` or `commondir` is enough to count,
    on the safe side; without its HEAD no folder is a repository to git.
    """
    return "HEAD" in names and not {"refs", "objects", "commondir"}.isdisjoint(names)


def touches_git_control(path: str) -> bool:
    """Whether workspace path `path` (`/a/b`) is a `.git` or lies inside one."""
    return any(is_git_name(part) for part in path.split("/"))


class GitControl(NamedTuple):
    """One git control structure found in a workspace: where, what, and which inode."""

    path: str  # workspace-relative, without a leading slash
    kind: Kind  # "dotgit": an entry named .git; "gitdir": a folder that looks like a repository
    dev: int
    ino: int

    @property
    def identity(self) -> tuple[int, int]:
        return (self.dev, self.ino)


class GitSweep(NamedTuple):
    """What one sweep of a folder found: the person's `.git` paths (to protect) and what it moved aside."""

    protected: tuple[str, ...]
    quarantined: tuple[str, ...]


def judge(found: Iterable[GitControl], known: Collection[tuple[int, int]], *,
          bot_active: bool) -> tuple[list[GitControl], list[GitControl]]:
    """(the person's, to quarantine) among `found`, given the identities already known as the
    person's and whether bot activity could have made the new ones.

    Known structures are matched by inode, not by name: a bot can rename a folder holding the
    person's repository, never make a new entry with an old inode. New ones seen while no bot
    was active (no run in progress or crashed) were made by the person between runs.
    """
    keep: list[GitControl] = []
    quarantine: list[GitControl] = []
    for item in found:
        if item.identity in known or (not bot_active and adoptable(item)):
            keep.append(item)
        else:
            quarantine.append(item)
    return keep, quarantine


def adoptable(item: GitControl) -> bool:
    """Whether a new structure seen between bot activity may be the person's: a `.git` outside
    anything Warden moved aside. Never a repository look-alike (a person keeps bare repositories
    elsewhere; a bot leaves them to be adopted), nor anything inside a quarantined folder."""
    return item.kind == "dotgit" and QUARANTINE_SUFFIX not in item.path
