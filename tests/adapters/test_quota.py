"""Measuring a workspace and watching it grow (adapters/disk_usage.py, quota.py, project_quota.py),
without a sandbox."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import poll, wait_until
from warden.adapters.disk_usage import measure
from warden.adapters.project_quota import _mount_of, probe_project_id, project_quota
from warden.adapters.quota import Watcher
from warden.core.quota import DISK_KEY, FILES_KEY, Quota, Usage

MiB = 1 << 20
ROOMY = Quota(max_bytes=1 << 40, max_files=1 << 30, min_free=0)


def blocks(root: Path) -> tuple[int, int]:
    """(bytes by st_blocks * 512, entries) below `root`, walked independently of the adapter."""
    total, count, seen = os.lstat(root).st_blocks * 512, 0, set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
                count += 1
    return total, count


def settle(watcher: Watcher, root: Path) -> Usage:
    """The watcher's count once it has applied every event queued so far (it must match a fresh
    walk). A count equal to a fresh walk's proves nothing: an exchange passes through other counts
    and back, and the count before it already equals the one after. inotify's queue is read in
    order, so once a marker made now is listed (and, removed, no longer is), all before it is applied."""
    marker = root / ".settle-marker"

    def listed() -> bool:
        tree = watcher._tree
        return tree is not None and marker.name in tree.entries.get(watcher.root, {})

    marker.touch()
    wait_until(listed, timeout=10, interval=0.01, message="the watcher did not apply a file made")
    marker.unlink()
    wait_until(lambda: not listed(), timeout=10, interval=0.01, message="the watcher did not apply a file removed")
    return watcher.usage


def test_measure_counts_blocks_and_files_once_and_follows_no_link(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 3 * MiB)
    (ws / "a" / "data").write_bytes(b"y" * MiB)
    os.link(ws / "a" / "data", ws / "a" / "b" / "same-data")  # one inode, charged once
    (ws / "link").symlink_to(outside)                         # never followed
    (ws / "filelink").symlink_to(outside / "big")
    usage = measure(str(ws))
    assert (usage.bytes, usage.files) == blocks(ws)
    assert MiB <= usage.bytes < MiB + 64 * 1024 and usage.files == 5


def test_measure_charges_a_sparse_file_its_length(tmp_path: Path) -> None:
    with open(tmp_path / "hole", "wb") as fh:
        fh.truncate(50 * MiB)  # 0 blocks, but a shared mapping could fill it without an event
    assert measure(str(tmp_path)).bytes >= 50 * MiB


def test_measure_sees_into_a_folder_made_unreadable(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "data").write_bytes(b"z" * MiB)
    hidden.chmod(0)
    try:
        assert measure(str(tmp_path)).bytes >= MiB
    finally:
        hidden.chmod(0o700)


def _exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): two names swap inodes in one step."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, str(a).encode(), -100, str(b).encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def test_the_watcher_keeps_an_exact_count_through_every_kind_of_change(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "keep").mkdir(parents=True)
    (ws / "keep" / "old").write_bytes(b"o" * 100_000)
    with Watcher(str(ws), ROOMY) as watcher:
        assert watcher.start == measure(str(ws))
        watcher.arm(lambda: None)  # as a run's command starts
        (ws / "d1" / "d2" / "d3").mkdir(parents=True)                # new folders, watched at once
        (ws / "d1" / "d2" / "d3" / "f").write_bytes(b"f" * 300_000)
        with open(ws / "grow", "wb") as fh:
            for _ in range(20):
                fh.write(b"g" * 50_000)
        os.truncate(ws / "grow", 10)                                  # shrinks
        (ws / "keep" / "old").write_bytes(b"n" * 10)                  # rewritten in place
        os.rename(ws / "d1", ws / "keep" / "moved")                   # a folder moved inside
        (ws / "keep" / "moved" / "d2" / "later").write_bytes(b"l" * 200_000)  # ...still watched
        os.link(ws / "grow", ws / "grow2")
        os.unlink(ws / "grow")                                        # the other name keeps it
        (ws / "tmp").write_bytes(b"t" * 70_000)
        os.replace(ws / "tmp", ws / "keep" / "old")                   # renamed over a file
        for i in range(50):
            (ws / f"small{i}").write_bytes(b"s")
        shutil.rmtree(ws / "keep" / "moved")                          # a tree deleted
        (ws / "x" / "inner").mkdir(parents=True)
        (ws / "x" / "inner" / "f").write_bytes(b"x" * 30_000)
        _exchange(ws / "x", ws / "keep" / "old")                      # a folder and a file swapped
        assert settle(watcher, ws) == measure(str(ws))
        assert watcher.usage.files == blocks(ws)[1] == 56 and watcher.usage.bytes >= blocks(ws)[0]
    assert watcher.breach is None


def test_writes_through_a_hard_link_read_too_late_are_still_counted(tmp_path: Path) -> None:
    """Events name a file by the name it had; read late (a busy machine: here, all of them read
    at once when the thread starts), that name may be gone or another file's. A file written
    through a name it then lost, or through a hard link made and removed again, kept its old
    charge for good (a random fuzz of events applied late: 8 in 1,500 sequences off, by up to 180 KiB)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_bytes(b"a" * 4000)
    os.link(ws / "a", ws / "b")                  # one file, two names
    (ws / "c").write_bytes(b"c" * 100)
    (ws / "f").write_bytes(b"f" * 4000)
    with Watcher(str(ws), ROOMY) as watcher:
        assert watcher.start == measure(str(ws))
        with open(ws / "a", "ab") as fh:         # grown through one name...
            fh.write(b"A" * 300_000)
        os.replace(ws / "c", ws / "a")            # ...which then names another file: "b" is left
        os.link(ws / "f", ws / "tmp")             # a name made only to write through
        with open(ws / "tmp", "ab") as fh:
            fh.write(b"F" * 200_000)
        os.unlink(ws / "tmp")
        watcher.arm(lambda: None)                 # only now are the events read
        assert settle(watcher, ws) == measure(str(ws))


