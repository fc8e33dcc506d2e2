"""A folder of built layers that several Warden homes of this machine share (`envs.layer_cache`).

A home that needs a layer the cache holds copies it instead of building it: a Python layer of
the bundled `minimal` template costs ~1.3 s of CPU to build (a venv, pip installed and its
bytecode compiled, in the sandbox) and ~0.1 s to copy; a data-science template's, a minute
against a second or two. A home that builds a layer puts a copy in the cache.

Why a copy and never a link: each home's layer has its own inodes (an edit by root in one home,
or its removal, touches no other), as a built one has. Why the checks: what is copied becomes a
bot's environment. The cache is used only when it is a real folder of this user (or root) that
no group or other user may write, and each entry is taken only if its files hash to the digest
its layer.json recorded when it was built (a half-copied or changed entry is ignored, and the
layer is built). Entries are written beside their final name and renamed, so a reader never
sees half of one; two homes publishing the same layer at once keep whichever lands first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from warden.adapters.envs.layer_store import LayerStore, make_read_only, make_writable, tree_digest
from warden.adapters.owned import ancestor_problem, others_may_write

__all__ = ["LayerCache"]


class LayerCache:
    """The shared folder; every operation is a no-op when it is missing or not safe to use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def usable(self) -> bool:
        return self.unusable() is None

    def unusable(self) -> tuple[str, str] | None:
        """Why the folder is not used, and the fix; None when it is: a real folder (not a link) of
        this user or root, closed to writes by others, on a path no other user can change."""
        try:
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return "it does not exist", f"mkdir -m 700 {self.folder}"
        except OSError as exc:
            return f"it is not a folder Warden can open ({exc.strerror})", "give a real folder, not a link"
        try:
            st = os.fstat(fd)
            open_to_others = others_may_write(st, fd)
        finally:
            os.close(fd)
        if st.st_uid not in (os.geteuid(), 0):
            return f"it belongs to uid {st.st_uid}, not to you or root", "give a folder of your own"
        if open_to_others:
            return "a group or other users may write it", f"chmod go-w {self.folder}"
        return ancestor_problem(self.folder)

    def copy_into(self, store: LayerStore, layer_id: str, sources: Mapping[str, Any]) -> dict[str, Any] | None:
        """Layer `layer_id` copied from the cache into `store` and sealed there; None when the cache
        has no whole, unchanged copy of it built from the same `sources` (index, find-links, npm
        registry: a layer id does not name them), and the caller builds it."""
        if not self.usable():
            return None
        source = LayerStore(self.folder)
        info = source.read(layer_id)
        recorded = info.get("tree_sha256") if info else None
        if info is None or not isinstance(recorded, str) or info.get("sources") != dict(sources):
            return None
        with store.staging(layer_id) as build:
            try:
                _copy_tree(source.path(layer_id), build)
                if tree_digest(build) != recorded:  # layer.json itself is not hashed; commit writes it again
                    return None
            except OSError:  # a full disk, an entry removed meanwhile: built instead
                return None
            kept = {k: v for k, v in info.items() if k not in ("tree_sha256", "copied_from")}
            return store.commit(build, layer_id, {**kept, "copied_from": str(self.folder)})

    def publish(self, store: LayerStore, layer_id: str) -> None:
        """Put a copy of `store`'s layer in the cache (best effort: a full disk or a cache in use
        by another home only costs the next home a build)."""
        with contextlib.suppress(OSError):
            self.folder.mkdir(mode=0o700)  # the first home to build makes it (its parent must exist)
        cache = LayerStore(self.folder)
        if not self.usable() or cache.exists(layer_id):
            return
        cache.sweep()  # what a home killed while publishing left
        staged = self.folder / f".publish-{layer_id}-{os.getpid()}-{secrets.token_hex(3)}"
        try:
            staged.mkdir(mode=0o755)
            _copy_tree(store.path(layer_id), staged)
            make_read_only(staged)
            os.rename(staged, self.folder / layer_id)
        except OSError:
            pass
        finally:
            if staged.exists():
                make_writable(staged)
                shutil.rmtree(staged, ignore_errors=True)


def _copy_tree(source: Path, target: Path) -> None:
    """Folders, regular files (copied: new inodes) and links (as links, never followed); anything
    else is left out, which the digest check then refuses."""
    for entry in os.scandir(source):
        st = entry.stat(follow_symlinks=False)
        dest = target / entry.name
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(entry.path), dest)
        elif stat.S_ISDIR(st.st_mode):
            dest.mkdir(mode=0o755)
            _copy_tree(Path(entry.path), dest)
            os.chmod(dest, stat.S_IMODE(st.st_mode) | 0o200)
        elif stat.S_ISREG(st.st_mode):
            shutil.copyfile(entry.path, dest, follow_symlinks=False)
            os.chmod(dest, stat.S_IMODE(st.st_mode) | 0o200)
