"""Workspace health (seed 001's fields plus the layer) and repair.

Checks run on the host without executing anything from the workspace: a bot controls its
venv (a `.pth` file there runs code in any interpreter that starts on it), so presence of
packages is read from their metadata files (`importlib.metadata` over the thin venv and
the layer), never by importing them with the workspace's Python outside the sandbox.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.core.errors import Unavailable
from warden.core.workspaces import WorkspaceRecord

if TYPE_CHECKING:
    from warden.services.layers import LayerService, Resolution
    from warden.services.workspaces import WorkspaceService

__all__ = ["HealthService"]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: Iterable[str]) -> list[str]:
    """Distribution names of PEP 508 requirement strings."""
    names = []
    for req in requirements:
        match = _NAME.match(req)
        if match:
            names.append(match.group(1))
    return names


def installed_distributions(sites: list[tuple[str, str]]) -> set[str]:
    """Normalized names of distributions whose metadata lies in `sites`, (root, folder beneath
    it) pairs (nothing is imported).

    The metadata is the bot's to shape, so it is read beneath its root without following links
    or blocking (adapters/hostread), not through importlib.metadata.
    """
    from warden.adapters.hostread import read_small, regular_dirs

    found = set()
    for root, site in sites:
        for folder in regular_dirs(root, site, ".dist-info"):
            data = read_small(root, f"{site}/{folder}/METADATA", 1 << 20)
            for line in (data or b"").decode("utf-8", "replace").splitlines():
                if not line.strip():
                    break  # the headers end at the first blank line
                key, _, value = line.partition(":")
                if key.strip().lower() == "name" and value.strip():
                    found.add(_norm(value.strip()))
                    break
    return found


def disk_usage(root: Path) -> int:
    """Bytes used by the files of a workspace (links not followed, so layers are not counted)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total


