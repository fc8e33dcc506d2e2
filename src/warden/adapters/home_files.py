"""The `ConfigFile` and `HomeFiles` ports (core/ports): config.toml and the folders of $WARDEN_HOME."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from warden.adapters.config_file import read_config, set_config_value
from warden.adapters.home_state import mark
from warden.adapters.keystore import write_private_tmp

__all__ = ["HostConfigFile", "HostHomeFiles"]


class HostConfigFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, object]:
        return read_config(self.path)

    def set_value(self, key: str, value: object) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        set_config_value(self.path, key, value)


class HostHomeFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def make_folder(self, path: str, mode: int) -> bool:
        # Made, or found made (by another `warden init` at the same moment: asked first, the
        # two raced from the check to the mkdir, and the loser said "internal error").
        try:
            Path(path).mkdir(parents=True, mode=mode)
        except FileExistsError:
            return False
        return True

    def create_config(self, path: str, text: str) -> bool:
        # Whole or not there, as a key file is made: written aside, then linked into place
        # unless a file is there already (another `init` at the same moment may be the one that
        # made it; a reader never sees it half written).
        tmp = write_private_tmp(Path(path), text.encode("utf-8"), "new")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def mark(self, clock: Callable[[], datetime]) -> bool:
        return mark(self.root, clock)