def test_writes_through_a_removed_hard_link_stop_the_run(tmp_path: Path) -> None:
    """An attack from a sandbox: `ln a t; exec 3>>t; rm t`, then write through fd 3. Every event
    of those writes names `t`, which the tree saw removed while `a` kept the file: the watcher
    left `a` at its old charge, and a run grew five files to 95 MiB against a 20 MiB quota,
    exit 0, no word. Here `t` is also made again (another file) before the writes."""
    ws = tmp_path / "ws"
    (ws / "deep" / "er").mkdir(parents=True)
    quota = Quota(max_bytes=5 * MiB, max_files=1000, min_free=0)
    stopped = threading.Event()
    with Watcher(str(ws), quota) as watcher:
        watcher.arm(stopped.set)
        descriptors = []
        for i, name in enumerate(["t", "t2"]):
            kept = ws / "deep" / "er" / f"a{i}"   # another folder than the lost name's
            kept.touch()
            os.link(kept, ws / name)
            descriptors.append(os.open(ws / name, os.O_WRONLY | os.O_APPEND))
            os.unlink(ws / name)
        (ws / "t").write_bytes(b"new")            # the lost name now names another file
        settle(watcher, ws)                      # every naming event read before the writes,
        tree = watcher._tree
        assert tree is not None                  # and the files that lost a name charged again
        wait_until(lambda: not tree.suspects, timeout=5, interval=0.05, message="suspects never looked at")
        assert watcher.breach is None
        for fd in descriptors:
            os.write(fd, b"x" * 3 * MiB)
            os.close(fd)
        assert stopped.wait(5), f"not stopped at {watcher.usage} (a walk: {measure(str(ws))})"
    assert watcher.breach == DISK_KEY and watcher.at is not None and watcher.at.bytes > 5 * MiB


