"""A workspace's folder: what Warden writes into it when creating or repairing it.

The folder is made first, then a project blob (when given) is unpacked into it, then
`.workspace.json`, the thin venv, `node_modules` and the project files are written, and
`.workspace_configured` last, atomically: its presence says the folder is whole. Deleting a
folder is a rename into the trash (instant) and a removal in the background. Every write goes
through the host workspace I/O port, which never follows a link a bot planted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from warden.core.errors import Conflict
from warden.core.ports import GitDefuser, WorkspaceFolders
from warden.core.settings import Settings
from warden.core.workspaces import WorkspaceRecord

if TYPE_CHECKING:
    from warden.core.layers import EnvLayers
    from warden.services.layers import Resolution
    from warden.services.quota import QuotaService

__all__ = ["CONFIGURED_MARKER", "METADATA_FILE", "FolderService", "env_meta", "layer_ids", "metadata_json"]

METADATA_FILE = ".workspace.json"
CONFIGURED_MARKER = ".workspace_configured"
_GITIGNORE = ".venv/\nnode_modules/\n__pycache__/\n"


def layer_ids(record: WorkspaceRecord) -> list[str]:
    """The env layers a workspace uses (from its registry row)."""
    value = record.meta.get("layers")
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def env_meta(resolution: Resolution, layers: EnvLayers, path: str) -> dict[str, Any]:
    """What the registry keeps about a workspace's environment (also what runs mount read-only)."""
    ro_paths: list[str] = []
    meta: dict[str, Any] = {"layers": resolution.layer_ids, "python_venv": None,
                            "template_source": resolution.template.source}
    if resolution.python:
        interp = resolution.python.interpreter
        meta["python_venv"] = os.path.join(path, ".venv")
        meta["python"] = interp.version
        ro_paths.append(interp.prefix)
    if layers.python is not None and layers.python.site_packages:
        # The layer's own folder is mounted, never a folder reckoned from a path its layer.json
        # names (one copied from the layer cache): `venv` there would have made it the home's parent.
        ro_paths.append(layers.python.path)
    if resolution.node:
        meta["node"] = resolution.node.runtime.version
    if layers.node is not None and layers.node.node_modules:
        ro_paths.append(layers.node.path)
    meta["ro_paths"] = ro_paths
    return meta


def metadata_json(record: WorkspaceRecord) -> bytes:
    """The bytes of `.workspace.json` for `record` (no access key in it: tokens live hashed in the registry)."""
    meta = record.meta
    metadata = {
        "id": record.id, "name": record.name, "path": record.path,
        "created": record.created_at, "isolated": True, "type": record.type,
        "template": record.template, "layer_id": record.layer_id, "layers": meta.get("layers", []),
        "expires": record.expires_at, "ttl": meta.get("ttl"), "python_venv": meta.get("python_venv"),
        "python": meta.get("python"), "node": meta.get("node"),
    }
    return (json.dumps(metadata, indent=2) + "\n").encode("utf-8")


def not_registered(path: str) -> Conflict:
    """The refusal of a create whose folder is there already, no workspace's."""
    return Conflict(f"folder {path} already exists but is not a registered workspace; move it away or pick another "
                    "name (what a killed `warden destroy` left, `warden doctor --fix` removes)")


