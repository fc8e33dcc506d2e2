"""The `Unarchiver` port (core/ports): archived workspace folders brought back on this host."""

from __future__ import annotations

from pathlib import Path

from warden.adapters.archive import BlobLimits, unpack_tree
from warden.adapters.workspace_io import HostWorkspaceIO
from warden.core.errors import Unavailable, WardenError

__all__ = ["HostUnarchiver"]

# Warden's own archives, packed from the person's folder: their links and protected names
# come back as they were, at any size.
_OWN = BlobLimits(max_bytes=1 << 50, max_files=1 << 30, allow_links_out=True, allow_protected=True)


class HostUnarchiver:
    def restore(self, archive: str, folder: str) -> None:
        path = Path(folder)
        if path.exists():
            raise FileExistsError(folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Unpacked beside the folder and renamed into place: a workspace is never half there.
        staging = path.parent / f".unarchive-{path.name}"
        trash = HostWorkspaceIO().trash
        if staging.exists():  # a crashed unarchive's
            trash(str(staging))
        staging.mkdir(mode=0o755)
        try:
            unpack_tree(Path(archive), staging, _OWN)
            staging.rename(path)
        except BaseException as exc:
            trash(str(staging))
            if isinstance(exc, WardenError | OSError) or not isinstance(exc, Exception):
                raise
            # zstandard's and tarfile's own errors: the archive file is damaged, not Warden.
            raise Unavailable(f"the archive {archive} is damaged ({type(exc).__name__}: {exc}); restore it "
                              "from a backup, or `warden destroy` the workspace") from exc

    def discard(self, archive: str) -> None:
        Path(archive).unlink(missing_ok=True)
