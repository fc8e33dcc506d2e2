"""What crashes leave behind, swept: at the start of `warden serve` and by `warden doctor --fix`.

A process killed mid-way (kill -9, a power cut) leaves what its own clean-up would have
removed: a sandbox it had just started (still running, without its limits), run cgroups,
half-written archives, whole archives no row names (copies of workspaces still there),
half-built layers, a write's temporary file in a workspace, folders in the trash that the
background `rm` never finished, git's scratch (a clone, a checkout, an index) in a
workspace's `.warden/`, and runs whose outcome was never written. Each is recognised by the
liveness of the process that made it (pid and start time), or by its workspace's lease, so
nothing in use is touched. Folders under the workspaces root that the registry does not know
are reported, never removed: they may be the person's — but for the folder of a destroyed
workspace whose destroy was killed after its row went and before its folder moved to the trash:
its `.workspace.json` names the id the audit's `workspace.destroy` event of that name recorded
(written with the row's removal), so it is finished, moved to the trash as the destroy would have.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.core.errors import WardenError
from warden.core.runs import RunInProgress

if TYPE_CHECKING:
    from warden.core.ports import GitGuards, Leftovers, Processes, Registry, RunCgroups
    from warden.services.layers import LayerService
    from warden.services.live import LiveSandboxService
    from warden.services.runs_in_progress import RunsInProgress
    from warden.services.workspaces import WorkspaceService

__all__ = ["SweepReport", "Sweeper"]


def _epoch(at: str) -> float:
    """An audit event's time (ISO 8601) as seconds since the epoch; 0 when it is not one."""
    try:
        return datetime.fromisoformat(at).timestamp()
    except ValueError:
        return 0.0


# How many of the newest events about a name are searched for its destroy (the name's events
# after its destroy are refusals at most: a create of it is refused while the folder is there).
_DESTROY_LOOKBACK = 500


@dataclass(frozen=True)
class SweepReport:
    """What a sweep found (a dry run) or removed."""

    dry_run: bool
    orphan_sandboxes: tuple[int, ...]  # pids of sandboxes a dead Warden left running (killed)
    cgroups: tuple[str, ...]  # run cgroups removed (none in a dry run)
    temp_files: tuple[str, ...]  # half-written archives, temporary files in the home and in workspaces
    layers: int  # half-built layers removed (a dry run: found)
    trash: tuple[str, ...]  # trashed folders whose removal was never finished (restarted)
    lost_runs: tuple[RunInProgress, ...]  # runs whose outcome was never written (audited run.lost)
    orphan_folders: tuple[str, ...]  # folders of the workspaces root no workspace owns (left alone)
    git_scratch: tuple[str, ...] = ()  # scratch of git operations a dead Warden left in workspaces' .warden/
    stale_archives: tuple[str, ...] = ()  # whole archives no row names, of workspaces that are still there
    destroyed_folders: tuple[str, ...] = ()  # folders of destroyed workspaces a killed destroy left (trashed)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "orphan_sandboxes": list(self.orphan_sandboxes),
                "cgroups": list(self.cgroups), "temp_files": list(self.temp_files), "layers": self.layers,
                "trash": list(self.trash),
                "lost_runs": [{"run_id": run.run_id, "workspace": run.workspace} for run in self.lost_runs],
                "orphan_folders": list(self.orphan_folders), "git_scratch": list(self.git_scratch),
                "stale_archives": list(self.stale_archives), "destroyed_folders": list(self.destroyed_folders)}