class FolderService:
    """Makes, fills, checks and trashes workspace folders."""

    def __init__(self, io: WorkspaceFolders, git: Callable[[], GitDefuser], settings: Settings, *,
                 quota: Callable[[], QuotaService] | None = None) -> None:
        self.io = io
        self._git = git  # made at first use: the guard's safe file access is not needed to list
        self._settings = settings
        self._quota = quota

    def present(self, path: str) -> bool:
        """Whether the folder is there (a link to one counts)."""
        return self.io.is_dir(path)

    def holds(self, record: WorkspaceRecord) -> bool:
        """Whether the folder at `record.path` is that workspace's own: its `.workspace.json`
        (a file, never a link followed) names `record`'s id, not only its name."""
        return self.io.is_dir(record.path) and self.written_id(record.path) == record.id

    def changed_at(self, path: str) -> float | None:
        """When the folder (or file) `path` last changed (its ctime); None: nothing there."""
        return self.io.changed_at(path)

    def written_id(self, path: str) -> str | None:
        """The workspace id the `.workspace.json` of folder `path` names (a file, never a link
        followed), or None."""
        try:
            # The folder is the bot's: read by descriptor and bounded, as any file it may have written.
            written = json.loads(self.io.read_small(path, METADATA_FILE, 1 << 16) or b"")
        except (OSError, ValueError, RecursionError):  # RecursionError: `[[[[…`, 64 KiB nest deep enough
            return None
        found = written.get("id") if isinstance(written, dict) else None
        return found if isinstance(found, str) else None

    def taken(self, path: str) -> bool:
        """Whether anything (a dangling link too) is at `path`."""
        return self.io.kind(path) is not None

    def make(self, path: str) -> None:
        """Make the empty workspace folder; Conflict when something is there already."""
        try:
            self.io.make_folder(path)
        except FileExistsError:
            raise not_registered(path) from None

    def write_metadata(self, record: WorkspaceRecord) -> None:
        """`.workspace.json`: what the workspace is, for tools working in it."""
        self.io.write_atomic(os.path.join(record.path, METADATA_FILE), metadata_json(record))

    def mark_configured(self, path: str, text: str) -> None:
        """`.workspace_configured`, written last: the folder is whole."""
        self.io.write_atomic(os.path.join(path, CONFIGURED_MARKER), text.encode())

    def configured(self, path: str) -> bool:
        return self.io.is_file(os.path.join(path, CONFIGURED_MARKER))

    def populate(self, path: str, resolution: Resolution, layers: EnvLayers) -> Sequence[str]:
        """Write the env and project files of a template into `path`; returns what was written.

        Files a blob brought (pyproject.toml, package.json, .gitignore) are kept.
        """
        done = []
        if resolution.python:
            interp = resolution.python.interpreter
            py = layers.python
            self.io.write_thin_venv(path, interpreter=interp.executable, version=interp.version,
                                    layer_site=py.site_packages if py else None, scripts=py.scripts if py else {})
            done.append(".venv")
        if layers.node is not None:
            self.io.link_node_modules(path, layers.node)
            done.append("node_modules")
        files: dict[str, str | bytes] = {}
        pyproject = resolution.pyproject()
        if pyproject is not None:
            files["pyproject.toml"] = pyproject
        package = resolution.package_json()
        if package is not None:
            files["package.json"] = package
            modules = layers.node.node_modules if layers.node else None
            lock = self.io.read_bytes(os.path.join(os.path.dirname(modules), "package-lock.json")) if modules else None
            if lock is not None:
                files["package-lock.json"] = lock
        files[".gitignore"] = _GITIGNORE
        self.io.write_new_files(path, files)
        return done

    def unpack(self, blob: bytes, path: str) -> dict[str, int]:
        """Unpack a bot's project blob into the new folder `path` (within workspace.blob_max_size,
        blob_max_files and the disk quota); the files and bytes written."""
        s = self._settings
        disk_bytes = disk_files = None
        if self._quota is not None:
            # The disk quota counts what the blob takes on disk (whole blocks per file and folder).
            quota = self._quota()
            quota.check_free()
            room, used = quota.limits(), quota.usage(path)
            disk_bytes, disk_files = room.max_bytes - used.bytes, room.max_files - used.files
        counts = self.io.unpack_blob(blob, path, max_bytes=s.get_size("workspace.blob_max_size"),
                                     max_files=s.get_int("workspace.blob_max_files"),
                                     disk_bytes=disk_bytes, disk_files=disk_files)
        # `.git` entries were refused; a folder the blob shaped like a repository (HEAD and refs)
        # loses its HEAD before anyone's git can take it for one.
        moved = self._git().defuse(path)
        if moved:
            counts = {**counts, "git_quarantined": len(moved)}
        return counts

    def missing_part(self, record: WorkspaceRecord) -> str | None:
        """What a ready workspace lacks that it cannot run without (a few stat calls), or None."""
        if not self.io.is_dir(record.path):
            return "workspace folder missing"
        if record.meta.get("python_venv") and not self.io.is_dir(os.path.join(record.path, ".venv")):
            return "Python venv missing"
        ro_paths = record.meta.get("ro_paths")
        for layer in ro_paths if isinstance(ro_paths, list) else ():
            if isinstance(layer, str) and not self.io.is_dir(layer):
                return f"env layer or interpreter {layer} missing"
        return None

    def trash(self, path: str, *, now: bool = False) -> None:
        """Rename the folder into the trash (instant) and delete it in the background (`now`:
        before returning)."""
        self.io.trash(path, now=now)