def test_writes_through_a_name_whose_folder_is_gone_stop_the_run(tmp_path: Path) -> None:
    """An attack from a sandbox (20 MiB quota), five times: `mkdir d; : > d/f; ln d/f g; exec
    3>>d/f; rm d/f; rmdir d`, then 15 MiB through fd 3: the run ended with 76 MiB, exit 0, no
    word. The writes' events go to the watch of `d`, removed with it: none ever comes, so the
    file that lost a name there is charged again by a timed look for as long as it lives."""
    ws = tmp_path / "ws"
    ws.mkdir()
    quota = Quota(max_bytes=5 * MiB, max_files=1000, min_free=0)
    stopped = threading.Event()
    with Watcher(str(ws), quota) as watcher:
        watcher.arm(stopped.set)
        descriptors = []
        for i in range(2):
            folder = ws / f"d{i}"
            folder.mkdir()
            (folder / "f").touch()
            tree = watcher._tree                 # seen in its folder (one made and emptied unseen:
            assert tree is not None              # the next test)
            wait_until(lambda: "f" in tree.entries.get(str(folder), {}), timeout=5, interval=0.01,  # noqa: B023
                       message="the watcher did not see the file in its folder")
            os.link(folder / "f", ws / f"g{i}")
            descriptors.append(os.open(folder / "f", os.O_WRONLY | os.O_APPEND))
            os.unlink(folder / "f")
            folder.rmdir()
        settle(watcher, ws)                      # every naming event read before the writes,
        tree = watcher._tree
        assert tree is not None                  # and the files that lost a name charged again
        wait_until(lambda: not tree.suspects, timeout=5, interval=0.05, message="suspects never looked at")
        time.sleep(1.2)                          # past the timed look's second
        assert watcher.breach is None
        for fd in descriptors:
            os.write(fd, b"x" * 3 * MiB)
        try:
            assert stopped.wait(5), f"not stopped at {watcher.usage} (a walk: {measure(str(ws))})"
        finally:
            for fd in descriptors:
                os.close(fd)
    assert watcher.breach == DISK_KEY and watcher.at is not None and watcher.at.bytes > 5 * MiB


@pytest.mark.parametrize("folder_removed", [True, False])
def test_writes_through_a_name_in_a_folder_never_seen_stop_the_run(tmp_path: Path, folder_removed: bool) -> None:
    """The same attack with its events read late (a busy machine: here, all read when the thread
    starts). The folder made and removed unseen never had a watch, and the file that lost a name
    there is not known; or the folder is walked only after its file was made, linked elsewhere,
    opened and unlinked, and the writes come by a name the tree never held, as a removed temporary
    file's would. Either way every file is charged again by the timed look."""
    ws = tmp_path / "ws"
    ws.mkdir()
    quota = Quota(max_bytes=5 * MiB, max_files=1000, min_free=0)
    stopped = threading.Event()
    with Watcher(str(ws), quota) as watcher:
        folder = ws / "d"
        folder.mkdir()
        (folder / "f").touch()
        os.link(folder / "f", ws / "g")
        fd = os.open(folder / "f", os.O_WRONLY | os.O_APPEND)
        os.unlink(folder / "f")
        if folder_removed:
            folder.rmdir()
        watcher.arm(stopped.set)                 # only now are the events read
        settle(watcher, ws)
        if folder_removed:
            time.sleep(1.2)                      # past the timed look's second
        assert watcher.breach is None
        try:
            os.write(fd, b"x" * 6 * MiB)
            assert stopped.wait(5), f"not stopped at {watcher.usage} (a walk: {measure(str(ws))})"
        finally:
            os.close(fd)
    assert watcher.breach == DISK_KEY


def test_a_run_that_ended_past_the_quota_unseen_says_so(tmp_path: Path) -> None:
    """What the thread had not read when the command ended is applied at close: past the quota,
    the breach is kept (the run's last line says "as the command ended"), nothing is stopped."""
    quota = Quota(max_bytes=1 * MiB, max_files=1000, min_free=0)
    with Watcher(str(tmp_path), quota) as watcher:
        (tmp_path / "big").write_bytes(b"x" * 2 * MiB)  # never armed: the thread reads nothing
    assert watcher.breach == DISK_KEY
    assert watcher.at is not None and watcher.at.bytes > MiB


def test_the_watcher_stops_a_writer_once_past_the_limit(tmp_path: Path) -> None:
    quota = Quota(max_bytes=5 * MiB, max_files=1000, min_free=0)
    stopped = threading.Event()
    calls: list[int] = []

    def stop() -> None:
        calls.append(1)
        stopped.set()

    with Watcher(str(tmp_path), quota) as watcher:
        watcher.arm(stop)
        for i in range(30):
            if stopped.is_set():
                break
            (tmp_path / f"f{i}").write_bytes(b"x" * MiB)
        assert stopped.wait(5)
    assert calls == [1] and watcher.breach == DISK_KEY
    assert watcher.at is not None and watcher.at.bytes > 5 * MiB


