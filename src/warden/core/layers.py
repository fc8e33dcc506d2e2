"""Env layers as values: the interpreters a template binds to, and the layers built for it (pure).

A layer's `layer.json` (written by adapters/envs) is read into a `Layer`; a template bound to
this machine is a `Resolution` (services/layers) holding a `PythonBinding` and a `NodeBinding`.
Their `to_json` forms are what the resolution cache and the CLI have always shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

__all__ = ["UV_PROGRESS_LOG", "EnvLayers", "IndexOptions", "Interpreter", "Layer", "NodeBinding", "NodeRuntime",
           "PythonBinding", "install_unresolvable", "is_uv_log_line"]

# uv's tracing filter (`RUST_LOG`: target=level) that makes it say on stderr which package it has
# prepared and which installed (adapters/envs/installer_output reads them for a progress bar);
# on a pipe uv otherwise prints only totals. A handful of lines per package, against hundreds at -vv.
UV_PROGRESS_LOG = "warn,uv_fs=trace,uv_install_wheel=trace"
_UV_LOG_LEVELS = ("TRACE ", "DEBUG ", "INFO ", " WARN ", "WARN ")


def is_uv_log_line(line: str) -> bool:
    """A line of uv's own log (asked for by `UV_PROGRESS_LOG`), not of what it tells a person:
    left out of an error's tail."""
    return line.startswith(_UV_LOG_LEVELS)


# What pip, uv and npm print when the index answered and holds no package or version the
# request names: the request is wrong, and asking again gets the same answer.
_UNRESOLVABLE = ("No matching distribution found for", "Could not find a version that satisfies the requirement",
                 "No solution found when resolving", "was not found in the package registry",
                 "npm error code E404", "npm ERR! code E404", "npm error code ETARGET", "npm ERR! code ETARGET",
                 "No matching version found for")
# ... and what they print when the index could not be reached, which pip follows with the same
# "No matching distribution" as if the index had no such package: a network or index outage.
_UNREACHED = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
              "Connection refused", "ConnectTimeout", "ReadTimeout", "Failed to fetch", "error sending request",
              "ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "network is unreachable",
              "SSLError", "CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "Network is unreachable",
              "No route to host", "Name or service not known", "Could not fetch URL")


def install_unresolvable(output: str) -> bool:
    """Whether an installer's failed output says the index has no such package or version (a
    request to change, not to repeat), as against an index it could not reach."""
    return any(s in output for s in _UNRESOLVABLE) and not any(s in output for s in _UNREACHED)


