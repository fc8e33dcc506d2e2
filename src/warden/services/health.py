"""Workspace health (the folder, its venv, node_modules, packages and layers) and repair.

Checks run on the host without executing anything from the workspace: a bot controls its
venv (a `.pth` file there runs code in any interpreter that starts on it), so presence of
packages is read from their METADATA files in the thin venv and the layer (bounded reads that
follow no link: the WorkspaceReads port), never by importing them with the workspace's Python
outside the sandbox.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from warden.core.errors import Unavailable, WardenError
from warden.core.paths import normalize, within
from warden.core.ports import WorkspaceReads
from warden.core.templates import normalized_name, requirement_name
from warden.core.workspaces import WorkspaceRecord
from warden.services.folders import FolderService, env_meta, layer_ids

if TYPE_CHECKING:
    from warden.services.layers import LayerService, Resolution
    from warden.services.workspaces import WorkspaceService

__all__ = ["HealthReport", "HealthService", "Installer", "LayerHealth", "RepairResult"]


# Reinstalls `packages` (Node ones when the flag is set) into a workspace, in the sandbox.
Installer = Callable[[WorkspaceRecord, list[str], bool], None]


_METADATA_HEAD = 16 * 1024  # bytes of a METADATA file read for its Name
# A name npm gives a package folder: `name` or `@scope/name` (no `..`, no other `/`).
_NPM_NAME = re.compile(r"(?:@[A-Za-z0-9][\w.~-]*/)?[A-Za-z0-9][\w.~-]*")


def requirement_names(requirements: Iterable[str]) -> list[str]:
    """Distribution names of PEP 508 requirement strings."""
    return [name for name in map(requirement_name, requirements) if name is not None]


@dataclass(frozen=True)
class LayerHealth:
    id: str
    present: bool
    read_only: bool = False
    intact: bool | None = None  # None: not checked (the layer is missing)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "present": self.present, "read_only": self.read_only}
        if self.present:
            data["intact"] = self.intact
        return data


@dataclass(frozen=True)
class HealthReport:
    """What `warden health NAME` reports: the folder, its venv and packages, its layers."""

    name: str
    status: str
    path: str
    configured: bool = False
    python_venv: bool = False
    python_deps_installed: bool | None = None
    python_missing: list[str] = field(default_factory=list)
    node_modules: bool | None = None
    node_deps_installed: bool | None = None
    node_missing: list[str] = field(default_factory=list)
    layers: list[LayerHealth] = field(default_factory=list)
    disk_usage: int = 0
    issues: list[str] = field(default_factory=list)
    # The hand-edited policy files (.warden/zones.yaml, sandbox.json) that cannot be read: every
    # run and file change there is refused until the person fixes them. Kept apart from `issues`,
    # which say whether the environment is whole (resume and unarchive set `broken` by them), as
    # no repair of Warden's may rewrite a person's rules.
    policy: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.issues

    @property
    def usable(self) -> bool:
        """Healthy, and its policy files read: what `warden health` says and exits with."""
        return self.healthy and not self.policy

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "path": self.path, "configured": self.configured,
                "python_venv": self.python_venv, "python_deps_installed": self.python_deps_installed,
                "python_missing": list(self.python_missing), "node_modules": self.node_modules,
                "node_deps_installed": self.node_deps_installed, "node_missing": list(self.node_missing),
                "layers": [layer.to_json() for layer in self.layers], "disk_usage": self.disk_usage,
                "issues": list(self.issues), "policy": list(self.policy), "healthy": self.usable}


@dataclass(frozen=True)
class RepairResult:
    """What `warden health NAME --repair` fixed, what it could not, and the health after."""

    fixed: list[str]
    failed: list[str]
    before: list[str] | None  # the issues found first (None: the folder was gone)
    health: HealthReport

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"fixed": list(self.fixed), "failed": list(self.failed)}
        if self.before is not None:
            data["before"] = list(self.before)
        data["health"] = self.health.to_json()
        return data


class HealthService:
    """`warden health NAME [--repair]`."""

    def __init__(self, workspaces: WorkspaceService, folders: FolderService, layers: LayerService,
                 reads: WorkspaceReads, policy_check: Callable[[WorkspaceRecord], object] | None = None) -> None:
        self._workspaces = workspaces
        self._folders = folders
        self._layers = layers
        self._reads = reads
        # Reads the workspace's zones and path lists as a run does (raising what a run is refused with).
        self._policy_check = policy_check

    # -- check -----------------------------------------------------------------------------
    def check(self, record: WorkspaceRecord) -> HealthReport:
        """The workspace's health, read without running anything of the workspace's."""
        path = record.path
        issues: list[str] = []
        if not self._folders.present(path):
            issues.append("workspace folder missing" + (" (archived: `warden unarchive` it)"
                                                       if record.status == "archived" else ""))
            return HealthReport(record.name, record.status, record.path, issues=issues)
        configured = self._folders.configured(path)
        if not configured:
            issues.append("Workspace not configured (.workspace_configured missing)")
        layers = [self._layer_health(layer_id, issues) for layer_id in layer_ids(record)]
        python_venv, python_installed, python_missing = self._python(record, issues)
        node_modules, node_installed, node_missing = self._node(record, issues)
        return HealthReport(record.name, record.status, record.path, configured=configured,
                            python_venv=python_venv, python_deps_installed=python_installed,
                            python_missing=python_missing, node_modules=node_modules,
                            node_deps_installed=node_installed, node_missing=node_missing, layers=layers,
                            disk_usage=self._reads.disk_usage(path), issues=issues,
                            policy=self._policy_problems(record))

    def _policy_problems(self, record: WorkspaceRecord) -> list[str]:
        if self._policy_check is None:
            return []
        try:
            self._policy_check(record)
        except WardenError as exc:
            return [f"{exc.message}; until it is fixed (by hand: no repair rewrites your rules), every run and "
                    "file change in this workspace is refused"]
        return []

    def _layer_health(self, layer_id: str, issues: list[str]) -> LayerHealth:
        store = self._layers.store
        if store.read(layer_id) is None:
            issues.append(f"layer {layer_id} missing (repair rebuilds it)")
            return LayerHealth(layer_id, False)
        read_only = store.read_only(layer_id)
        if not read_only:
            issues.append(f"layer {layer_id} is writable")
        intact = not store.tampered(layer_id)
        if not intact:
            issues.append(f"layer {layer_id} was changed since it was built (repair rebuilds it)")
        return LayerHealth(layer_id, True, read_only, intact)

    def _python(self, record: WorkspaceRecord, issues: list[str]) -> tuple[bool, bool | None, list[str]]:
        """(venv sound, its packages all there, those missing)."""
        if not record.meta.get("python_venv"):
            return False, None, []
        io, path = self._folders.io, record.path
        venv = os.path.join(path, ".venv")
        sound = (io.kind(venv) != "symlink" and io.kind(os.path.join(venv, "pyvenv.cfg")) == "file"
                 and io.exists(os.path.join(venv, "bin", "python")))
        if not sound:
            issues.append("Python venv missing or damaged")
            return False, None, []
        layer_site = self._reads.layer_site(path)
        sites = [(path, f".venv/lib/{lib}/site-packages")
                 for lib in self._reads.regular_dirs(path, ".venv/lib", "") if lib.startswith("python3.")]
        layer_site = normalize(layer_site) if layer_site and layer_site.startswith("/") else layer_site
        if layer_site and not within(layer_site, _strings(record.meta.get("ro_paths"))):
            # The .pth is the bot's to write: a folder that is not one of the workspace's
            # layers is never read on its word.
            issues.append("the venv names a folder that is not its layer")
            layer_site = None
        if layer_site:
            sites.append((layer_site, ""))
            if not io.is_dir(layer_site):
                issues.append("the venv names a layer that is gone")
        elif any(i.startswith("py") for i in layer_ids(record)):
            issues.append("the venv does not link its layer")
        wanted = requirement_names(self._pyproject_deps(path))
        have = self.installed_distributions(sites)
        missing = [n for n in wanted if normalized_name(n) not in have]
        if missing:
            issues.append(f"Python packages missing: {', '.join(missing)}")
        return True, not missing, missing

    def _node(self, record: WorkspaceRecord, issues: list[str]) -> tuple[bool | None, bool | None, list[str]]:
        """(node_modules a real folder, its packages all there, those missing); None: not a Node workspace."""
        node_deps = self._package_deps(record.path)
        if not (node_deps or record.meta.get("node")):
            return None, None, []
        io = self._folders.io
        modules = os.path.join(record.path, "node_modules")
        real = io.kind(modules) == "dir"
        if not node_deps:
            return real, None, []
        # The names are the bot's (package.json), and so is node_modules: each package.json is
        # looked for beneath the workspace, no link followed (`../..` in a name, or a package
        # folder linked to one of the host's, told whether a host file exists).
        found = self._reads.read_heads(record.path, (f"node_modules/{n}/package.json" for n in node_deps), 0)
        missing = [n for n, head in zip(node_deps, found, strict=True) if head is None]
        # A package of the workspace's Node layer is a link Warden made into that layer
        # (adapters/envs/node_layer.py): looked for in the layer itself, beneath its own folder,
        # the bot's link never followed; only for a name npm could have made (no `..`, no `/`
        # but a scope's).
        # Which are links is read beneath the workspace too: a test of each path (lstat) followed a
        # node_modules, or an @scope, the bot had linked to a host folder, and whether the layer's
        # package then counted as missing told whether that host folder holds a link of its name.
        links: dict[str, list[str]] = {}

        def is_link(name: str) -> bool:
            folder, _, base = f"node_modules/{name}".rpartition("/")
            if folder not in links:
                links[folder] = self._reads.links_in(record.path, folder)
            return base in links[folder]

        linked = [n for n in missing if _NPM_NAME.fullmatch(n) and is_link(n)]
        node_layers = [p for p in _strings(record.meta.get("ro_paths")) if os.path.basename(p).startswith("node")]
        for layer in node_layers if linked else ():  # (not the Python interpreter's prefix beside them)
            heads = self._reads.read_heads(layer, (f"node_modules/{n}/package.json" for n in linked), 0)
            there = {n for n, head in zip(linked, heads, strict=True) if head is not None}
            missing = [n for n in missing if n not in there]
            linked = [n for n in linked if n not in there]
        if not real:
            issues.append("node_modules missing")
        elif missing:
            issues.append(f"Node packages missing: {', '.join(missing)}")
        return real, real and not missing, missing

    def installed_distributions(self, sites: list[tuple[str, str]]) -> set[str]:
        """Normalized names of distributions whose metadata lies in `sites`, (root, folder beneath
        it) pairs (nothing is imported).

        The metadata is the bot's to shape, so it is read beneath its root without following links
        or blocking (the WorkspaceReads port), not through importlib.metadata.
        """
        found = set()
        for root, site in sites:
            folders = self._reads.regular_dirs(root, site, ".dist-info")
            # Its headers, which come first (Name second, after Metadata-Version): a bot's 5,000
            # folders each with a hard link to one 1 MiB METADATA, read whole, made `warden
            # health` (and resume) take 31 s; 500,000 (workspace.max_files) an hour. And all of
            # a site's beneath one open of its root: opening one per folder (0.6 ms) was minutes.
            for data in self._reads.read_heads(root, (f"{site}/{folder}/METADATA" for folder in folders),
                                               _METADATA_HEAD):
                headers = (data or b"").split(b"\n\n", 1)[0]
                for line in headers.decode("utf-8", "replace").splitlines():
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    if key.strip().lower() == "name" and value.strip():
                        found.add(normalized_name(value.strip()))
                        break
        return found

    def _pyproject_deps(self, path: str) -> list[str]:
        raw = self._reads.read_small(path, "pyproject.toml")
        if raw is None:
            return []
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
            return []
        # The workspace's file, any shape a bot gave it: `project = 1` or `dependencies = 5` made
        # every health check of the workspace (`warden resume`, `health --all`) an internal error.
        project = data.get("project")
        deps = project.get("dependencies") if isinstance(project, dict) else None
        return [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []

    def _package_deps(self, path: str) -> list[str]:
        raw = self._reads.read_small(path, "package.json")
        if raw is None:
            return []
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # the workspace's file: anything a bot wrote, `[[[[…` too
            return []
        deps = data.get("dependencies", {}) if isinstance(data, dict) else {}
        return [k for k in deps if isinstance(k, str)] if isinstance(deps, dict) else []

    # -- repair ----------------------------------------------------------------------------
    def repair(self, record: WorkspaceRecord, *, install: Installer | None = None) -> RepairResult:
        """Fix what can be fixed; `install(record, packages, node)` reinstalls missing packages."""
        path = record.path
        fixed: list[str] = []
        failed: list[str] = []
        if not self._folders.present(path):
            failed.append("the workspace folder is gone: `warden unarchive` it if archived, else "
                          "`warden destroy` it and create it again")
            return RepairResult(fixed, failed, None, self.check(record))
        before = self.check(record)
        try:
            resolution: Resolution | None = self._resolution(record)
        except Exception as exc:  # the template may be gone or invalid
            failed.append(f"cannot resolve template {record.template!r}: {getattr(exc, 'message', exc)}")
            resolution = None
        if resolution is not None:
            record = self._relink(record, resolution, before, fixed, failed)
        self._folders.write_metadata(record)
        after = self.check(record)
        for packages, node in ((after.python_missing, False), (after.node_missing, True)):
            if not packages:
                continue
            if install is None:
                failed.append(f"cannot reinstall {', '.join(packages)}: no sandboxed installer here")
                continue
            try:
                install(record, packages, node)
                fixed.append(f"reinstalled {', '.join(packages)}")
            except Exception as exc:
                failed.append(f"reinstalling {', '.join(packages)} failed: {getattr(exc, 'message', exc)}")
        after = self.check(record)
        if not after.configured and not [i for i in after.issues if "configured" not in i]:
            self._folders.mark_configured(path, "repaired\n")
            fixed.append("marked configured")
            after = self.check(record)
        for issue in after.issues:
            if issue not in failed:
                failed.append(issue)
        return RepairResult(fixed, failed, list(before.issues), after)

    def _relink(self, record: WorkspaceRecord, resolution: Resolution, before: HealthReport,
                fixed: list[str], failed: list[str]) -> WorkspaceRecord:
        """Rebuild missing or changed layers and write the venv, node_modules and project files
        again; the record as it is after (moved to new layers when the template's changed)."""
        for layer in before.layers:
            if layer.present and layer.intact is False:
                # Changed by hand since it was built: it goes, and is built again below.
                self._layers.store.remove(layer.id)
        missing_layers = self._layers.missing(resolution)
        # Held until the row names them (a prune passes over them meanwhile), as create does.
        with self._layers.store.hold(resolution.layer_ids):
            return self._relink_held(record, resolution, before, missing_layers, fixed, failed)

    def _relink_held(self, record: WorkspaceRecord, resolution: Resolution, before: HealthReport,
                     missing_layers: list[str], fixed: list[str], failed: list[str]) -> WorkspaceRecord:
        try:
            layers = self._layers.ensure(resolution, progress=True)
            if missing_layers:
                fixed.append(f"rebuilt layers {', '.join(missing_layers)}")
            done = self._folders.populate(record.path, resolution, layers)
            if before.issues or missing_layers:
                # Written again on a healthy workspace too (the check reads no link's target), but
                # said only when it may have mended something: "fixed" on a healthy one misled.
                fixed.append("re-linked " + " and ".join(done) if done else "rewrote the project files")
            new_layers = resolution.layer_ids
            if new_layers != layer_ids(record):
                meta = {**record.meta, **env_meta(resolution, layers, record.path)}
                self._workspaces.set_status(record.name, record.status, meta=meta,
                                            action="workspace.relayer", detail={"layers": new_layers})
                record = self._workspaces.get(record.name)
                fixed.append(f"moved to layers {', '.join(new_layers)}")
        except Unavailable as exc:
            failed.append(exc.message)
        return record

    def _resolution(self, record: WorkspaceRecord) -> Resolution:
        source = str(record.meta.get("template_source") or "")
        ref = source if source.startswith("/") and self._folders.io.exists(source) else record.template
        python = str(record.meta["python"]).rsplit(".", 1)[0] if record.meta.get("python") else None
        node = str(record.meta["node"]).split(".")[0] if record.meta.get("node") else None
        return self._layers.resolve(ref, python=python, node=node)


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else []
