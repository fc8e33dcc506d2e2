"""The `Leftovers` port (core/ports): what a killed Warden left in its home and workspaces root."""

from __future__ import annotations

import os
import re
from pathlib import Path

from warden.adapters.workspace_io import TRASH, remove_in_background

__all__ = ["HostLeftovers"]

# `pack_tree` writes `.NAME.PID.tmp` beside the archive and renames it when whole.
_ARCHIVE_TMP = re.compile(r"\..+\.(\d+)\.tmp")


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

    def remove(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def remove_in_background(self, path: str) -> None:
        remove_in_background(Path(path))
