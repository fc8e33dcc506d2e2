"""What the checkpoint store keeps for the workspace at a folder, read without the store itself.

The quota asks this before every run and file write, so it lives apart from adapters/versions.py
(whose imports — the manifest model, the policy — a plain `warden run` need not pay for).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["folder_index", "kept_bytes", "read_text"]


def folder_index(root: Path, folder: str) -> Path:
    """The file naming the store of workspace folder `folder` (under the store root `root`)."""
    return root / ".folders" / hashlib.sha256(os.path.abspath(folder).encode()).hexdigest()[:40]


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None


def kept_bytes(root: Path, folder: str) -> int:
    """Bytes the store keeps for the workspace at `folder` as last counted (0 when it has none)."""
    name = read_text(folder_index(root, folder))
    if not name or "/" in name or name.startswith("."):
        return 0
    try:
        return int((root / name / "usage").read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return 0
