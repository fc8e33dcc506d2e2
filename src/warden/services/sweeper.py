"""What crashes leave behind, swept: at the start of `warden serve` and by `warden doctor --fix`.

A process killed mid-way (kill -9, a power cut) leaves what its own clean-up would have
removed: a sandbox it had just started (still running, without its limits), run cgroups,
half-written archives, half-built layers, folders in the trash that the background `rm` never
finished, and runs whose outcome was never written. Each is recognised
by the liveness of the process that made it (pid and start time), so nothing in use is touched.
Folders under the workspaces root that the registry does not know are reported, never removed:
they may be the person's.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.core.errors import WardenError

if TYPE_CHECKING:
    from warden.bootstrap import App

__all__ = ["Sweeper"]

_ARCHIVE_TMP = re.compile(r"\..+\.(\d+)\.tmp")


class Sweeper:
    """Finds and removes what dead processes left behind."""

    def __init__(self, app: App) -> None:
        self._app = app

    def sweep(self, *, dry_run: bool = False) -> dict[str, Any]:
        from warden.adapters.processes import alive
        from warden.adapters.sandbox import cgroups
        from warden.services.workspaces import TRASH, remove_in_background

        app = self._app
        report: dict[str, Any] = {"dry_run": dry_run}
        roots = [str(app.home.root), str(app.root_dir)]
        if dry_run:
            from warden.adapters.processes import orphan_sandboxes

            report["orphan_sandboxes"] = sorted(orphan_sandboxes(roots))
        else:
            from warden.adapters.processes import kill_orphan_sandboxes

            report["orphan_sandboxes"] = kill_orphan_sandboxes(roots)
        report["cgroups"] = [] if dry_run else cgroups.sweep_orphans(cgroups.detect())
        temp: list[str] = []
        archives = app.home.archives
        if archives.is_dir():
            for entry in archives.iterdir():
                match = _ARCHIVE_TMP.fullmatch(entry.name)
                if match and not alive(int(match[1])):
                    temp.append(str(entry))
                    if not dry_run:
                        entry.unlink(missing_ok=True)
        report["temp_files"] = temp
        report["layers"] = 0 if dry_run else app.layers.store.sweep()
        trash = app.root_dir / TRASH
        left = sorted(str(p) for p in trash.iterdir()) if trash.is_dir() else []
        if not dry_run:
            for path in left:
                remove_in_background(Path(path))
        report["trash"] = left
        if dry_run:
            report["lost_runs"] = []
        else:
            with app.db.transaction() as tx:
                report["lost_runs"] = app.runs.mark_lost(tx)
            from warden.adapters.gitguard import GitGuard

            # A run that died never had its git sweep: what its bot left is moved aside now.
            for name in sorted({lost["workspace"] for lost in report["lost_runs"]}):
                with contextlib.suppress(WardenError):
                    GitGuard(app.workspaces.get(name).path).after()
        known = {Path(r.path).name for r in app.workspaces.list()}
        root = app.root_dir
        report["orphan_folders"] = sorted(
            str(root / name) for name in (os.listdir(root) if root.is_dir() else [])
            if name not in known and not name.startswith(".") and (root / name).is_dir())
        return report
