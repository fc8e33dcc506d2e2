"""Env layers (the user's "snapshots"): resolve a template to layer ids, build, list, prune.

A layer id is a hash of what its content depends on: the template's dependencies, the
interpreter (version, path, platform) or Node.js major, and the builder version. Resolving
a template (parse YAML, find the interpreter) costs tens of milliseconds, so its result is
cached in `layers/_resolved/` keyed by the template file's path, mtime and size and the
overrides; creating a workspace from a built layer then parses no YAML and runs no program.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from warden.core.errors import InvalidInput
from warden.core.layers import EnvLayers, IndexOptions, Layer, NodeBinding, PythonBinding
from warden.core.ports import LayerBuilder, LayerStore, ResolutionCache
from warden.core.settings import Settings
from warden.core.templates import Template, package_json, pyproject_toml, template_from_json
from warden.services.templates import TemplateCatalog

__all__ = ["LayerBuild", "LayerRow", "LayerService", "Resolution"]

RESOLVER_VERSION = "1"
_XY = ("3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Resolution:
    """A template bound to this machine: its layers and the files it puts in a workspace."""

    template: Template
    python: PythonBinding | None
    node: NodeBinding | None

    @property
    def layer_ids(self) -> list[str]:
        ids = [self.python.layer_id if self.python else None, self.node.layer_id if self.node else None]
        return [i for i in ids if i]

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template.to_json(), "python": self.python.to_json() if self.python else None,
                "node": self.node.to_json() if self.node else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Resolution:
        python, node = data.get("python"), data.get("node")
        return cls(template_from_json(data["template"]), PythonBinding.from_json(python) if python else None,
                   NodeBinding.from_json(node) if node else None)

    def pyproject(self) -> str | None:
        if self.python is None:
            return None
        return pyproject_toml(self.template, self.python.interpreter.version.rsplit(".", 1)[0])

    def package_json(self) -> str | None:
        return package_json(self.template) if self.template.node is not None else None


@dataclass(frozen=True)
class LayerRow:
    """One line of `warden snapshot list`: a layer and the workspaces that use it."""

    id: str
    kind: str
    template: str | None
    built_at: str | None
    size: int
    packages: int
    workspaces: list[str]
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "template": self.template, "built_at": self.built_at,
                "size": self.size, "packages": self.packages, "workspaces": list(self.workspaces),
                "path": self.path}


LayerRows = list[LayerRow]


@dataclass(frozen=True)
class LayerBuild:
    """What `warden snapshot build` built (or found built)."""

    resolution: Resolution
    layers: EnvLayers

    def to_json(self) -> dict[str, Any]:
        return {"template": self.resolution.template.name, "layers": [
            {"id": layer.id, "kind": layer.kind, "path": layer.path, "size": layer.size,
             "packages": list(layer.packages), "built_at": layer.built_at} for layer in self.layers.all()]}


class LayerService:
    """Templates → layers on disk, built once and shared read-only."""

    def __init__(self, store: LayerStore, builder: LayerBuilder, cache: ResolutionCache, catalog: TemplateCatalog,
                 settings: Settings) -> None:
        self.store = store
        self.catalog = catalog
        self._builder = builder
        self._cache = cache
        self._settings = settings

    # -- resolving ---------------------------------------------------------------------------
    def resolve(self, ref: str | None, *, python: str | None = None, node: str | None = None) -> Resolution:
        """Bind template `ref` (default from settings) to interpreter and layer ids; cached."""
        if python is not None and python not in _XY:
            raise InvalidInput(f"bad Python version {python!r} (--python, or \"python\" in the API's create params): "
                               f"write X.Y, one of {', '.join(_XY)}")
        if node is not None and not (node.isdigit() and len(node) <= 3):
            raise InvalidInput(f"bad Node version {node!r} (--node, or \"node\" in the API's create params): write a "
                               "major version such as 20")
        ref = ref or self._settings.get_str("workspace.default_template")
        located = self.catalog.locate(ref)
        key = _digest([RESOLVER_VERSION, located.stamp, python, node])
        cached = self._read_cache(key)
        if cached is not None:
            return cached
        template = self.catalog.parse(located)
        resolution = self._bind(template, python, node)
        self._cache.put(key, json.dumps(resolution.to_json()).encode())
        return resolution

    def _read_cache(self, key: str) -> Resolution | None:
        raw = self._cache.get(key)
        if raw is None:
            return None
        try:
            resolution = Resolution.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            return None
        # An interpreter removed since: resolve again (and fail clearly if it is gone for good).
        if resolution.python and not self._builder.has_interpreter(resolution.python.interpreter.executable):
            return None
        return resolution

    def _bind(self, template: Template, python: str | None, node: str | None) -> Resolution:
        py = None
        if template.python is not None or python is not None:
            deps = list(template.python.dependencies) if template.python else []
            wanted = python or (template.python.version if template.python else None)
            interp = self._builder.find_python(wanted, at_least=python is None)
            layer_id = f"py{interp.xy}-" + _digest({
                "kind": "python", "builder": self._builder.builder_version, "deps": sorted(deps),
                "python": interp.version, "implementation": interp.implementation,
                "executable": interp.executable, "platform": interp.platform})
            py = PythonBinding(layer_id, interp)
        nd = None
        if template.node is not None or node is not None:
            major = node or (template.node.version if template.node else None)
            runtime = self._builder.find_node(major)
            deps_map = dict(template.node.dependencies) if template.node else {}
            node_layer: str | None = None
            if deps_map:
                node_layer = f"node{runtime.major}-" + _digest({
                    "kind": "node", "deps": deps_map, "node": runtime.major, "machine": self._builder.machine})
            nd = NodeBinding(node_layer, runtime)
        return Resolution(template, py, nd)

    # -- building ----------------------------------------------------------------------------
    def missing(self, resolution: Resolution) -> list[str]:
        return [i for i in resolution.layer_ids if self.store.read(i) is None]

    def ensure(self, resolution: Resolution, *, progress: bool = True, rebuild: bool = False) -> EnvLayers:
        """The layers of `resolution`, building those not yet on disk (with a progress bar);
        `rebuild`: all of them, each swapped in for the one there once built."""
        python = (self._ensure_python(resolution, resolution.python, progress, rebuild)
                  if resolution.python else None)
        node = None
        if resolution.node and resolution.node.layer_id:
            node = self._ensure_node(resolution, resolution.node, resolution.node.layer_id, progress, rebuild)
        return EnvLayers(python, node)

    def _ensure_python(self, resolution: Resolution, binding: PythonBinding, progress: bool,
                       rebuild: bool = False) -> Layer:
        found = None if rebuild else self.store.read(binding.layer_id)
        if found is not None:
            return found
        deps = list(resolution.template.python.dependencies) if resolution.template.python else []
        index = self.index_options()
        domains = [] if index.no_index else self._settings.get_list("envs.install_domains")
        return self._builder.build_python(binding.layer_id, dependencies=deps, interpreter=binding.interpreter,
                                          index=index, domains=domains, template=resolution.template.name,
                                          progress=progress, replace=rebuild)

    def _ensure_node(self, resolution: Resolution, binding: NodeBinding, layer_id: str, progress: bool,
                     rebuild: bool = False) -> Layer:
        found = None if rebuild else self.store.read(layer_id)
        if found is not None:
            return found
        return self._builder.build_node(layer_id, package_json=resolution.package_json() or "{}",
                                        runtime=binding.runtime, registry=self._settings.get_str("envs.npm_registry"),
                                        template=resolution.template.name, progress=progress, replace=rebuild)

    def index_options(self) -> IndexOptions:
        return IndexOptions(self._settings.get_str("envs.index_url"),
                            tuple(self._settings.get_list("envs.find_links")),
                            self._settings.get_bool("envs.no_index"))

    def build(self, ref: str | None, *, python: str | None = None, node: str | None = None,
              progress: bool = True, rebuild: bool = False) -> LayerBuild:
        """`warden snapshot build`: resolve and build (again, with `rebuild`)."""
        resolution = self.resolve(ref, python=python, node=node)
        # Not removed first: the workspaces on these layers were broken for the whole build, and
        # for good when it failed or was killed (offline, a package gone from the index).
        # A live sandbox that mounted the old folder sees it emptied: it is started afresh at its
        # next command (services/live.py knows its read-only mounts by identity).
        return LayerBuild(resolution, self.ensure(resolution, progress=progress, rebuild=rebuild))

    # -- listing and pruning -----------------------------------------------------------------
    def list(self, in_use: Mapping[str, Collection[str]]) -> list[LayerRow]:
        """Every layer with its size and the workspaces that use it."""
        return [LayerRow(id=layer.id, kind=layer.kind, template=layer.template, built_at=layer.built_at,
                         size=layer.size, packages=len(layer.packages),
                         workspaces=sorted(in_use.get(layer.id, ())), path=layer.path)
                for layer in self.store.all()]

    def prune(self, in_use: Callable[[], Mapping[str, Collection[str]]], *, dry_run: bool = False) -> LayerRows:
        """Remove layers no workspace uses (archived ones count as users). `in_use` is read
        again once the layers are taken from creates: a create finds or builds its layer before
        its row names it, and holds it (`LayerStore.hold`) until then, so a layer held now is
        passed over and one whose create ended meanwhile shows in the second reading."""
        unused = [row for row in self.list(in_use()) if not row.workspaces]
        if dry_run:
            return unused
        removed = []
        with contextlib.ExitStack() as taken:
            free = [row for row in unused if taken.enter_context(self.store.removable(row.id))]
            used = in_use()
            for row in free:
                if not used.get(row.id):
                    self.store.remove(row.id)
                    removed.append(row)
        self.store.sweep()
        self._cache.clear()
        return removed
