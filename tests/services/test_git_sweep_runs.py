"""Runs in a big workspace, one process after another in it (an API server, a Python program):
the git sweeps around each run list only what changed since the last one
(adapters/gitguard.scan_again), and still move aside whatever a bot plants, at any depth."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from warden.adapters import gitguard
from warden.bootstrap import App

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_what_a_bot_plants_deep_in_a_big_workspace_is_moved_aside_by_sweeps_of_what_changed(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Path(app.workspaces.create("bigws").path)
    for i in range(2000):
        folder = ws / "node_modules" / f"p{i // 50}" / f"lib{i % 50}"
        folder.mkdir(parents=True)
        (folder / "index.js").touch()
    incremental: list[int] = []
    update = gitguard._update

    def counting(*args: object, **kwargs: object) -> None:
        incremental.append(1)
        update(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gitguard, "_update", counting)
    for _ in range(2):  # the first run gives its watched tree back, the second keeps it
        assert app.runs.run("bigws", ["true"], timeout=60, actor="bot:b1").exit_code == 0
    planted = app.runs.run("bigws", ["sh", "-c", "mkdir -p node_modules/p3/lib7/x/.git "
                                     "&& printf 'gitdir: /tmp\\n' > node_modules/p30/lib2/.GIT "
                                     "&& mkdir node_modules/p9/lib9/refs && touch node_modules/p9/lib9/HEAD"],
                           timeout=60, actor="bot:b1")
    assert planted.exit_code == 0, planted.stderr
    assert incremental, "the sweeps listed everything again"
    assert not (ws / "node_modules/p3/lib7/x/.git").exists()
    assert not (ws / "node_modules/p30/lib2/.GIT").exists()
    assert not (ws / "node_modules/p9/lib9/HEAD").exists()
    assert list(ws.glob("node_modules/p3/lib7/x/.git.warden-quarantined-*"))
    assert list(ws.glob("node_modules/p30/lib2/.GIT.warden-quarantined-*"))
    # And the next run's sweeps, also of what changed, leave nothing behind either.
    again = app.runs.run("bigws", ["sh", "-c", "mkdir -p node_modules/p1/lib1/.git"], timeout=60, actor="bot:b1")
    assert again.exit_code == 0, again.stderr
    assert not (ws / "node_modules/p1/lib1/.git").exists()
    assert gitguard.GitGuard(str(ws)).strangers() == []
