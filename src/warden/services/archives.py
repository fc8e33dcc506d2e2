"""The archives shelf: workspace folders packed as `archives/NAME-TIME-XXXX.tar.zst`.

A destroyed workspace's archive keeps a copy of its registry row beside it
(`<archive>.record.json`), so `warden unarchive NAME` can bring it back; the archives folder is
Warden's own (mode 0700), never a bot's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from warden.core.errors import NotFound
from warden.core.ports import ArchiveFiles, Clock
from warden.core.settings import Settings
from warden.core.workspaces import WorkspaceRecord

__all__ = ["RECORD_SUFFIX", "ArchiveShelf", "Packed", "Shelved"]

RECORD_SUFFIX = ".record.json"
_PACKED = re.compile(r"(?P<name>.+)-\d{8}T\d{6}-[0-9a-f]{4}\.tar\.zst")
_SHELVED = re.compile(r"(?P<name>.+)-(?P<when>\d{8}T\d{6})-[0-9a-f]{4}\.tar\.zst" + re.escape(RECORD_SUFFIX))


@dataclass(frozen=True)
class Shelved:
    """A destroyed workspace kept as an archive."""

    name: str
    archive: str
    destroyed: str  # when, UTC, as the archive's name says


@dataclass(frozen=True)
class Packed:
    path: str
    size: int


class ArchiveShelf:
    """Packs workspace folders and keeps the records of destroyed ones."""

    def __init__(self, files: ArchiveFiles, folder: Path, clock: Clock, settings: Settings) -> None:
        self._files = files
        self.folder = folder
        self._clock = clock
        self._settings = settings

    def pack(self, record: WorkspaceRecord, *, progress: bool = False) -> Packed:
        """Pack the workspace folder (not its layers) to `archives/NAME-TIME-XXXX.tar.zst`."""
        stamp = self._clock().strftime("%Y%m%dT%H%M%S")
        # A home that never archived before (or another node's, on a shared registry) has none yet.
        self._files.make_folder(str(self.folder))
        target = str(self.folder / f"{record.name}-{stamp}-{os.urandom(2).hex()}.tar.zst")
        size = self._files.pack(record.path, target, max_bytes=self._settings.get_size("workspace.archive_max_size"),
                                progress=progress)
        return Packed(target, size)

    def exists(self, archive: str) -> bool:
        return self._files.is_file(archive)

    def drop(self, archive: str) -> None:
        """Delete an archive no record names (gone already: fine)."""
        self._files.remove(archive)

    def take_back(self, archive: str, *, packed: bool) -> None:
        """Undo `keep_record` (and, when `packed`, the pack) of a destroy that did not happen."""
        self._files.remove(archive + RECORD_SUFFIX)
        if packed:
            self.drop(archive)

    def keep_record(self, archive: str, record: WorkspaceRecord) -> None:
        """Keep `record` beside `archive`: the registry row goes, the way back stays."""
        self._files.write_atomic(archive + RECORD_SUFFIX,
                                 json.dumps(dataclasses.asdict(record), default=str).encode(), mode=0o600)

    def destroyed(self, name: str) -> tuple[str, ...]:
        """The record files of `name`'s destroyed-and-archived copies, oldest first."""
        pattern = re.compile(re.escape(name) + r"-\d{8}T\d{6}-[0-9a-f]{4}\.tar\.zst" + re.escape(RECORD_SUFFIX))
        return tuple(str(self.folder / entry) for entry in sorted(self._files.names(str(self.folder)))
                     if pattern.fullmatch(entry))

    def shelved(self) -> list[Shelved]:
        """Every destroyed workspace kept as an archive (`warden unarchive NAME` brings one back),
        oldest first: the registry forgot them, so they are found by their file names."""
        found = []
        for entry in sorted(self._files.names(str(self.folder))):
            match = _SHELVED.fullmatch(entry)
            if match:
                when = match.group("when")
                found.append(Shelved(match.group("name"), str(self.folder / entry[: -len(RECORD_SUFFIX)]),
                                     f"{when[:4]}-{when[4:6]}-{when[6:8]}T{when[9:11]}:{when[11:13]}:{when[13:]}"))
        return sorted(found, key=lambda s: s.destroyed)

    def unrecorded(self) -> list[tuple[str, str]]:
        """(workspace name, archive) of each packed archive with no record beside it: an
        archived workspace's own (its row names it), or a copy no row names any more."""
        names = set(self._files.names(str(self.folder)))
        return [(match.group("name"), str(self.folder / entry)) for entry in sorted(names)
                if (match := _PACKED.fullmatch(entry)) and entry + RECORD_SUFFIX not in names]

    def owners(self, name: str) -> set[str]:
        """Who created the destroyed workspaces of that name that are archived."""
        owners = set()
        for sidecar in self.destroyed(name):
            try:
                raw = self._files.read_bytes(sidecar)
                owners.add(str(json.loads(raw or b"").get("created_by") or "user"))
            except (OSError, ValueError, AttributeError):
                owners.add("user")  # unreadable: assume the person's, the safe side
        return owners

    def read_record(self, sidecar: str) -> tuple[str, WorkspaceRecord]:
        """The archive a record file belongs to, and the registry row it keeps."""
        raw = self._files.read_bytes(sidecar)
        if raw is None:
            raise NotFound(f"the record {sidecar} is gone")
        return sidecar[: -len(RECORD_SUFFIX)], WorkspaceRecord(**json.loads(raw))

    def forget(self, sidecar: str) -> None:
        self._files.remove(sidecar)