def test_a_breach_before_arming_stops_the_run_as_soon_as_it_is_armed(tmp_path: Path) -> None:
    """What the command wrote between its start and `arm` (the thread watches from `arm` on) is
    queued by the kernel: the thread's first poll finds it, and a breach in it stops the run."""
    quota = Quota(max_bytes=1 << 40, max_files=100, min_free=0)
    calls: list[int] = []
    with Watcher(str(tmp_path), quota) as watcher:
        for i in range(150):
            (tmp_path / f"n{i}").touch()
        time.sleep(0.05)
        assert watcher.breach is None  # nothing watches before the run's command is started
        watcher.arm(lambda: calls.append(1))
        poll(lambda: calls == [1], timeout=5, interval=0.01)
    assert watcher.breach == FILES_KEY and calls == [1]


def test_nothing_is_stopped_after_the_watcher_closed(tmp_path: Path) -> None:
    calls: list[int] = []
    watcher = Watcher(str(tmp_path), Quota(max_bytes=1 << 20, max_files=100, min_free=0))
    with watcher:
        watcher.arm(lambda: calls.append(1))
    (tmp_path / "big").write_bytes(b"x" * 2 * MiB)
    time.sleep(0.1)  # nothing to wait for when all is well: the time a live watcher would need to act
    assert calls == [] and watcher.breach is None


def test_project_quota_detection_names_the_filesystem(tmp_path: Path) -> None:
    point, kind, source, options = _mount_of(str(tmp_path))
    assert str(tmp_path).startswith(point) and kind and source
    usable, detail = project_quota(str(tmp_path / "not-made-yet"))
    assert point in detail and kind in detail
    if not options & {"prjquota", "prjjquota", "pquota"}:
        assert not usable and "without prjquota" in detail
        # The probe itself (FS_IOC_FSSETXATTR with a project id) fails on such a filesystem,
        # unless it has the ext4 project feature and we are root.
        try:
            probe_project_id(str(tmp_path))
        except OSError as exc:
            assert exc.errno is not None
        assert os.listdir(tmp_path) == []  # the probe folder is gone either way


def test_without_inotify_the_watcher_rescans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import warden.adapters.disk_usage as disk_usage

    def refuse() -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(disk_usage, "inotify", refuse)
    stopped = threading.Event()
    with Watcher(str(tmp_path), Quota(max_bytes=1 << 40, max_files=100, min_free=0)) as watcher:
        watcher.arm(stopped.set)
        for i in range(150):
            (tmp_path / f"n{i}").touch()
        assert stopped.wait(5)
    assert watcher.breach == FILES_KEY and "checked every 0.2 s" in watcher.notes[0]


def test_after_an_event_overflow_the_watcher_measures_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import warden.adapters.disk_usage as disk_usage

    real, calls = disk_usage.UsageTree.handle, []

    def overflow_once(self: Any, wd: int, mask: int, name: str, dirty: set[str]) -> None:
        calls.append(name)
        if len(calls) == 1:
            raise disk_usage.Overflow
        real(self, wd, mask, name, dirty)

    monkeypatch.setattr(disk_usage.UsageTree, "handle", overflow_once)
    with Watcher(str(tmp_path), ROOMY) as watcher:
        watcher.arm(lambda: None)
        (tmp_path / "a").write_bytes(b"a" * 100_000)
        wait_until(lambda: calls, timeout=5, interval=0.01, message="no event was handled")
        # The new walk is done: the count matches a fresh one, "a" included.
        wait_until(lambda: watcher.usage == measure(str(tmp_path)), timeout=5, interval=0.01,
                   message="the watcher did not measure again after the overflow")
        (tmp_path / "sub").mkdir()  # after the new walk: counted from events again
        (tmp_path / "sub" / "b").write_bytes(b"b" * 200_000)
        assert settle(watcher, tmp_path) == measure(str(tmp_path))
        assert len(calls) > 1


