"""The store of checkpoints and versions: content-addressed objects and manifests in Warden's home."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warden.core.checkpoints import Current, Entry, Manifest, RollbackPlan, Version

__all__ = ["Captured", "VersionStore"]


class Captured(Protocol):
    """What one capture of a workspace read: its entries and the bytes of objects it added."""

    @property
    def entries(self) -> Sequence[Entry]: ...

    @property
    def added_bytes(self) -> int: ...


class VersionStore(Protocol):
    """One folder per workspace (`name`, owned by workspace id `owner`) holding objects named by
    their sha256, checkpoint manifests and the versions index. Objects are Warden's own read-only
    copies, never links into a workspace; a manifest is written only after every object it names."""

    def lock(self, name: str, owner: str, folder: str) -> contextlib.AbstractContextManager[None]:
        """Hold the workspace's store for one change (a store a destroyed workspace of the same
        name left is emptied first); `folder` is the workspace's, for `usage_at`."""
        ...

    def capture(self, name: str, folder: str, *, known: Mapping[str, Entry], budget: int | None,
                now_ns: int) -> Captured:
        """Read folder `folder`'s content by descriptor into objects (files whose stable stamp
        matches `known` are not read again); TooLarge when new objects pass `budget` bytes."""
        ...

    def begin_capture(self, name: str) -> bool:
        """Mark a capture under way; True when the last one was cut short (a kill -9 left objects
        no manifest names)."""
        ...

    def end_capture(self, name: str) -> None: ...

    def save_manifest(self, name: str, manifest: Manifest) -> None:
        """Write `manifest` atomically, its objects made durable first."""
        ...

    def drop_manifest(self, name: str, checkpoint: str) -> None:
        """Delete one manifest (its objects stay until `collect`)."""
        ...

    def manifests(self, name: str, owner: str) -> list[Manifest]:
        """The workspace's checkpoints, oldest first (none when the store is another workspace's)."""
        ...

    def scan(self, folder: str, scope: str | None) -> dict[str, Current]:
        """What folder `folder` holds now within `scope` (content only), links not followed."""
        ...

    def apply(self, name: str, folder: str, plan: RollbackPlan) -> None:
        """Carry `plan` out beneath `folder` by descriptor, each file replaced atomically."""
        ...

    def keep_file(self, name: str, folder: str, path: str, *, max_bytes: int) -> list[tuple[str, int, str, int]]:
        """Objects of the regular files at workspace path `path` (a file, or every file under a
        folder): (path, size, digest, mode) each; links and others are not kept."""
        ...

    def versions(self, name: str, owner: str) -> list[Version]:
        """The versions index, oldest first."""
        ...

    def save_versions(self, name: str, versions: Sequence[Version]) -> None: ...

    def read_object(self, name: str, digest: str, *, max_bytes: int) -> bytes: ...

    def collect(self, name: str, live: Collection[str]) -> int:
        """Remove objects not in `live` (and leftovers of cut-short writes); bytes freed."""
        ...

    def usage_at(self, folder: str) -> int:
        """What the store of the workspace at folder `folder` holds (the quota knows folders)."""
        ...

    def usage(self, name: str) -> int:
        """Bytes the workspace's store holds on disk (as last measured; 0 when none)."""
        ...

    def measure(self, name: str) -> int:
        """Measure the store again and remember it."""
        ...

    def remove(self, name: str) -> bool:
        """Delete the workspace's store; False when there was none."""
        ...
