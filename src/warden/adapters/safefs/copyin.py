"""Files a host program wrote in a private scratch folder, copied into a workspace by descriptor.

Host `git` writes its working tree by path: between its check that `d` is a folder and its
`open("d/f")`, a bot's process can swap `d` for a link to anywhere, and git (as the person, or
root) writes there. So Warden never lets git write a bot-writable tree: git checks out into a
scratch folder only Warden can write (in the workspace's `.warden/`, read-only inside every
sandbox), and `copy_in` puts each entry in place the way a rollback does (safefs/trees.py): each
folder on the way opened with O_NOFOLLOW from the workspace's own descriptor, each file written
beside its target and renamed over it. A link planted on the way fails the open (ELOOP/ENOTDIR),
never leads outside; a folder swapped after it was opened is written into where it now is,
which is still inside the workspace.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from warden.adapters.safefs.trees import DIR_FLAGS, _put_file, _put_link, no_space, open_folder
from warden.core.errors import Conflict, InvalidInput, WardenError

__all__ = ["copy_in"]

_MAKE_DIR_MODE = 0o777  # as git makes folders: the umask decides


def _parts(path: str) -> list[str]:
    """A workspace-relative path as git prints it, split; anything that could climb refused, and
    anything of the repository (`.git`, at any depth) or of Warden (`.warden/`, where this very
    scratch lives, and the policy a sandbox reads) too: git writes neither in a working tree."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        raise InvalidInput(f"git named a path Warden does not write: {path!r}")
    if any(p.casefold() == ".git" for p in parts) or parts[0].casefold() == ".warden":
        raise InvalidInput(f"git named a path Warden does not write: {path!r}")
    return parts


