"""The `Leftovers` port (core/ports): what a killed Warden left in its home and workspaces root."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from warden.adapters.git import SCRATCH_PREFIXES, STATE_DIR
from warden.adapters.safefs.temps import remove_temp, signed_temps
from warden.adapters.workspace_io import TRASH, remove_in_background

__all__ = ["HostLeftovers"]

# `pack_tree` writes `.NAME.PID.tmp` beside the archive and renames it when whole; a key file or
# a new config.toml is written as `.NAME.PID.TAG.tmp` (keystore.write_private_tmp: TAG `new` or
# 8 hex digits), then linked into place. The name is the shortest that leaves a whole PID (at
# most 7 digits) and TAG, so a name's own `.digits` part is never taken for the PID.
_ARCHIVE_TMP = re.compile(r"\..+?\.(\d{1,7})(?:\.(?:new|[0-9a-f]{8}))?\.tmp")
# adapters/git.py names its scratch PREFIX + PID + "-" + random (an index also has its `.lock`).
_GIT_SCRATCH = re.compile("(?:" + "|".join(map(re.escape, SCRATCH_PREFIXES)) + r")(\d+)-[A-Za-z0-9_]+(?:\.lock)?")


class HostLeftovers:
    def temp_archives(self, folder: str) -> list[tuple[str, int]]:
        archives = Path(folder)
        if not archives.is_dir():
            return []
        return [(str(entry), int(match[1])) for entry in archives.iterdir()
                if (match := _ARCHIVE_TMP.fullmatch(entry.name))]

    def trashed(self, root: str) -> list[str]:
        trash = Path(root) / TRASH
        return sorted(str(p) for p in trash.iterdir()) if trash.is_dir() else []

    def folders(self, root: str) -> list[str]:
        folder = Path(root)
        if not folder.is_dir():
            return []
        return [name for name in os.listdir(folder) if not name.startswith(".") and (folder / name).is_dir()]

    def git_scratch(self, workspace: str) -> list[tuple[str, int]]:
        state = os.path.join(workspace, STATE_DIR)
        try:
            if not stat.S_ISDIR(os.lstat(state).st_mode):
                return []  # a link or a file: nothing Warden made, nothing to remove through it
            names = os.listdir(state)
        except OSError:
            return []
        return sorted((os.path.join(state, name), int(match[1])) for name in names
                      if (match := _GIT_SCRATCH.fullmatch(name)))

    def workspace_temps(self, workspace: str) -> list[tuple[str, int, int]]:
        fd = _open_folder(workspace)
        if fd is None:
            return []
        try:
            return sorted(signed_temps(fd))
        finally:
            os.close(fd)

    def remove_workspace_temp(self, workspace: str, path: str) -> None:
        fd = _open_folder(workspace)
        if fd is not None:
            try:
                remove_temp(fd, path)
            finally:
                os.close(fd)

    def remove_scratch(self, path: str) -> None:
        try:
            is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
        except FileNotFoundError:
            return
        if is_dir:
            shutil.rmtree(path, ignore_errors=True)  # never follows a link inside (rmtree's own rule)
        else:
            Path(path).unlink(missing_ok=True)

    def remove_in_background(self, path: str) -> None:
        remove_in_background(Path(path))


def _open_folder(path: str) -> int | None:
    """The workspace folder itself, never a link in its place (None: gone, or not a folder)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
