"""Host workspace I/O: what Warden itself writes into workspace folders and its archives folder.

Implements the `WorkspaceFolders`, `WorkspaceReads` and `ArchiveFiles` ports (core/ports)
over the "never follow links" modules (adapters/safefs), the thin venv and node_modules writers
(adapters/envs), the blob and archive code (adapters/archive) and atomic writes. Deleting a
folder is a rename into `.trash/` beside it (instant, never crossing filesystems) and an
`rm -rf` in the background.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from warden.adapters.atomic import write_atomic

if TYPE_CHECKING:
    from warden.core.layers import Layer

# The archive, env-layer and tree writers are imported by the methods that use them: every
# `warden run` builds this adapter, and tarfile, zstandard and the layer code would cost it
# ~8 ms of imports it never needs.

__all__ = ["TRASH", "HostArchives", "HostWorkspaceIO", "remove_in_background"]

TRASH = ".trash"


def remove_in_background(path: Path) -> None:
    """Delete `path` (already renamed out of the way) without waiting for it."""
    try:
        import subprocess  # here: `warden list` and the like never start a process

        proc = subprocess.Popen(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        import shutil  # only when rm cannot start: shutil pulls in bz2 and lzma

        shutil.rmtree(path, ignore_errors=True)
        return
    # Reap it in a long-lived process (the API server); a CLI just exits and init reaps it.
    threading.Thread(target=proc.wait, daemon=True).start()


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


class HostWorkspaceIO:
    """Workspace folders, bounded reads of their bot-written files, and the archives folder."""

    # -- WorkspaceFolders ------------------------------------------------------------------
    def kind(self, path: str) -> str | None:
        try:
            return _kind(os.lstat(path).st_mode)
        except OSError:
            return None

    def changed_at(self, path: str) -> float | None:
        try:
            return os.lstat(path).st_ctime
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def make_folder(self, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).mkdir(mode=0o755)

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        write_atomic(Path(path), data, mode=mode)

    def write_thin_venv(self, workspace: str, *, interpreter: str, version: str, layer_site: str | None,
                        scripts: Mapping[str, str]) -> None:
        from warden.adapters.envs.thin_venv import write_thin_venv

        write_thin_venv(Path(workspace), interpreter=interpreter, version=version, layer_site=layer_site,
                        scripts=scripts)

    def link_node_modules(self, workspace: str, layer: Layer) -> None:
        from warden.adapters.envs.node_layer import link_node_modules

        link_node_modules(Path(workspace), {"node_modules": layer.node_modules, "links": list(layer.packages),
                                            "bins": dict(layer.bins)})

    def write_new_files(self, workspace: str, files: Mapping[str, str | bytes]) -> None:
        from warden.adapters.safefs.fdtree import open_tree

        with open_tree(workspace) as tree:
            for name, content in files.items():
                tree.write(name, content, exclusive=True)

    def unpack_blob(self, blob: bytes, workspace: str, *, max_bytes: int, max_files: int,
                    disk_bytes: int | None, disk_files: int | None) -> dict[str, int]:
        from warden.adapters.archive import BlobLimits, unpack_blob

        limits = BlobLimits(max_bytes, max_files, disk_bytes=disk_bytes, disk_files=disk_files)
        return unpack_blob(blob, Path(workspace), limits)

    def trash(self, path: str, *, now: bool = False) -> None:
        folder = Path(path)
        if not folder.exists() and not folder.is_symlink():
            return
        # Beside the folder, not under this node's root: a rename never crosses filesystems, and
        # a workspace made under another root (another node's, a changed sandbox.root_dir) works.
        trash = folder.parent / TRASH
        trash.mkdir(mode=0o700, exist_ok=True)
        target = trash / f"{folder.name}-{os.urandom(4).hex()}"
        os.rename(folder, target)
        if now:
            import shutil  # here: shutil pulls in bz2 and lzma

            shutil.rmtree(target, ignore_errors=True)  # by descriptor: a link in it is removed, never followed
            return
        remove_in_background(target)

    # -- WorkspaceReads --------------------------------------------------------------------
    def read_small(self, root: str, rel: str, limit: int = 1 << 20, *, head: bool = False) -> bytes | None:
        from warden.adapters.safefs import read_small  # here: its ctypes only when a file is read

        return read_small(root, rel, limit, head=head)

    def read_heads(self, root: str, rels: Iterable[str], limit: int) -> Iterator[bytes | None]:
        from warden.adapters.safefs import read_heads

        return read_heads(root, rels, limit)

    def regular_dirs(self, root: str, rel: str, suffix: str) -> list[str]:
        from warden.adapters.safefs import regular_dirs

        return regular_dirs(root, rel, suffix)

    def links_in(self, root: str, rel: str) -> list[str]:
        from warden.adapters.safefs import links_in

        return links_in(root, rel)

    def layer_site(self, workspace: str) -> str | None:
        from warden.adapters.envs.thin_venv import read_layer_site

        return read_layer_site(Path(workspace))

    def disk_usage(self, workspace: str) -> int:
        from warden.adapters.safefs.trees import walk_tree  # here: its ctypes only when a tree is walked

        total = 0
        try:
            root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            # By descriptor, without recursion: os.walk recursed past Python's limit in a bot's
            # folders nested 1,500 deep (`warden health`: an internal error, RecursionError).
            for _rel, _folders, others, fd in walk_tree(root_fd):
                for name in others:
                    with contextlib.suppress(OSError):
                        total += os.lstat(name, dir_fd=fd).st_blocks * 512
        finally:
            os.close(root_fd)
        return total


class HostArchives:
    """The archives folder (Warden's own, mode 0700): packed workspaces and their records."""

    def pack(self, source: str, target: str, *, max_bytes: int | None, progress: bool = False) -> int:
        from warden.adapters.archive import pack_tree

        return pack_tree(Path(source), Path(target), max_bytes=max_bytes, progress=progress)

    def make_folder(self, path: str) -> None:
        Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)

    def names(self, folder: str) -> list[str]:
        try:
            return sorted(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        write_atomic(Path(path), data, mode=mode)

    def remove(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)
