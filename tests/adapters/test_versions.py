"""The checkpoint store on disk (adapters/versions.py): objects, owners, sizes, damage."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from warden.adapters.versions import HostVersionStore
from warden.core.checkpoints import Manifest
from warden.core.errors import TooLarge


@pytest.fixture
def store(tmp_path: Path) -> HostVersionStore:
    return HostVersionStore(tmp_path / "versions")


def workspace(tmp_path: Path, files: dict[str, bytes]) -> str:
    folder = tmp_path / "ws"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return str(folder)


def test_objects_are_read_only_copies_not_links(store: HostVersionStore, tmp_path: Path) -> None:
    folder = workspace(tmp_path, {"a.txt": b"hello"})
    with store.lock("w", "id1", folder):
        captured = store.capture("w", folder, known={}, budget=None, now_ns=0)
    (entry,) = captured.entries
    obj = tmp_path / "versions" / "w" / "objects" / entry.digest[:2] / entry.digest[2:]
    st = obj.stat()
    assert stat.S_IMODE(st.st_mode) == 0o444 and st.st_nlink == 1
    assert st.st_ino != os.stat(Path(folder) / "a.txt").st_ino
    with open(Path(folder) / "a.txt", "r+b") as handle:  # a bot writing the file in place
        handle.write(b"HELLO")
    assert obj.read_bytes() == b"hello"
    assert stat.S_IMODE((tmp_path / "versions" / "w").stat().st_mode) == 0o700


def test_a_budget_refuses_and_counts_what_was_placed(store: HostVersionStore, tmp_path: Path) -> None:
    folder = workspace(tmp_path, {f"f{i}": os.urandom(10_000) for i in range(5)})
    with store.lock("w", "id1", folder), pytest.raises(TooLarge) as info:
        store.capture("w", folder, known={}, budget=25_000, now_ns=0)
    assert info.value.rule == "workspace.max_disk"
    assert store.usage("w") > 0  # counted until collected
    assert store.collect("w", set()) > 0
    assert store.measure("w") <= 3 * 4096  # owner, usage and lock files only


def test_a_new_owner_empties_the_store_and_the_quota_finds_it_by_folder(store: HostVersionStore,
                                                                         tmp_path: Path) -> None:
    folder = workspace(tmp_path, {"a": b"a" * 5000})
    with store.lock("w", "id1", folder):
        captured = store.capture("w", folder, known={}, budget=None, now_ns=0)
        store.save_manifest("w", Manifest("abcd1234", "w", "id1", "2026-01-01T00:00:00", "", "user",
                                          tuple(captured.entries)))
    assert [m.id for m in store.manifests("w", "id1")] == ["abcd1234"]
    assert store.manifests("w", "id2") == []
    assert store.usage_at(folder) == store.usage("w") > 5000
    (tmp_path / "versions" / "w" / "checkpoints" / "broken.json").write_text("{not json")
    assert [m.id for m in store.manifests("w", "id1")] == ["abcd1234"]  # a damaged one is skipped
    with store.lock("w", "id2", folder):
        pass
    assert store.manifests("w", "id2") == [] and store.usage("w") == 0
    assert not list((tmp_path / "versions" / "w" / "objects").iterdir())
    assert store.remove("w") and store.usage_at(folder) == 0 and not store.remove("w")
