"""The `ConfigFile` and `HomeFiles` ports (core/ports): config.toml and the folders of $WARDEN_HOME."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from warden.adapters.config_file import read_config, set_config_value
from warden.adapters.home_state import mark

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
        folder = Path(path)
        if folder.exists():
            return False
        folder.mkdir(parents=True, mode=mode)
        return True

    def create_config(self, path: str, text: str) -> bool:
        if os.path.exists(path):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return True

    def mark(self, clock: Callable[[], datetime]) -> bool:
        return mark(self.root, clock)
