"""The DiskUsage port and its QuotaWatch (core/ports/files.py) held to the same checks in the fake
(tests/support/fakes.FakeDisk) and on this host (adapters/quota.HostDisk: one walk, then inotify):
what a folder holds, and a run stopped once when its workspace grows past its quota.

A command's writes are `write` here: real files on the host, `FakeDisk.grow` on the fake.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fakes import FakeDisk
from tests.support.waiting import wait_until
from warden.adapters.quota import HostDisk
from warden.core.quota import DISK_KEY, FILES_KEY, Quota


class Host(HostDisk):
    def folder(self, path: str) -> None:
        Path(path).mkdir(parents=True)

    def write(self, folder: str, name: str, size: int) -> None:
        Path(folder, name).write_bytes(b"x" * size)

    def forget(self, path: str) -> None:
        """Nothing is there: nothing to do."""


class Fake(FakeDisk):
    def folder(self, path: str) -> None:
        self.missing.discard(path)

    def write(self, folder: str, name: str, size: int) -> None:
        self.grow(folder, size, 1)

    def forget(self, path: str) -> None:
        self.missing.add(path)


@pytest.fixture(params=["fake", "host"])
def disk(request: pytest.FixtureRequest) -> Host | Fake:
    return Fake() if request.param == "fake" else Host()


@pytest.fixture
def ws(disk: Host | Fake, tmp_path: Path) -> str:
    path = f"{tmp_path}/home/workspaces/w1"
    disk.folder(path)
    return path


def test_the_nearest_existing_folder_and_its_free_space(disk: Host | Fake, ws: str, tmp_path: Path) -> None:
    home = f"{tmp_path}/home"
    disk.forget(f"{home}/not-yet")
    assert disk.nearest_existing(home) == home
    assert disk.nearest_existing(f"{home}/not-yet/keys") == home
    assert disk.free_bytes(home) > 0


def test_a_measure_counts_what_was_written(disk: Host | Fake, ws: str) -> None:
    before = disk.measure(ws)
    disk.write(ws, "data.bin", 10_000)
    after = disk.measure(ws)
    assert after.bytes >= before.bytes + 10_000 and after.files == before.files + 1


def test_a_watch_stops_its_run_once_when_the_workspace_grows_past_its_disk_quota(
        disk: Host | Fake, ws: str, tmp_path: Path) -> None:
    disk.write(ws, "small.txt", 100)
    start = disk.measure(ws)
    quota = Quota(max_bytes=start.bytes + (256 << 10), max_files=1000, min_free=0)
    stops: list[int] = []
    with disk.watch(ws, quota, home=f"{tmp_path}/home") as watch:
        assert watch.start == start and watch.breach is None
        watch.arm(lambda: stops.append(1))
        assert stops == []
        disk.write(ws, "big.bin", 512 << 10)
        wait_until(lambda: watch.breach is not None, message="the watch did not see the workspace grow")
        assert watch.breach == DISK_KEY and stops == [1]
        assert watch.at is not None and watch.at.bytes > quota.max_bytes
        disk.write(ws, "more.bin", 512 << 10)
    assert (watch.breach, stops) == (DISK_KEY, [1])  # once only


def test_a_watch_counts_files_too(disk: Host | Fake, ws: str, tmp_path: Path) -> None:
    start = disk.measure(ws)
    quota = Quota(max_bytes=1 << 40, max_files=start.files + 2, min_free=0)
    stops: list[int] = []
    with disk.watch(ws, quota, home=f"{tmp_path}/home") as watch:
        for n in range(3):  # written as the command started, before the watch was armed
            disk.write(ws, f"f{n}", 1)
        watch.arm(lambda: stops.append(1))  # what came before is counted: stopped as soon as seen
        wait_until(lambda: stops == [1], message="the watch did not count the files")
        assert watch.breach == FILES_KEY


def test_a_workspace_already_over_its_quota_is_not_stopped_for_it(disk: Host | Fake, ws: str, tmp_path: Path) -> None:
    """Only growth breaks the quota: a limit lowered below what a workspace holds does not stop
    a run before it writes (the one that deletes files, say)."""
    disk.write(ws, "big.bin", 64 << 10)
    quota = Quota(max_bytes=1024, max_files=0, min_free=0)
    with disk.watch(ws, quota, home=f"{tmp_path}/home") as watch:
        assert watch.start.bytes > quota.max_bytes
        watch.arm(lambda: pytest.fail("stopped a run that wrote nothing"))
        assert watch.breach is None
