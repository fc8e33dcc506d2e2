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
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from warden.adapters.safefs.trees import DIR_FLAGS, _put_file, _put_link, no_space, open_folder
from warden.core.errors import Conflict, InvalidInput, WardenError

__all__ = ["copy_in"]

_MAKE_DIR_MODE = 0o777  # as git makes folders: the umask decides


def _parts(path: str) -> list[str]:
    """A workspace-relative path as git prints it, split; anything that could climb refused."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or "\0" in path:
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
    hold a repository of its own). Missing folders on the way are made; a link or a file where a
    folder should be refuses the copy (Conflict): a bot's process changed the tree meanwhile."""
    root_fd = open_folder(folder)
    folders = _Folders(root_fd)
    path = ""
    try:
        for path in paths:
            *parents, leaf = _parts(path)
            source = os.path.join(scratch, path)
            try:
                st = os.lstat(source)
            except FileNotFoundError:
                parent = folders.open(parents, create=False)
                if parent is not None:
                    _remove_entry(parent, leaf)
                continue
            parent = folders.open(parents, create=True)
            assert parent is not None
            if stat.S_ISLNK(st.st_mode):
                _put_link(os.readlink(source), parent, leaf)
            elif stat.S_ISREG(st.st_mode):
                _put_file(Path(source), stat.S_IMODE(st.st_mode), parent, leaf)
            elif stat.S_ISDIR(st.st_mode):  # a submodule's place: an empty folder, as git makes it
                folders.open([*parents, leaf], create=True)
    except OSError as exc:
        raise _copy_error(exc, folder, path) from None
    finally:
        folders.forget()
        os.close(root_fd)


def _remove_entry(parent: int, leaf: str) -> None:
    try:
        st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leaf, dir_fd=parent)


def _copy_error(exc: OSError, folder: str, path: str) -> WardenError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
        return Conflict(f"the workspace changed while Warden wrote {path!r} into it (a link, a file or a "
                        "folder where git's entry goes: a bot's process may be changing it); nothing was "
                        "written through it. Stop that process and try again", rule="git.worktree")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Conflict(f"Warden may not write {path!r} in workspace folder {folder}: a folder on the way "
                        "forbids it (chmod); give it back its write permission and try again", rule="git.worktree")
    return no_space(exc, f"workspace folder {folder}")