class HealthService:
    """`warden health NAME [--repair]`."""

    def __init__(self, workspaces: WorkspaceService, layers: LayerService) -> None:
        self._workspaces = workspaces
        self._layers = layers

    # -- check -----------------------------------------------------------------------------
    def check(self, record: WorkspaceRecord) -> dict[str, Any]:
        """Seed 001's health report, plus the layer's state."""
        from warden.adapters.envs.thin_venv import read_layer_site
        from warden.services.workspaces import CONFIGURED_MARKER, layer_ids

        path = Path(record.path)
        issues: list[str] = []
        report: dict[str, Any] = {
            "name": record.name, "status": record.status, "path": record.path, "configured": False,
            "python_venv": False, "python_deps_installed": None, "python_missing": [],
            "node_modules": None, "node_deps_installed": None, "node_missing": [],
            "layers": [], "disk_usage": 0, "issues": issues,
        }
        if not path.is_dir():
            issues.append("workspace folder missing" + (" (archived: `warden unarchive` it)"
                                                       if record.status == "archived" else ""))
            report["healthy"] = False
            return report
        report["configured"] = (path / CONFIGURED_MARKER).is_file()
        if not report["configured"]:
            issues.append("Workspace not configured (.workspace_configured missing)")
        for layer_id in layer_ids(record):
            info = self._layers.store.read(str(layer_id))
            entry = {"id": layer_id, "present": info is not None, "read_only": False}
            if info is not None:
                mode = os.stat(self._layers.store.path(str(layer_id))).st_mode
                entry["read_only"] = not stat.S_IMODE(mode) & 0o222
                if not entry["read_only"]:
                    issues.append(f"layer {layer_id} is writable")
                entry["intact"] = not self._layers.store.tampered(str(layer_id))
                if not entry["intact"]:
                    issues.append(f"layer {layer_id} was changed since it was built (repair rebuilds it)")
            else:
                issues.append(f"layer {layer_id} missing (repair rebuilds it)")
            report["layers"].append(entry)

        venv = path / ".venv"
        wants_python = bool(record.meta.get("python_venv"))
        if wants_python:
            cfg = venv / "pyvenv.cfg"
            python = venv / "bin" / "python"
            report["python_venv"] = (not venv.is_symlink() and cfg.is_file() and not cfg.is_symlink()
                                     and os.path.exists(python))
            if not report["python_venv"]:
                issues.append("Python venv missing or damaged")
            else:
                layer_site = read_layer_site(path)
                from warden.adapters.hostread import regular_dirs

                sites = [(str(path), f".venv/lib/{lib}/site-packages")
                         for lib in regular_dirs(path, ".venv/lib", "") if lib.startswith("python3.")]
                from warden.core.paths import normalize, within

                layer_site = normalize(layer_site) if layer_site and layer_site.startswith("/") else layer_site
                if layer_site and not within(layer_site, _strings(record.meta.get("ro_paths"))):
                    # The .pth is the bot's to write: a folder that is not one of the workspace's
                    # layers is never read on its word.
                    issues.append("the venv names a folder that is not its layer")
                    layer_site = None
                if layer_site:
                    sites.append((layer_site, ""))
                    if not os.path.isdir(layer_site):
                        issues.append("the venv names a layer that is gone")
                elif any(i.startswith("py") for i in layer_ids(record)):
                    issues.append("the venv does not link its layer")
                wanted = requirement_names(self._pyproject_deps(path))
                have = installed_distributions(sites)
                missing = [n for n in wanted if _norm(n) not in have]
                report["python_missing"] = missing
                report["python_deps_installed"] = not missing
                if missing:
                    issues.append(f"Python packages missing: {', '.join(missing)}")

        node_deps = self._package_deps(path)
        modules = path / "node_modules"
        if node_deps or record.meta.get("node"):
            report["node_modules"] = modules.is_dir() and not modules.is_symlink()
            if node_deps:
                missing = [n for n in node_deps if not (modules / n / "package.json").exists()]
                report["node_missing"] = missing
                report["node_deps_installed"] = report["node_modules"] and not missing
                if not report["node_modules"]:
                    issues.append("node_modules missing")
                elif missing:
                    issues.append(f"Node packages missing: {', '.join(missing)}")
        report["disk_usage"] = disk_usage(path)
        report["healthy"] = not issues
        return report

    @staticmethod
    def _pyproject_deps(path: Path) -> list[str]:
        from warden.adapters.hostread import read_small

        raw = read_small(path, "pyproject.toml")
        if raw is None:
            return []
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            return []
        deps = data.get("project", {}).get("dependencies", [])
        return [d for d in deps if isinstance(d, str)]

    @staticmethod
    def _package_deps(path: Path) -> list[str]:
        from warden.adapters.hostread import read_small

        raw = read_small(path, "package.json")
        if raw is None:
            return []
        try:
            data = json.loads(raw)
        except ValueError:
            return []
        deps = data.get("dependencies", {}) if isinstance(data, dict) else {}
        return [k for k in deps if isinstance(k, str)] if isinstance(deps, dict) else []

    # -- repair ----------------------------------------------------------------------------
    def repair(self, record: WorkspaceRecord, *, install: Any = None) -> dict[str, Any]:
        """Fix what can be fixed; `install(record, packages, node)` reinstalls missing packages."""
        from warden.adapters.atomic import write_atomic
        from warden.services.workspaces import CONFIGURED_MARKER, layer_ids, metadata_json

        path = Path(record.path)
        fixed: list[str] = []
        failed: list[str] = []
        if not path.is_dir():
            failed.append("the workspace folder is gone: `warden unarchive` it if archived, else "
                          "`warden destroy` it and create it again")
            return {"fixed": fixed, "failed": failed, "health": self.check(record)}
        before = self.check(record)
        try:
            resolution = self._resolution(record)
        except Exception as exc:  # the template may be gone or invalid
            failed.append(f"cannot resolve template {record.template!r}: {getattr(exc, 'message', exc)}")
            resolution = None
        if resolution is not None:
            for layer in before["layers"]:
                if layer.get("present") and layer.get("intact") is False:
                    # Changed by hand since it was built: it goes, and is built again below.
                    self._layers.store.remove(str(layer["id"]))
            missing_layers = self._layers.missing(resolution)
            try:
                infos = self._layers.ensure(resolution, progress=True)
                if missing_layers:
                    fixed.append(f"rebuilt layers {', '.join(missing_layers)}")
                done = self._workspaces.populate(path, resolution, infos)
                fixed.append("re-linked " + " and ".join(done) if done else "rewrote the project files")
                new_layers = resolution.layer_ids
                if new_layers != layer_ids(record):
                    meta = {**record.meta, **self._workspaces.env_meta(resolution, infos, path)}
                    self._workspaces.set_status(record.name, record.status, meta=meta,
                                                action="workspace.relayer", detail={"layers": new_layers})
                    record = self._workspaces.get(record.name)
                    fixed.append(f"moved to layers {', '.join(new_layers)}")
            except Unavailable as exc:
                failed.append(exc.message)
        write_atomic(path / ".workspace.json", metadata_json(record))
        after = self.check(record)
        wanted_py, wanted_node = after["python_missing"], after["node_missing"]
        for packages, node in ((wanted_py, False), (wanted_node, True)):
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
        if not after["configured"] and not [i for i in after["issues"] if "configured" not in i]:
            write_atomic(path / CONFIGURED_MARKER, b"repaired\n")
            fixed.append("marked configured")
            after = self.check(record)
        for issue in after["issues"]:
            if issue not in failed:
                failed.append(issue)
        return {"fixed": fixed, "failed": failed, "before": before["issues"], "health": after}

    def _resolution(self, record: WorkspaceRecord) -> Resolution:
        source = str(record.meta.get("template_source") or "")
        ref = source if source.startswith("/") and os.path.exists(source) else record.template
        python = str(record.meta["python"]).rsplit(".", 1)[0] if record.meta.get("python") else None
        node = str(record.meta["node"]).split(".")[0] if record.meta.get("node") else None
        return self._layers.resolve(ref, python=python, node=node)


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else []