@dataclass(frozen=True)
class Interpreter:
    """A base interpreter (never a venv's), with what a layer id depends on."""

    executable: str  # real path, symlinks resolved
    version: str  # 3.12.1
    implementation: str
    prefix: str
    stdlib: str
    platform: str  # linux-x86_64-glibc-2.36

    @property
    def xy(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def to_json(self) -> dict[str, str]:
        return {"executable": self.executable, "version": self.version,
                "implementation": self.implementation, "prefix": self.prefix,
                "stdlib": self.stdlib, "platform": self.platform}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Interpreter:
        return cls(str(data["executable"]), str(data["version"]), str(data["implementation"]),
                   str(data["prefix"]), str(data["stdlib"]), str(data["platform"]))


@dataclass(frozen=True)
class NodeRuntime:
    node: str
    npm: str | None
    version: str  # 20.20.2

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    def to_json(self) -> dict[str, str | None]:
        return {"node": self.node, "npm": self.npm, "version": self.version}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeRuntime:
        npm = data.get("npm")
        return cls(str(data["node"]), str(npm) if npm is not None else None, str(data["version"]))


@dataclass(frozen=True)
class PythonBinding:
    """A template's Python part bound to an interpreter of this machine."""

    layer_id: str
    interpreter: Interpreter

    def to_json(self) -> dict[str, Any]:
        return {"layer_id": self.layer_id, "interpreter": self.interpreter.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PythonBinding:
        return cls(str(data["layer_id"]), Interpreter.from_json(data["interpreter"]))


@dataclass(frozen=True)
class NodeBinding:
    """A template's Node.js part bound to the runtime on PATH (no layer when it has no dependencies)."""

    layer_id: str | None
    runtime: NodeRuntime

    def to_json(self) -> dict[str, Any]:
        return {"layer_id": self.layer_id, "runtime": self.runtime.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeBinding:
        layer_id = data.get("layer_id")
        return cls(str(layer_id) if layer_id else None, NodeRuntime.from_json(data["runtime"]))


@dataclass(frozen=True)
class IndexOptions:
    """Where packages come from: uv's defaults, or an index URL, find-links folders, no index."""

    index_url: str = ""
    find_links: Sequence[str] = ()
    no_index: bool = False

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for link in self.find_links:
            args += ["--find-links", link]
        if self.no_index:
            args.append("--no-index")
        return args

    def pip_env(self) -> dict[str, str]:
        """The same choices for pip (inside sandboxes)."""
        env: dict[str, str] = {}
        if self.index_url:
            env["PIP_INDEX_URL"] = self.index_url
        if self.find_links:
            env["PIP_FIND_LINKS"] = " ".join(self.find_links)
        if self.no_index:
            env["PIP_NO_INDEX"] = "1"
        return env


@dataclass(frozen=True)
class Layer:
    """One built layer, as its layer.json describes it."""

    id: str
    kind: str  # python, node
    path: str
    size: int = 0
    built_at: str | None = None
    template: str | None = None
    # Python: the pinned requirements; Node: the top-level packages linked into workspaces.
    packages: tuple[str, ...] = ()
    site_packages: str | None = None  # Python
    scripts: Mapping[str, str] = field(default_factory=dict)  # Python: console scripts' text
    node_modules: str | None = None  # Node
    bins: Mapping[str, str] = field(default_factory=dict)  # Node: .bin name -> target

    @classmethod
    def from_info(cls, info: Mapping[str, Any], path: str) -> Layer:
        """From a layer.json document (`path`: where the layer lies)."""
        packages = info.get("packages", info.get("links", []))
        scripts = info.get("scripts")
        bins = info.get("bins")
        template = info.get("template")
        built_at = info.get("built_at")
        return cls(id=str(info["id"]), kind=str(info.get("kind")), path=path, size=int(info.get("size", 0) or 0),
                   built_at=str(built_at) if built_at is not None else None,
                   template=str(template) if template is not None else None,
                   packages=tuple(str(p) for p in packages) if isinstance(packages, list | tuple) else (),
                   site_packages=_inside(path, str(info["id"]), info.get("site_packages")),
                   scripts=dict(scripts) if isinstance(scripts, Mapping) else {},
                   node_modules=_inside(path, str(info["id"]), info.get("node_modules")),
                   bins={str(name): target for name, value in bins.items()
                         if (target := _inside(path, str(info["id"]), value)) is not None}
                   if isinstance(bins, Mapping) else {})


@dataclass(frozen=True)
class EnvLayers:
    """The layers a resolution stands on (built or found)."""

    python: Layer | None = None
    node: Layer | None = None

    def all(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in (self.python, self.node) if layer is not None)


def _inside(layer: str, layer_id: str, value: object) -> str | None:
    """A path layer.json names, as a path inside the layer where it lies now. layer.json names its
    paths relative to the layer, so a home that is moved (or copied) keeps its layers; one written
    by older code names them absolute, under the folder the layer had then (`…/<id>/…`). None for
    anything else (a path out of the layer is no path of it)."""
    if not isinstance(value, str) or not value:
        return None
    rel = value
    if value.startswith("/"):
        _, sep, rel = value.rpartition(f"/{layer_id}/")
        if not sep:
            return None
    parts = PurePosixPath(rel).parts
    if not parts or ".." in parts or parts[0] == "/":
        return None
    return str(PurePosixPath(layer, *parts))