class Sweeper:
    """Finds and removes what dead processes left behind."""

    def __init__(self, *, registry: Registry, workspaces: WorkspaceService, runs: RunsInProgress,
                 layers: Callable[[], LayerService], processes: Processes, cgroups: RunCgroups, git: GitGuards,
                 leftovers: Leftovers, home: Path, root_dir: Path, archives: Path,
                 live: Callable[[], LiveSandboxService] | None = None) -> None:
        self._registry = registry
        self._workspaces = workspaces
        self._runs = runs
        self._layers = layers
        self._processes = processes
        self._cgroups = cgroups
        self._git = git
        self._leftovers = leftovers
        self._home = home
        self._root_dir = root_dir
        self._archives = archives
        self._live = live

    def sweep(self, *, dry_run: bool = False) -> SweepReport:
        roots = [str(self._home), str(self._root_dir)]
        # Live sandboxes outlive the Warden that started them on purpose: those in the registry
        # are no orphans. Each is looked at instead (services/live.py): stopped if it may no
        # longer run, its ended processes recorded.
        keep = self._live().keep() if self._live is not None else set()
        if dry_run:
            sandboxes = sorted(self._processes.orphan_sandboxes(roots, keep))
        else:
            sandboxes = self._processes.kill_orphan_sandboxes(roots, keep)
            if self._live is not None:
                self._live().sweep()
        cgroups = [] if dry_run else self._cgroups.sweep_orphans()
        # Half-written archives, and what a killed writer left in the home itself (`warden
        # backup`'s registry copy, a settings file's atomic write, a new config.toml) and in its
        # keys (a key file made aside: key material, named by nothing), and in each workspace's
        # checkpoint store (a checkpoint's manifest or the store's usage, a rollback's save
        # killed as it wrote them; the next capture never looks there): `.NAME.PID[.TAG].tmp`.
        versions = self._home / "versions"
        stores = [versions / name / sub for name in self._leftovers.folders(str(versions))
                  for sub in ("", "checkpoints")]
        temp = [path for folder in (self._archives, self._home, self._home / "keys", *stores)
                for path, pid in self._leftovers.temp_archives(str(folder)) if not self._processes.alive(pid)]
        trash = self._leftovers.trashed(str(self._root_dir))
        scratch = self._git_scratch()
        in_workspaces = self._workspace_temps()
        if not dry_run:
            for path in temp:
                self._leftovers.remove_scratch(path)  # a file, or the registry copy's folder
            for folder, path in in_workspaces:
                self._leftovers.remove_workspace_temp(folder, path)
            for path in scratch:
                self._leftovers.remove_scratch(path)
            for path in trash:
                self._leftovers.remove_in_background(path)
        temp += [os.path.join(folder, path) for folder, path in in_workspaces]
        orphans = self._orphan_folders()
        destroyed = self._destroyed_folders(orphans)
        if not dry_run:
            destroyed = [path for path in destroyed if self._finish_destroy(path)]
        return SweepReport(dry_run, tuple(sandboxes), tuple(cgroups), tuple(temp),
                           self._layers().store.sweep(dry_run=dry_run), tuple(trash),
                           () if dry_run else self._lost_runs(), tuple(p for p in orphans if p not in destroyed),
                           tuple(scratch), self._stale_archives(dry_run), tuple(destroyed))

    def _finish_destroy(self, path: str) -> bool:
        """Move the folder of a destroyed workspace to the trash, under its name's exclusive lease:
        a destroy still running holds it (and moves the folder itself); one killed holds it no more."""
        written = self._workspaces.folders.written_id(path)
        try:
            with self._workspaces.lease(Path(path).name, "exclusive", "sweep"):
                if written is None or self._workspaces.folders.written_id(path) != written:
                    return False  # moved meanwhile: by its destroy
                if any(record.path == path for record in self._workspaces.list()):
                    return False  # a workspace's again (restored from its archive meanwhile)
                self._workspaces.trash(path)
                return True
        except (WardenError, OSError):
            return False  # busy, or not movable now: the next sweep looks again

    def _destroyed_folders(self, orphans: tuple[str, ...]) -> list[str]:
        """The folders among `orphans` whose workspace was destroyed (the audit's event of its
        name holds the id their `.workspace.json` names) and would have gone to the trash: a
        destroy killed between its row's removal and the folder's move. The event is written in
        the transaction that removed the row, so it is there exactly when the destroy happened;
        a bot cannot write the audit log, and a folder with a live row is no orphan."""
        found = []
        for path in orphans:
            written = self._workspaces.folders.written_id(path)
            if written is None:
                continue
            try:
                with self._registry.transaction(write=False) as tx:
                    events = tx.audit.newest(target=Path(path).name, limit=_DESTROY_LOOKBACK)
            except WardenError:
                continue
            changed = self._workspaces.folders.changed_at(path)
            for stored in events:
                event = stored.to_event()
                if (event.action == "workspace.destroy" and event.detail.get("id") == written
                        and event.detail.get("folder_trashed") is True
                        and changed is not None and changed <= _epoch(event.at) + 1):
                    # Untouched since the destroy: a copy made later (a person putting back the
                    # workspace's files by hand, `cp -a` and all) is a newer folder, left alone.
                    found.append(path)
                    break
        return found

    def _stale_archives(self, dry_run: bool) -> tuple[str, ...]:
        """Whole archives that no row names, of workspaces whose folder is back: an archive killed
        between its archive's rename into archives/ and its status write, or an unarchive killed
        after its status write and before the archive's removal. Each kept its size in the home
        for good. Each is looked at under its workspace's exclusive lease, which an archive or
        unarchive in flight holds (so its archive is never taken for a stale one: one busy now is
        looked at again at the next sweep). A name with no row is left alone: a destroyed copy
        whose record beside it is missing is still someone's way back."""
        shelf = self._workspaces.shelf
        stale = []
        for name, archive in shelf.unrecorded():
            try:
                self._workspaces.get(name)  # first: no lease row is made for a name no workspace has
                with contextlib.nullcontext() if dry_run else self._workspaces.lease(name, "exclusive", "sweep"):
                    record = self._workspaces.get(name)
                    if record.meta.get("archive") == archive or not self._workspaces.folders.holds(record):
                        continue  # its own, or the only copy there may be of a folder gone
                    if not dry_run:
                        shelf.drop(archive)
            except (WardenError, OSError):
                continue  # in use, no row, a name no workspace may have, or not removable now
            stale.append(archive)
        return tuple(stale)

    def _git_scratch(self) -> list[str]:
        """Scratch of git operations (adapters/git.py) in each workspace's `.warden/` whose Warden
        process is gone: a clone killed mid-way can leave a whole repository there."""
        found: list[str] = []
        for record in self._workspaces.list():
            if record.status in ("archived", "destroyed"):
                continue  # no folder to look in
            found += [path for path, pid in self._leftovers.git_scratch(record.path) if not self._processes.alive(pid)]
        return found

    def _workspace_temps(self) -> list[tuple[str, str]]:
        """Temporary files of atomic writes and rollbacks in each workspace whose Warden process
        is gone (a write killed before its rename): (workspace folder, relative path)."""
        found: list[tuple[str, str]] = []
        for record in self._workspaces.list():
            if record.status in ("archived", "destroyed"):
                continue
            found += [(record.path, path) for path, pid, started in self._leftovers.workspace_temps(record.path)
                      if not self._processes.alive(pid, started)]
        return found

    def _lost_runs(self) -> tuple[RunInProgress, ...]:
        with self._registry.transaction() as tx:
            lost = self._runs.mark_lost(tx)
        # A run that died never had its git sweep: what its bot left is moved aside now.
        for name in sorted({run.workspace for run in lost}):
            with contextlib.suppress(WardenError):
                self._git.workspace(self._workspaces.get(name).path).after()
        return tuple(lost)

    def _orphan_folders(self) -> tuple[str, ...]:
        known = {Path(record.path).name for record in self._workspaces.list()}
        return tuple(sorted(str(self._root_dir / name) for name in self._leftovers.folders(str(self._root_dir))
                            if name not in known))
