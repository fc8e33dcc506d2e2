"""Building a Node.js env layer with npm, and giving a workspace `node_modules` from it.

Runtime: a template may name bun, but bun's npm package downloads a binary at install time,
which fails where only a package registry is reachable; npm ships with Node.js and never
hard-links from its cache (it extracts tarballs), so the layer is built with `npm install
--ignore-scripts` (no package's install script runs on the host) and its `package-lock.json`
is kept.

Workspace view: `node_modules/` is a real folder of the workspace holding one symlink per
package into the read-only layer (scoped packages get a real `@scope/` folder). Why not
NODE_PATH: ES modules ignore it, and the package.json Warden writes says `"type": "module"`.
Why not one symlink for the whole folder: `npm install` in the workspace would then write
into the layer. Node resolves a symlinked package to its real path, so its own dependencies
are found next to it inside the layer; a bot that replaces a link changes only its own
workspace.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from warden.adapters.envs.interpreters import NodeRuntime
from warden.adapters.envs.layer_store import LayerStore, dir_size
from warden.adapters.envs.progress import Progress, counted
from warden.adapters.safefs.fdtree import open_tree
from warden.core.errors import Unavailable

__all__ = ["build_node_layer", "link_node_modules", "npm_env"]


def npm_env(environ: Mapping[str, str], registry: str = "") -> dict[str, str]:
    env = {k: v for k, v in environ.items() if not k.lower().startswith("npm_config_")}
    env.update({"npm_config_update_notifier": "false", "npm_config_fund": "false",
                "npm_config_audit": "false", "npm_config_ignore_scripts": "true",
                "npm_config_loglevel": "error"})
    if registry:
        env["npm_config_registry"] = registry
    return env


def build_node_layer(store: LayerStore, layer_id: str, *, package_json: str, runtime: NodeRuntime,
                     environ: Mapping[str, str], progress: Progress, registry: str = "",
                     meta: Mapping[str, Any], replace: bool = False) -> dict[str, Any]:
    """Build node layer `layer_id` (no-op when it exists, unless `replace`: a rebuild); returns its layer.json."""
    if runtime.npm is None:
        raise Unavailable("npm is not installed; install it (`apt-get install npm`) to build Node layers")
    with store.build_lock(layer_id):
        if store.exists(layer_id) and not replace:
            return store.read(layer_id) or {}
        started = time.time()
        with store.staging(layer_id) as build:
            (build / "package.json").write_text(package_json)
            deps = json.loads(package_json).get("dependencies", {})
            progress.step(counted(len(deps), "Node package", "Node packages", "installing") + " with npm")
            if deps:
                # Each direct dependency's folder appears as npm puts it in place.
                in_place = lambda: sum((build / "node_modules" / str(name)).is_dir() for name in deps)  # noqa: E731
                with progress.watching(in_place, len(deps), "in place"):
                    proc = subprocess.run([runtime.npm, "install", "--ignore-scripts", "--no-audit", "--no-fund",
                                           "--install-links"],
                                          cwd=build, env=npm_env(environ, registry), capture_output=True,
                                          text=True, timeout=3600, check=False)
                if proc.returncode != 0:
                    lines = (proc.stderr or proc.stdout).strip().splitlines()
                    tail = " | ".join(line.strip() for line in lines[-6:] if line.strip())
                    raise Unavailable(f"npm install failed: {tail or proc.returncode}; check the template's "
                                      "nodejs.dependencies and the npm registry")
            modules = build / "node_modules"
            modules.mkdir(exist_ok=True)
            progress.step("sealing the layer read-only")
            info = {
                "id": layer_id, "kind": "node", "dependencies": deps,
                "node": {"executable": runtime.node, "version": runtime.version},
                # Paths relative to the layer, resolved where it lies (core/layers.py).
                "node_modules": "node_modules", "links": _top_level(modules), "bins": _bins(modules),
                "lock": "package-lock.json" if (build / "package-lock.json").exists() else None,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.time() - started, 2), "size": dir_size(build), **dict(meta),
            }
            return store.commit(build, layer_id, info, replace=replace)


def _top_level(modules: Path) -> list[str]:
    """Package entries to link: `name` or `@scope/name`, hidden npm files skipped."""
    names: list[str] = []
    for entry in sorted(modules.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.name.startswith("@") and entry.is_dir():
            names.extend(f"{entry.name}/{child.name}" for child in sorted(entry.iterdir()))
        else:
            names.append(entry.name)
    return names


def _bins(modules: Path) -> dict[str, str]:
    """`.bin` entries as targets relative to the layer (`node_modules/…`); one that leads out of
    node_modules is left out."""
    bins: dict[str, str] = {}
    bin_dir = modules / ".bin"
    if bin_dir.is_dir():
        for entry in sorted(bin_dir.iterdir()):
            if entry.is_symlink():
                target = os.path.normpath(os.path.join("node_modules/.bin", os.readlink(entry)))
                if target.startswith("node_modules/"):
                    bins[entry.name] = target
    return bins


def link_node_modules(workspace: Path, info: Mapping[str, Any]) -> int:
    """Make `workspace/node_modules` point into the layer; existing real entries are kept."""
    root = str(info["node_modules"])
    made = 0
    with open_tree(workspace) as ws, ws.subdir("node_modules") as modules:
        for name in info.get("links", []):
            if "/" in name:
                scope, pkg = name.split("/", 1)
                with modules.subdir(scope) as scope_dir:
                    if not scope_dir.exists(pkg):
                        scope_dir.symlink(f"{root}/{name}", pkg)
                        made += 1
            elif not modules.exists(name):
                modules.symlink(f"{root}/{name}", name)
                made += 1
        bins = info.get("bins", {})
        if bins:
            with modules.subdir(".bin") as bin_dir:
                for name, target in bins.items():
                    if not bin_dir.exists(name):
                        bin_dir.symlink(target, name)
    return made