class _Folders:
    """Folders beneath a held root, opened one component at a time with O_NOFOLLOW; the last one
    used stays open (git lists paths in order, so siblings follow one another)."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self._last: tuple[tuple[str, ...], int] | None = None

    def open(self, parts: list[str], *, create: bool) -> int | None:
        """The folder `parts` (a list of names); made when missing and `create`, else None (also
        when a link or a file stands on the way: the path is then not in the workspace at all)."""
        key = tuple(parts)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        current = os.dup(self.root_fd)
        try:
            for name in parts:
                try:
                    nxt = os.open(name, DIR_FLAGS, dir_fd=current)
                except OSError as exc:
                    if not create and exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        os.close(current)
                        return None  # no such folder in the workspace: nothing of it to remove
                    if exc.errno != errno.ENOENT:
                        raise
                    with contextlib.suppress(FileExistsError):  # made meanwhile: opened below, checked there
                        os.mkdir(name, _MAKE_DIR_MODE, dir_fd=current)
                    nxt = os.open(name, DIR_FLAGS, dir_fd=current)
                os.close(current)
                current = nxt
        except BaseException:
            os.close(current)
            raise
        self.forget()
        self._last = (key, current)
        return current

    def forget(self) -> None:
        if self._last is not None:
            os.close(self._last[1])
            self._last = None


def copy_in(scratch: str, folder: str, paths: Iterable[str]) -> None:
    """Make each of `paths` beneath workspace folder `folder` what it is beneath `scratch`: a file
    or link copied in (its mode kept, never setuid), a folder made; a path `scratch` lacks is
    removed from `folder`, unless it is a folder there (git never removes one that way: it may
    hold a repository of its own), and the folders that leaves empty go too, as git's own
    checkout does. Removals come first, so a path may change shape: a file where a folder was
    (once emptied), a folder where a file or a link was (the entry at the path itself is
    replaced, never followed). Missing folders on the way are made; a link or a file where a
    folder on the way should be refuses the copy (Conflict): a bot's process changed the tree
    meanwhile."""
    wanted = [(path, _parts(path)) for path in paths]
    root_fd = open_folder(folder)
    folders = _Folders(root_fd)
    source_fd = open_folder(scratch)
    # The scratch is walked by descriptor too: git checks out the commit's links there, and a
    # path beneath one (`x/id` where the commit made `x` a link to ~/.ssh) names the person's
    # own file, never git's entry; such a path is one the commit lacks.
    sources_at = _Folders(source_fd)
    path = ""
    try:
        written: list[tuple[str, list[str]]] = []
        emptied: set[tuple[str, ...]] = set()
        for path, parts in wanted:
            if _source(sources_at, parts) is not None:
                written.append((path, parts))
                continue
            parent = folders.open(parts[:-1], create=False)
            if parent is not None and _remove_entry(parent, parts[-1]):
                emptied.update(tuple(parts[:end]) for end in range(1, len(parts)))
        folders.forget()  # a folder held open may be one removed below
        for chain in sorted(emptied, key=len, reverse=True):
            _remove_if_empty(folders, list(chain))
        for path, parts in written:  # noqa: B007 (`path` names the entry in the error below)
            *parents, leaf = parts
            found = _source(sources_at, parts)
            if found is None:
                continue  # git's scratch does not change meanwhile: only Warden writes there
            held, st = found
            parent = folders.open(parents, create=True)
            assert parent is not None
            if stat.S_ISLNK(st.st_mode):
                _replacing_empty_folder(parent, leaf, functools.partial(_put_link, os.readlink(leaf, dir_fd=held)))
            elif stat.S_ISREG(st.st_mode):
                # /proc/self/fd/N/leaf: the held scratch folder, then `leaf` opened O_NOFOLLOW.
                _replacing_empty_folder(parent, leaf, functools.partial(
                    _put_file, Path(f"/proc/self/fd/{held}", leaf), stat.S_IMODE(st.st_mode)))
            elif stat.S_ISDIR(st.st_mode):  # a folder git wrote beneath, or a submodule's place
                _remove_entry(parent, leaf)  # a file or link there (git's own, in `paths`) gives way
                folders.open(parts, create=True)
    except OSError as exc:
        raise _copy_error(exc, folder, path) from None
    finally:
        folders.forget()
        sources_at.forget()
        os.close(root_fd)
        os.close(source_fd)


def _source(sources_at: _Folders, parts: list[str]) -> tuple[int, os.stat_result] | None:
    """The scratch folder holding `parts` (held by `sources_at`) and its entry's status; None
    when the scratch lacks it, or a link or a file stands on the way there."""
    held = sources_at.open(parts[:-1], create=False)
    if held is None:
        return None
    try:
        return held, os.stat(parts[-1], dir_fd=held, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _replacing_empty_folder(parent: int, leaf: str, put: Callable[[int, str], None]) -> None:
    """`put(parent, leaf)`, an empty folder at `leaf` removed first (git's checkout removes one in
    the way of a file); a folder holding anything stays, and the copy stops (EISDIR)."""
    try:
        put(parent, leaf)
    except IsADirectoryError:
        os.rmdir(leaf, dir_fd=parent)  # ENOTEMPTY: something of someone's own is in there
        put(parent, leaf)


def _remove_if_empty(folders: _Folders, parts: list[str]) -> None:
    """Remove folder `parts` when it is (still) empty; a link, a file or a folder with anything in
    it stays (rmdir never follows a link and never removes a folder's contents)."""
    parent = folders.open(parts[:-1], create=False)
    if parent is not None:
        with contextlib.suppress(OSError):
            os.rmdir(parts[-1], dir_fd=parent)
    folders.forget()


def _remove_entry(parent: int, leaf: str) -> bool:
    """Unlink `leaf` unless it is a folder; whether it was there to remove."""
    try:
        st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(leaf, dir_fd=parent)
    return True


def _copy_error(exc: OSError, folder: str, path: str) -> WardenError:
    # ENOENT too: a folder on the way removed by a bot's process between Warden's open of it and
    # its write there (met as exit 1 "workspace folder ...: No such file or directory" when the
    # link-race test's racer removed one as discard copied in).
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
        return Conflict(f"the workspace changed while Warden wrote {path!r} into it (a link, a file or a "
                        "folder where git's entry goes: a bot's process may be changing it); nothing was "
                        "written through it. Stop that process and try again", rule="git.worktree")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Conflict(f"Warden may not write {path!r} in workspace folder {folder}: a folder on the way "
                        "forbids it (chmod); give it back its write permission and try again", rule="git.worktree")
    return no_space(exc, f"workspace folder {folder}")
