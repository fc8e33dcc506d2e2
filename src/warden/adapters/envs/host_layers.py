"""The layer ports (core/ports) on this machine: `LayerStore`, `LayerBuilder`, `ResolutionCache`.

Thin wrappers over the layer store folder, the interpreter discovery and the two builders; the
Python build's uv commands run in the sandbox (adapters/sandbox/tools), so nothing of a
template's dependencies runs on the host.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from warden.adapters.atomic import write_atomic
from warden.adapters.envs import interpreters
from warden.adapters.envs.layer_cache import LayerCache
from warden.adapters.envs.layer_store import LayerStore
from warden.adapters.envs.node_layer import build_node_layer
from warden.adapters.envs.progress import Progress
from warden.adapters.envs.python_layer import BUILDER_VERSION, Execute, build_python_layer
from warden.core.layers import IndexOptions, Interpreter, Layer, NodeRuntime

__all__ = ["FileResolutionCache", "HostLayerBuilder", "HostLayerStore"]


class HostLayerStore:
    """`$WARDEN_HOME/layers/<id>/`, each with its layer.json."""

    def __init__(self, root: Path) -> None:
        self.store = LayerStore(root)

    def _layer(self, info: Mapping[str, object] | None, layer_id: str) -> Layer | None:
        return Layer.from_info(info, str(self.store.path(layer_id))) if info is not None else None

    def read(self, layer_id: str) -> Layer | None:
        return self._layer(self.store.read(layer_id), layer_id)

    def all(self) -> list[Layer]:
        return [Layer.from_info(info, str(self.store.path(str(info["id"])))) for info in self.store.all()]

    def path(self, layer_id: str) -> str:
        return str(self.store.path(layer_id))

    def read_only(self, layer_id: str) -> bool:
        return not stat.S_IMODE(os.stat(self.store.path(layer_id)).st_mode) & 0o222

    def tampered(self, layer_id: str) -> bool:
        return self.store.tampered(layer_id)

    def remove(self, layer_id: str) -> None:
        self.store.remove(layer_id)

    def hold(self, layer_ids: Sequence[str]) -> AbstractContextManager[None]:
        return self.store.hold(layer_ids)

    def removable(self, layer_id: str) -> AbstractContextManager[bool]:
        return self.store.removable(layer_id)

    def sweep(self, *, dry_run: bool = False) -> int:
        return self.store.sweep(dry_run=dry_run)


class HostLayerBuilder:
    """Interpreters found on this machine; layers built into `store` (uv sandboxed, npm with no scripts)."""

    def __init__(self, store: HostLayerStore, environ: Mapping[str, str], *, cache_dir: Path,
                 shared: LayerCache | None = None) -> None:
        self._store = store.store
        self._environ = environ
        self._cache_dir = cache_dir
        self._shared = shared

    def _built(self, layer_id: str, bar: Progress, build: Callable[[], dict[str, Any]],
               sources: Mapping[str, Any], *, replace: bool = False) -> Layer:
        """The layer from the shared layer cache when it holds it (copied, checked) one built from
        the same `sources`, else built (and put there). `replace` (a rebuild): built, never copied."""
        info = None
        if self._shared is not None and not replace:
            with self._store.build_lock(layer_id):
                info = self._store.read(layer_id)
                if info is None and (info := self._shared.copy_into(self._store, layer_id, sources)) is not None:
                    bar.finish(f"copied from the layer cache {self._shared.folder}")
                    return Layer.from_info(info, str(self._store.path(layer_id)))
        if info is None:
            info = build()
            if self._shared is not None and info.get("copied_from") is None:
                self._shared.publish(self._store, layer_id)
        bar.finish()
        return Layer.from_info(info, str(self._store.path(layer_id)))

    @property
    def builder_version(self) -> str:
        return BUILDER_VERSION

    @property
    def machine(self) -> str:
        return os.uname().machine

    def find_python(self, wanted: str | None, *, at_least: bool) -> Interpreter:
        return interpreters.find_python(wanted, self._environ, at_least=at_least)

    def find_node(self, major: str | None) -> NodeRuntime:
        return interpreters.find_node(major, self._environ)

    def has_interpreter(self, executable: str) -> bool:
        return os.path.exists(executable)

    def build_python(self, layer_id: str, *, dependencies: Sequence[str], interpreter: Interpreter,
                     index: IndexOptions, domains: Sequence[str], template: str, progress: bool,
                     replace: bool = False) -> Layer:
        interp = interpreters.Interpreter(**interpreter.to_json())
        bar = Progress(f"building Python layer {layer_id} for template {template}", 4, enabled=progress)
        sources = _python_sources(index)

        def build() -> dict[str, Any]:
            uv = interpreters.uv_binary()
            return build_python_layer(self._store, layer_id, dependencies=dependencies, interpreter=interp, uv=uv,
                                      index=index, execute=self._sandboxed(interp, uv, index, domains),
                                      cache_dir=self._cache_dir / "uv", progress=bar,
                                      meta={"template": template, "sources": sources}, replace=replace)

        return self._built(layer_id, bar, build, sources, replace=replace)

    def _sandboxed(self, interp: interpreters.Interpreter, uv: str, index: IndexOptions,
                   domains: Sequence[str]) -> Execute:
        """How the layer's uv commands run: in the sandbox, seeing the interpreter, uv, the
        find-links folders and the cache, reaching `domains` only."""
        from warden.adapters.sandbox.tools import run_tool

        ro = [interp.prefix, os.path.dirname(interp.executable), os.path.realpath(uv),
              *(link for link in index.find_links if link.startswith("/"))]

        def execute(argv: Sequence[str], cwd: Path, env: Mapping[str, str], /, *,
                    on_stderr: Callable[[bytes], None] | None = None) -> tuple[int, str, str]:
            outcome = run_tool(cwd, argv, env=env, caller_env=self._environ, ro_paths=ro,
                               rw_paths=[env["UV_CACHE_DIR"]], domains=domains, on_stderr=on_stderr)
            return outcome.exit_code, outcome.stdout, outcome.stderr

        return execute

    def build_node(self, layer_id: str, *, package_json: str, runtime: NodeRuntime, registry: str,
                   template: str, progress: bool, replace: bool = False) -> Layer:
        bar = Progress(f"building Node layer {layer_id} for template {template}", 2, enabled=progress)
        sources = {"npm_registry": registry}
        return self._built(layer_id, bar, lambda: build_node_layer(
            self._store, layer_id, package_json=package_json, runtime=runtime, environ=self._environ, progress=bar,
            registry=registry, meta={"template": template, "sources": sources}, replace=replace), sources,
            replace=replace)


def _python_sources(index: IndexOptions) -> dict[str, Any]:
    """Where a Python layer's packages came from, as its layer.json records it. A layer id names
    what was asked for, not where it was fetched: a home that installs only from its own vetted
    wheels (envs.no_index, envs.find_links) must not copy a sibling home's layer of the same id
    built from PyPI or another index, so the cache hands out a layer only to the same sources."""
    return {"index_url": index.index_url, "find_links": list(index.find_links), "no_index": index.no_index}


class FileResolutionCache:
    """`layers/_resolved/<key>.json`: templates already bound to this machine."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def get(self, key: str) -> bytes | None:
        try:
            return (self._folder / f"{key}.json").read_bytes()
        except OSError:
            return None

    def put(self, key: str, data: bytes) -> None:
        write_atomic(self._folder / f"{key}.json", data)

    def clear(self) -> None:
        for cached in self._folder.glob("*.json") if self._folder.is_dir() else ():
            cached.unlink(missing_ok=True)
