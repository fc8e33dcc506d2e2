"""Env layers (the user's "snapshots"): resolve a template to layer ids, build, list, prune.

A layer id is a hash of what its content depends on: the template's dependencies, the
interpreter (version, path, platform) or Node.js major, and the builder version. Resolving
a template (parse YAML, find the interpreter) costs tens of milliseconds, so its result is
cached in `layers/_resolved/` keyed by the template file's path, mtime and size and the
overrides; creating a workspace from a built layer then parses no YAML and runs no program.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.adapters.atomic import write_atomic
from warden.adapters.envs.layer_store import LayerStore
from warden.adapters.envs.progress import Progress
from warden.core.errors import InvalidInput
from warden.core.settings import Settings
from warden.core.templates import Template, package_json, pyproject_toml, template_from_json

if TYPE_CHECKING:
    from warden.adapters.envs.interpreters import Interpreter
    from warden.adapters.envs.python_layer import Execute, IndexOptions

__all__ = ["LayerService", "Resolution"]

RESOLVER_VERSION = "1"
Rows = list[dict[str, Any]]
_XY = ("3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Resolution:
    """A template bound to this machine: its layers and the files it puts in a workspace."""

    template: Template
    python: Mapping[str, Any] | None  # {"layer_id", "interpreter": {...}}
    node: Mapping[str, Any] | None  # {"layer_id" | None, "runtime": {...}}

    @property
    def layer_ids(self) -> list[str]:
        ids = [self.python["layer_id"] if self.python else None, self.node["layer_id"] if self.node else None]
        return [i for i in ids if i]

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template.to_json(), "python": self.python, "node": self.node}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Resolution:
        return cls(template_from_json(data["template"]), data.get("python"), data.get("node"))

    def pyproject(self) -> str | None:
        if self.python is None:
            return None
        return pyproject_toml(self.template, self.python["interpreter"]["version"].rsplit(".", 1)[0])

    def package_json(self) -> str | None:
        return package_json(self.template) if self.template.node is not None else None


class LayerService:
    """Templates → layers on disk, built once and shared read-only."""

    def __init__(self, layers_dir: Path, templates_dir: Path, settings: Settings,
                 environ: Mapping[str, str], *, cache_dir: Path) -> None:
        self.store = LayerStore(layers_dir)
        self.cache_dir = cache_dir
        self.templates_dir = templates_dir
        self._settings = settings
        self._environ = environ
        self._cache_dir = layers_dir / "_resolved"

    @property
    def catalog(self) -> Any:
        from warden.services.templates import TemplateCatalog

        return TemplateCatalog(self.templates_dir)

    # -- resolving ---------------------------------------------------------------------------
    def resolve(self, ref: str | None, *, python: str | None = None, node: str | None = None) -> Resolution:
        """Bind template `ref` (default from settings) to interpreter and layer ids; cached."""
        if python is not None and python not in _XY:
            raise InvalidInput(f"bad --python {python!r}: write X.Y such as 3.12")
        if node is not None and not (node.isdigit() and len(node) <= 3):
            raise InvalidInput(f"bad --node {node!r}: write a major version such as 20")
        ref = ref or self._settings.get_str("workspace.default_template")
        located = self.catalog.locate(ref)
        key = _digest([RESOLVER_VERSION, located.stamp, python, node])
        cached = self._read_cache(key)
        if cached is not None:
            return cached
        template = self.catalog.parse(located)
        resolution = self._bind(template, python, node)
        write_atomic(self._cache_dir / f"{key}.json", json.dumps(resolution.to_json()).encode())
        return resolution

    def _read_cache(self, key: str) -> Resolution | None:
        try:
            data = json.loads((self._cache_dir / f"{key}.json").read_bytes())
            resolution = Resolution.from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        # An interpreter removed since: resolve again (and fail clearly if it is gone for good).
        if resolution.python and not os.path.exists(resolution.python["interpreter"]["executable"]):
            return None
        return resolution

    def _bind(self, template: Template, python: str | None, node: str | None) -> Resolution:
        from warden.adapters.envs.interpreters import find_node, find_python
        from warden.adapters.envs.python_layer import BUILDER_VERSION

        py = None
        if template.python is not None or python is not None:
            deps = list(template.python.dependencies) if template.python else []
            wanted = python or (template.python.version if template.python else None)
            interp = find_python(wanted, self._environ, at_least=python is None)
            layer_id = f"py{interp.xy}-" + _digest({
                "kind": "python", "builder": BUILDER_VERSION, "deps": sorted(deps),
                "python": interp.version, "implementation": interp.implementation,
                "executable": interp.executable, "platform": interp.platform})
            py = {"layer_id": layer_id, "interpreter": interp.to_json()}
        nd = None
        if template.node is not None or node is not None:
            major = node or (template.node.version if template.node else None)
            runtime = find_node(major, self._environ)
            deps_map = dict(template.node.dependencies) if template.node else {}
            node_layer: str | None = None
            if deps_map:
                node_layer = f"node{runtime.major}-" + _digest({
                    "kind": "node", "deps": deps_map, "node": runtime.major, "machine": os.uname().machine})
            nd = {"layer_id": node_layer, "runtime": {"node": runtime.node, "npm": runtime.npm,
                                                    "version": runtime.version}}
        return Resolution(template, py, nd)

    # -- building ----------------------------------------------------------------------------
    def missing(self, resolution: Resolution) -> list[str]:
        return [i for i in resolution.layer_ids if not self.store.exists(i)]

    def ensure(self, resolution: Resolution, *, progress: bool = True) -> dict[str, dict[str, Any]]:
        """The layers of `resolution`, building those not yet on disk (with a progress bar)."""
        infos: dict[str, dict[str, Any]] = {}
        if resolution.python:
            infos["python"] = self._ensure_python(resolution, progress)
        if resolution.node and resolution.node.get("layer_id"):
            infos["node"] = self._ensure_node(resolution, progress)
        return infos

    def _ensure_python(self, resolution: Resolution, progress: bool) -> dict[str, Any]:
        assert resolution.python is not None
        layer_id = resolution.python["layer_id"]
        info = self.store.read(layer_id)
        if info is not None:
            return info
        from warden.adapters.envs.interpreters import Interpreter, uv_binary
        from warden.adapters.envs.python_layer import build_python_layer

        interp = Interpreter(**resolution.python["interpreter"])
        deps = list(resolution.template.python.dependencies) if resolution.template.python else []
        bar = Progress(f"building Python layer {layer_id} for template {resolution.template.name}", 4,
                       enabled=progress)
        uv = uv_binary()
        index = self.index_options()
        info = build_python_layer(self.store, layer_id, dependencies=deps, interpreter=interp, uv=uv,
                                  index=index, execute=self._sandboxed(interp, uv, index),
                                  cache_dir=self.cache_dir / "uv", progress=bar,
                                  meta={"template": resolution.template.name})
        bar.finish()
        return info

    def _sandboxed(self, interp: Interpreter, uv: str, index: IndexOptions) -> Execute:
        """How the layer's uv commands run: in the sandbox, seeing the interpreter, uv, the
        find-links folders and the cache, reaching the package indexes only (none with no_index)."""
        from warden.adapters.sandbox.tools import run_tool

        ro = [interp.prefix, os.path.dirname(interp.executable), os.path.realpath(uv),
              *(link for link in index.find_links if link.startswith("/"))]
        domains = [] if index.no_index else self._settings.get_list("envs.install_domains")

        def execute(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple[int, str, str]:
            outcome = run_tool(cwd, argv, env=env, caller_env=self._environ, ro_paths=ro,
                               rw_paths=[env["UV_CACHE_DIR"]], domains=domains)
            return (outcome.exit_code, outcome.stdout.decode("utf-8", "replace"),
                    outcome.stderr.decode("utf-8", "replace"))

        return execute

    def _ensure_node(self, resolution: Resolution, progress: bool) -> dict[str, Any]:
        assert resolution.node is not None
        layer_id = resolution.node["layer_id"]
        info = self.store.read(layer_id)
        if info is not None:
            return info
        from warden.adapters.envs.interpreters import NodeRuntime
        from warden.adapters.envs.node_layer import build_node_layer

        bar = Progress(f"building Node layer {layer_id} for template {resolution.template.name}", 2,
                       enabled=progress)
        info = build_node_layer(self.store, layer_id, package_json=resolution.package_json() or "{}",
                                runtime=NodeRuntime(**resolution.node["runtime"]), environ=self._environ,
                                progress=bar, registry=self._settings.get_str("envs.npm_registry"),
                                meta={"template": resolution.template.name})
        bar.finish()
        return info

    def index_options(self) -> IndexOptions:
        from warden.adapters.envs.python_layer import IndexOptions

        return IndexOptions(self._settings.get_str("envs.index_url"),
                            self._settings.get_list("envs.find_links"),
                            self._settings.get_bool("envs.no_index"))

    def build(self, ref: str | None, *, python: str | None = None, node: str | None = None,
              progress: bool = True, rebuild: bool = False) -> tuple[Resolution, dict[str, dict[str, Any]]]:
        """`warden snapshot build`: resolve and build (again, with `rebuild`)."""
        resolution = self.resolve(ref, python=python, node=node)
        if rebuild:
            for layer_id in resolution.layer_ids:
                self.store.remove(layer_id)
        return resolution, self.ensure(resolution, progress=progress)

    # -- listing and pruning -----------------------------------------------------------------
    def list(self, in_use: Mapping[str, Collection[str]]) -> Rows:
        """Every layer with its size and the workspaces that use it."""
        rows = []
        for info in self.store.all():
            rows.append({"id": info["id"], "kind": info.get("kind"), "template": info.get("template"),
                         "built_at": info.get("built_at"), "size": info.get("size", 0),
                         "packages": len(info.get("packages", info.get("links", []))),
                         "workspaces": sorted(in_use.get(info["id"], ())),
                         "path": str(self.store.path(info["id"]))})
        return rows

    def prune(self, in_use: Mapping[str, Collection[str]], *, dry_run: bool = False) -> Rows:
        """Remove layers no workspace uses (archived ones count as users)."""
        removed = [row for row in self.list(in_use) if not row["workspaces"]]
        if not dry_run:
            for row in removed:
                self.store.remove(row["id"])
            self.store.sweep()
            for cached in self._cache_dir.glob("*.json") if self._cache_dir.is_dir() else ():
                cached.unlink(missing_ok=True)
        return removed
