"""A run's change summary (adapters/quota.py Watcher.changes) from the quota watcher's own inotify
events, on real files: what was made (folders made in one go and what they held), changed and
removed while the watch was on, nothing of what happened before it, nothing in ignored folders."""

from __future__ import annotations

import os
from pathlib import Path

from warden.adapters.quota import Watcher
from warden.core.quota import Quota
from warden.core.watching import run_summary

ROOMY = Quota(1 << 40, 10_000_000, 0)


def test_the_summary_lists_what_changed_while_watched(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "old.txt").write_text("x")
    (ws / "kept.txt").write_text("x")
    (ws / "before.txt").write_text("made before the watch")
    with Watcher(str(ws), ROOMY) as watcher:
        watcher.arm(lambda: None)  # as a run's command starts
        (ws / "kept.txt").write_text("changed")
        (ws / "old.txt").unlink()
        os.makedirs(ws / "a" / "b" / "c")
        (ws / "a" / "b" / "c" / "deep.txt").write_text("x")
        (ws / ".git" / "HEAD").write_text("ignored")
        (ws / "tmp").write_text("made and removed")
        (ws / "tmp").unlink()
    assert watcher.changes is not None
    summary = run_summary(watcher.changes)
    assert summary is not None
    assert (summary["added"], summary["modified"], summary["deleted"]) == (4, 1, 1)
    assert set(summary["paths"]) == {"/kept.txt", "/old.txt", "/a", "/a/b", "/a/b/c", "/a/b/c/deep.txt"}  # type: ignore[arg-type]


def test_a_run_that_changes_nothing_has_no_summary(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with Watcher(str(tmp_path), ROOMY) as watcher:
        (tmp_path / "f").read_text()
    assert watcher.changes is not None and run_summary(watcher.changes) is None