def test_a_writing_run_is_stopped_when_the_homes_disk_falls_below_min_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import warden.adapters.disk_usage as disk_usage

    checks: list[str] = []

    def free_bytes(path: str) -> int:
        checks.append(path)
        return 100 * MiB  # another writer filled it

    monkeypatch.setattr(disk_usage, "free_bytes", free_bytes)
    stopped = threading.Event()
    with Watcher(str(tmp_path), Quota(max_bytes=1 << 40, max_files=1 << 30, min_free=1 << 30),
                 home=str(tmp_path)) as watcher:
        watcher.arm(stopped.set)
        # At start and twice since (the third look begins once the second is judged).
        wait_until(lambda: len(checks) >= 3, message="the watcher never looked at the free space")
        assert not stopped.is_set()  # a command that writes nothing goes on
        (tmp_path / "x").write_bytes(b"x")
        assert stopped.wait(5)
    assert watcher.breach == "workspace.min_free"


def test_a_run_filling_the_homes_disk_elsewhere_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes through an allowed read-write folder do not touch the workspace tree; the home's
    disk shrinking below min_free during the run stops it all the same."""
    import warden.adapters.disk_usage as disk_usage

    free = [2 << 30]
    checks: list[str] = []

    def free_bytes(path: str) -> int:
        checks.append(path)
        return free[0]

    monkeypatch.setattr(disk_usage, "free_bytes", free_bytes)
    stopped = threading.Event()
    with Watcher(str(tmp_path), Quota(max_bytes=1 << 40, max_files=1 << 30, min_free=1 << 30),
                 home=str(tmp_path)) as watcher:
        watcher.arm(stopped.set)
        wait_until(lambda: len(checks) >= 3, message="the watcher never looked at the free space")
        assert not stopped.is_set()
        free[0] = 500 * MiB  # the run wrote 1.5 GiB somewhere else on the home's disk
        assert stopped.wait(5)
    assert watcher.breach == "workspace.min_free"


def test_a_workspace_run_again_in_one_process_catches_up_instead_of_walking(tmp_path: Path) -> None:
    import warden.adapters.quota as quota_adapter

    ws = tmp_path / "ws"
    ws.mkdir()
    for _ in range(2):  # the first run gives its tree back; the second keeps it
        with Watcher(str(ws), ROOMY):
            pass
    kept = quota_adapter._KEPT.get(str(ws))
    assert kept is not None
    (ws / "sub").mkdir()                      # changes between runs: queued, applied next time
    (ws / "sub" / "f").write_bytes(b"f" * 300_000)
    (ws / "g").write_bytes(b"g" * 5000)
    with Watcher(str(ws), ROOMY) as watcher:
        assert watcher._tree is kept and watcher.start == measure(str(ws))
    shutil.rmtree(ws)                         # a new folder of the same name: walked afresh
    ws.mkdir()
    (ws / "new").write_bytes(b"n")
    with Watcher(str(ws), ROOMY) as watcher:
        assert watcher._tree is not kept and watcher.start == measure(str(ws))


def _runs_noting(folder: Path, runs: int, note: Callable[[], None]) -> None:
    """`runs` watched runs of `folder` (entered, then armed as a run's command starts), each
    calling `note` in the thread its loop runs in."""
    real = Watcher._loop

    def noted(self: Watcher, *args: Any) -> None:
        note()
        real(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Watcher, "_loop", noted)
        for _ in range(runs):
            with Watcher(str(folder), ROOMY) as watcher:
                watcher.arm(lambda: None)


def test_a_watchers_thread_is_kept_for_the_next_run(tmp_path: Path) -> None:
    """Starting a thread cost every run about a millisecond: the next watcher runs in the thread
    the last one used, and a forked child, which has none of its parent's threads, starts its own."""
    idents: list[int] = []
    # A kernel id: a new thread gets a new one.
    _runs_noting(tmp_path, 5, lambda: idents.append(threading.get_native_id()))
    assert len(set(idents)) == 1
    names = [t.name for t in threading.enumerate()]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            with Watcher(str(tmp_path), ROOMY) as watcher:
                watcher.arm(lambda: None)
            os.write(write_end, b"watched")
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as child:
        assert child.read() == b"watched"
    os.waitpid(pid, 0)
    assert names.count("warden-quota") >= 1


def test_a_watcher_that_stopped_a_run_leaves_its_thread_for_the_next(tmp_path: Path) -> None:
    quota = Quota(max_bytes=1 << 40, max_files=10, min_free=0)
    with Watcher(str(tmp_path), quota) as watcher:
        for i in range(20):
            (tmp_path / f"n{i}").touch()
        poll(lambda: watcher.breach is not None, timeout=5, interval=0.01)
    for i in range(20):
        (tmp_path / f"n{i}").unlink()
    stopped = threading.Event()
    with Watcher(str(tmp_path), quota) as again:
        again.arm(stopped.set)
        for i in range(20):
            (tmp_path / f"m{i}").touch()
        assert stopped.wait(5)
    assert again.breach == FILES_KEY


def test_a_folder_moved_into_a_folder_that_moved_between_runs_is_still_counted(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "src" / "c").mkdir(parents=True)
    for _ in range(2):  # the second run keeps its tree
        with Watcher(str(ws), ROOMY):
            pass
    (ws / "a").rename(ws / "b")
    (ws / "src" / "c").rename(ws / "b" / "c")  # the tree reads both only at the next run
    with Watcher(str(ws), ROOMY) as watcher:
        watcher.arm(lambda: None)
        (ws / "b" / "c" / "f").write_bytes(b"f" * 100_000)
        assert settle(watcher, ws) == measure(str(ws))


def _inotify_scarce() -> bool:
    """Whether fewer than two more inotify instances can be had by this user now."""
    from warden.adapters import disk_usage

    taken: list[int] = []
    try:
        for _ in range(2):
            taken.append(disk_usage.inotify())
    except OSError:
        return True
    finally:
        for fd in taken:
            os.close(fd)
    return False


def test_a_prepared_workspace_is_caught_up_by_its_first_run_and_its_git_sweep_is_a_full_scans_equal(
        tmp_path: Path) -> None:
    """quota.prepare (the daemon's spare, while it waits) walks and watches the workspace its
    home's last command ran in: the run it then serves applies what changed meanwhile instead of
    walking, attributes none of it to itself, and its git sweeps find what a full scan finds."""
    import warden.adapters.quota as quota_adapter
    from warden.adapters import gitguard

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_bytes(b"a" * 4000)
    quota_adapter.prepare(str(ws))
    prepared = quota_adapter._KEPT.get(str(ws))
    assert prepared is not None
    assert gitguard.scan_again(str(ws)) == gitguard.scan(str(ws)) == []
    # The person works while the spare waits: all of it is queued, none of it is the run's.
    (ws / "lib" / "deep").mkdir(parents=True)
    (ws / "lib" / "deep" / "b.js").write_bytes(b"b" * 70_000)
    (ws / "src" / "a.py").unlink()
    (ws / "src").rename(ws / "moved")
    (ws / "moved" / ".git").mkdir()
    (ws / "moved" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "lib" / ".GIT").symlink_to("/etc")
    assert gitguard.scan_again(str(ws)) == gitguard.scan(str(ws)) != []
    with Watcher(str(ws), ROOMY) as watcher:
        if watcher._tree is not prepared and _inotify_scarce():
            # The user's inotify instances (fs.inotify.max_user_instances, 128) ran out: CI as root
            # met it with many daemons and servers of other tests at once. Reproduced by taking all
            # but one; what is kept then cannot be relied on, and Warden walks the workspace instead.
            pytest.skip("this user's inotify instances ran out on the machine while the test ran")
        assert watcher._tree is prepared and watcher.start == measure(str(ws))
        watcher.arm(lambda: None)
        (ws / "made-by-the-run").write_bytes(b"r")
        settle(watcher, ws)
        assert watcher.changes is not None and list(watcher.changes.paths()) == ["/made-by-the-run"]
    assert quota_adapter.last_watched() == (str(ws), True)
    assert quota_adapter._KEPT.get(str(ws)) is prepared  # kept for the next run of this process


def test_a_workspace_that_cannot_be_watched_whole_is_not_prepared(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import warden.adapters.quota as quota_adapter
    from warden.adapters import disk_usage

    ws = tmp_path / "ws"
    ws.mkdir()

    def no_inotify() -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(disk_usage, "inotify", no_inotify)
    quota_adapter.prepare(str(ws))
    assert str(ws) not in quota_adapter._KEPT


def test_the_watchers_thread_runs_at_real_time_priority_where_warden_may(tmp_path: Path) -> None:
    """The thread is given SCHED_FIFO once, as it starts, and keeps it for every run's loop
    (its overshoot bound: `_hurry`); a run's loop no longer asks for it each time."""
    from warden.adapters.quota import realtime_allowed

    if not realtime_allowed():
        pytest.skip("this user may not give a thread real-time priority (doctor says so)")
    policies: list[int] = []
    _runs_noting(tmp_path, 3, lambda: policies.append(os.sched_getscheduler(0)))
    assert policies == [os.SCHED_FIFO] * 3


def test_the_nearest_existing_folder_is_found_by_the_paths_text(tmp_path: Path) -> None:
    """As Path(path).parent steps (asked twice at every run, so on the text): no `..` folded,
    a relative path's last parent is "."."""
    from warden.adapters.quota import HostDisk

    disk = HostDisk()
    assert disk.nearest_existing(f"{tmp_path}/a/b/c") == str(tmp_path)
    assert disk.nearest_existing(f"{tmp_path}/") == str(tmp_path)
    assert disk.nearest_existing("/nonexistent-warden/a") == "/"
    assert disk.nearest_existing("/") == "/"
    assert disk.nearest_existing("nonexistent-warden/a") == "."
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    assert disk.nearest_existing(f"{tmp_path}/link/../real/x") == str(tmp_path)  # `..` after a dangling link


# -- kept by the runner's own loop (RunWatch: the live sandbox's runner waits on its command) --------
def _no_thread(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The loops handed to a watcher thread, none run: a taken watch must need none."""
    import warden.adapters.quota as quota_module

    handed: list[object] = []

    def run(loop: Callable[[], None]) -> threading.Event:
        handed.append(loop)
        done = threading.Event()
        done.set()
        return done

    monkeypatch.setattr(quota_module._THREADS, "run", run)
    return handed


def test_a_taken_watch_stops_a_writer_from_the_callers_looks_without_a_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handed = _no_thread(monkeypatch)
    quota = Quota(max_bytes=5 * MiB, max_files=1000, min_free=0)
    calls: list[int] = []
    with Watcher(str(tmp_path), quota) as watcher:
        assert watcher.take()
        watcher.arm(lambda: calls.append(1))
        for i in range(30):
            if calls:
                break
            (tmp_path / f"f{i}").write_bytes(b"x" * MiB)
            watcher.look()  # as the runner does once the descriptor has something
    assert handed == [] and calls == [1] and watcher.breach == DISK_KEY
    assert watcher.at is not None and watcher.at.bytes > 5 * MiB


def test_a_taken_watch_counts_every_change_and_charges_what_came_after_the_last_look(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handed = _no_thread(monkeypatch)
    with Watcher(str(tmp_path), ROOMY) as watcher:
        assert watcher.take()
        watcher.arm(lambda: None)
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "a").write_bytes(b"a" * 300_000)
        watcher.look()
        (tmp_path / "b").write_bytes(b"b" * 100_000)
        (tmp_path / "sub" / "a").unlink()
        watcher.look()
        assert watcher.usage == measure(str(tmp_path))
    quota = Quota(max_bytes=1 << 40, max_files=10, min_free=0)
    with Watcher(str(tmp_path), quota) as watcher:
        assert watcher.take()
        watcher.arm(lambda: None)
        watcher.look()
        for i in range(20):  # after the last look: read as the watch closes
            (tmp_path / f"n{i}").touch()
    assert handed == [] and watcher.breach == FILES_KEY


def test_a_taken_watch_armed_again_by_another_runner_goes_to_a_thread(tmp_path: Path) -> None:
    """The live sandbox's runner took the watch, then gave its command up (the sandbox ended as it
    started): the fresh sandbox that runs it instead waits on no watch, so a thread must."""
    quota = Quota(max_bytes=1 << 40, max_files=100, min_free=0)
    calls: list[int] = []
    with Watcher(str(tmp_path), quota) as watcher:
        assert watcher.take()
        watcher.arm(lambda: None)
        watcher.arm(lambda: calls.append(1))
        for i in range(150):
            (tmp_path / f"n{i}").touch()
        poll(lambda: calls == [1], timeout=5, interval=0.01)
    assert watcher.breach == FILES_KEY and calls == [1]


def test_a_watch_without_inotify_is_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import warden.adapters.disk_usage as disk_usage

    def no_inotify() -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(disk_usage, "inotify", no_inotify)
    with Watcher(str(tmp_path), ROOMY) as watcher:
        assert not watcher.take()  # its rescans stay its thread's
