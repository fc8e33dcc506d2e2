"""Workspace templates as YAML files: the model and its validation (pure).

A template names a Python version and dependencies, a Node.js version, runtime and
dependencies, a `system` section and a `security` section. Parsing keeps the line of every
value so a mistake is reported as `FILE:LINE: field python.version: ...`. YAML is parsed
here from text; finding and reading files is the catalog's job (services/templates.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from warden.core.errors import InvalidInput
from warden.core.names import name_regex

__all__ = [
    "NodeSpec",
    "PythonSpec",
    "Template",
    "TemplateError",
    "normalized_name",
    "package_json",
    "parse_template",
    "pyproject_toml",
    "requirement_name",
    "requirement_problem",
    "template_from_json",
]

# PEP 508 distribution name, then optional extras / specifiers / URL / markers. A leading
# "-" would be read as an option by pip and uv in a requirements file (`-r /etc/passwd`,
# `--index-url http://evil`), so the name must come first.
_PY_REQ = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[A-Za-z0-9._,\s-]*\])?"
                     r"\s*(?:[<>=!~;@(].*)?$")
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(requirement: str) -> str | None:
    """The distribution name a PEP 508 requirement string starts with, as written (None: none)."""
    match = _REQ_NAME.match(requirement)
    return match.group(1) if match else None


def normalized_name(name: str) -> str:
    """A distribution name compared as PyPI compares them (PEP 503: runs of -_. are one -, any case)."""
    return re.sub(r"[-_.]+", "-", name).lower()


_NPM_NAME = re.compile(r"^(?:@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*$")
_PY_VERSION = re.compile(r"^3\.(\d{1,2})$")
_NODE_VERSION = re.compile(r"^(\d{1,3})(?:\.\d+){0,2}$")
RUNTIMES = ("node", "npm", "bun")


def requirement_problem(text: str) -> str | None:
    """Why `text` is not one PEP 508 requirement (name first), or None when it is one.

    The name-first pattern keeps installer options out (`-r /etc/passwd`); packaging's parser
    then refuses what pip and uv would choke on later (`six; import os`), so a bad line is an
    input error at once, not a failed build.
    """
    if not text or "\n" in text or not _PY_REQ.match(text):
        return "it does not start with a package name"
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(text)
    except InvalidRequirement as exc:
        return str(exc).splitlines()[0]
    return None


class TemplateError(InvalidInput):
    """A template that does not follow the format; the message names file, line and field."""


@dataclass(frozen=True)
class PythonSpec:
    version: str | None
    dependencies: tuple[str, ...]


@dataclass(frozen=True)
class NodeSpec:
    version: str | None
    runtime: str
    dependencies: Mapping[str, str]


@dataclass(frozen=True)
class Template:
    """A validated template."""

    name: str
    description: str
    version: str
    python: PythonSpec | None
    node: NodeSpec | None
    system: Mapping[str, str] = field(default_factory=dict)
    security: Mapping[str, object] = field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "version": self.version,
            "python": None if self.python is None else {
                "version": self.python.version, "dependencies": list(self.python.dependencies)},
            "nodejs": None if self.node is None else {
                "version": self.node.version, "runtime": self.node.runtime,
                "dependencies": dict(self.node.dependencies)},
            "system": dict(self.system), "security": dict(self.security), "source": self.source,
        }

    def digest(self) -> str:
        """A short hash of everything in the template (for caches keyed by content)."""
        blob = json.dumps({k: v for k, v in self.to_json().items() if k != "source"}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def template_from_json(data: Mapping[str, Any]) -> Template:
    """Rebuild a Template from `to_json()` output (a cache written by Warden itself)."""
    py = data.get("python")
    node = data.get("nodejs")
    return Template(
        name=data["name"], description=data.get("description", ""), version=data.get("version", "1.0"),
        python=None if py is None else PythonSpec(py.get("version"), tuple(py.get("dependencies", ()))),
        node=None if node is None else NodeSpec(node.get("version"), node.get("runtime", "npm"),
                                                dict(node.get("dependencies", {}))),
        system=dict(data.get("system", {})), security=dict(data.get("security", {})),
        source=data.get("source", ""))


# -- YAML with line numbers ----------------------------------------------------------------

@dataclass(frozen=True)
class _Node:
    value: Any
    line: int
    raw: str | None = None  # the scalar as written (`3.10`, which YAML reads as 3.1)


def _load_with_lines(text: str, source: str) -> _Node:
    import yaml  # ~30 ms; only when a template file is (re)parsed

    class _Loader(yaml.SafeLoader):
        """SafeLoader whose every value carries the line it started on."""

    def _wrap(constructor: Any) -> Any:
        def build(loader: _Loader, node: yaml.Node) -> _Node:
            return _Node(constructor(loader, node), node.start_mark.line + 1, str(node.value))
        return build

    def _mapping(loader: _Loader, node: yaml.MappingNode) -> _Node:
        loader.flatten_mapping(node)
        result: dict[str, _Node] = {}
        keys: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            key_value = key.value if isinstance(key, _Node) else key
            if not isinstance(key_value, str):
                raise TemplateError(f"{source}:{key_node.start_mark.line + 1}: keys must be text, "
                                    f"got {key_value!r}")
            if key_value in keys:
                raise TemplateError(f"{source}:{key_node.start_mark.line + 1}: field {key_value!r} "
                                    f"given twice (first on line {keys[key_value]})")
            keys[key_value] = key_node.start_mark.line + 1
            result[key_value] = loader.construct_object(value_node, deep=True)
        return _Node(result, node.start_mark.line + 1)

    def _sequence(loader: _Loader, node: yaml.SequenceNode) -> _Node:
        return _Node([loader.construct_object(n, deep=True) for n in node.value], node.start_mark.line + 1)

    for tag, method in (("str", "construct_yaml_str"), ("int", "construct_yaml_int"),
                        ("float", "construct_yaml_float"), ("bool", "construct_yaml_bool"),
                        ("null", "construct_yaml_null"), ("timestamp", "construct_yaml_timestamp")):
        _Loader.add_constructor(f"tag:yaml.org,2002:{tag}", _wrap(getattr(yaml.SafeLoader, method)))
    _Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
    _Loader.add_constructor("tag:yaml.org,2002:seq", _sequence)
    try:
        loaded = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise TemplateError(f"{source}{line}: not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise TemplateError(f"{source}: not valid YAML: {exc}") from None
    if loaded is None:
        raise TemplateError(f"{source}:1: the template is empty; start with `name: NAME`")
    return loaded if isinstance(loaded, _Node) else _Node(loaded, 1)


# -- validation ------------------------------------------------------------------------------

class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: _Node | None, path: str, message: str) -> TemplateError:
        line = f":{node.line}" if node is not None else ""
        return TemplateError(f"{self.source}{line}: field {path}: {message}")

    def mapping(self, node: _Node, path: str, allowed: tuple[str, ...]) -> dict[str, _Node]:
        if not isinstance(node.value, dict):
            raise self.fail(node, path, f"expected a mapping, got {_kind(node.value)}")
        for key, child in node.value.items():
            if key not in allowed:
                raise self.fail(child, f"{path}.{key}" if path else key,
                                f"unknown field; allowed here: {', '.join(allowed)}")
        return dict(node.value)

    def text(self, node: _Node | None, path: str, *, default: str | None = None,
             pattern: re.Pattern[str] | None = None, hint: str = "") -> str | None:
        if node is None or node.value is None:
            return default
        value = node.value
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.fail(node, path, f"expected text, got {_kind(value)}")
        text = str(value)
        if isinstance(value, int | float) and node.raw is not None:
            text = node.raw  # versions: keep `3.10` as written, not the number 3.1
        if pattern is not None and not pattern.match(text):
            raise self.fail(node, path, f"{text!r} is not valid{': ' + hint if hint else ''}")
        return text


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"


def parse_template(text: str, source: str, *, default_name: str | None = None) -> Template:
    """Validate a template's YAML; TemplateError names the file, line and field."""
    root = _load_with_lines(text, source)
    check = _Checker(source)
    top = check.mapping(root, "", ("version", "name", "description", "python", "nodejs",
                                   "system", "security"))
    name = check.text(top.get("name"), "name", default=default_name, pattern=name_regex(64),
                      hint="use letters, digits, '.', '_' or '-'")
    if name is None:
        raise check.fail(root, "name", "missing; add `name: NAME` at the top")
    version = check.text(top.get("version"), "version", default="1.0") or "1.0"
    if version.split(".")[0] != "1":
        raise check.fail(top.get("version"), "version", f"format version {version!r} is not supported; use \"1.0\"")
    description = check.text(top.get("description"), "description", default="") or ""

    python = None
    if (py_node := top.get("python")) is not None and py_node.value is not None:
        py = check.mapping(py_node, "python", ("version", "dependencies"))
        py_version = check.text(py.get("version"), "python.version", pattern=_PY_VERSION,
                                hint="write X.Y such as \"3.12\"")
        deps: list[str] = []
        if (deps_node := py.get("dependencies")) is not None and deps_node.value is not None:
            if not isinstance(deps_node.value, list):
                raise check.fail(deps_node, "python.dependencies",
                                 f"expected a list of requirements, got {_kind(deps_node.value)}")
            for i, item in enumerate(deps_node.value):
                req = check.text(item, f"python.dependencies[{i}]")
                problem = "it is empty" if req is None else requirement_problem(req.strip())
                if req is None or problem is not None:
                    raise check.fail(item, f"python.dependencies[{i}]",
                                     f"{req!r} is not a requirement ({problem}); write it like `pandas>=2.1`")
                deps.append(req.strip())
        python = PythonSpec(py_version, tuple(deps))

    node = None
    if (node_node := top.get("nodejs")) is not None and node_node.value is not None:
        nd = check.mapping(node_node, "nodejs", ("version", "runtime", "dependencies"))
        node_version = check.text(nd.get("version"), "nodejs.version", pattern=_NODE_VERSION,
                                  hint="write a major version such as \"20\"")
        runtime = check.text(nd.get("runtime"), "nodejs.runtime", default="npm") or "npm"
        if runtime not in RUNTIMES:
            raise check.fail(nd.get("runtime"), "nodejs.runtime",
                             f"{runtime!r} is not one of {', '.join(RUNTIMES)}")
        node_deps: dict[str, str] = {}
        if (nd_deps := nd.get("dependencies")) is not None and nd_deps.value is not None:
            if not isinstance(nd_deps.value, dict):
                raise check.fail(nd_deps, "nodejs.dependencies",
                                 f"expected a mapping of package: version range, got {_kind(nd_deps.value)}")
            for pkg, rng in nd_deps.value.items():
                where = f"nodejs.dependencies.{pkg}"
                if not _NPM_NAME.match(pkg):
                    raise check.fail(rng, where, f"{pkg!r} is not an npm package name")
                spec = check.text(rng, where)
                if not spec or "\n" in spec or spec.startswith("-"):
                    raise check.fail(rng, where, "give a version range such as \"^1.6.0\"")
                node_deps[pkg] = spec
        node = NodeSpec(node_version.split(".")[0] if node_version else None, runtime, node_deps)

    system: dict[str, str] = {}
    if (sys_node := top.get("system")) is not None and sys_node.value is not None:
        for key, child in check.mapping(sys_node, "system", ("shell", "editor")).items():
            system[key] = check.text(child, f"system.{key}") or ""

    security: dict[str, object] = {}
    if (sec_node := top.get("security")) is not None and sec_node.value is not None:
        sec = check.mapping(sec_node, "security", ("network_enabled", "allowed_domains",
                                                   "filesystem_readonly", "filesystem_writable"))
        if (net := sec.get("network_enabled")) is not None:
            if not isinstance(net.value, bool):
                raise check.fail(net, "security.network_enabled", f"expected true or false, got {_kind(net.value)}")
            security["network_enabled"] = net.value
        for key in ("allowed_domains", "filesystem_readonly", "filesystem_writable"):
            if (item := sec.get(key)) is not None:
                if not isinstance(item.value, list):
                    raise check.fail(item, f"security.{key}", f"expected a list, got {_kind(item.value)}")
                values = [check.text(v, f"security.{key}[{i}]") or "" for i, v in enumerate(item.value)]
                if key.startswith("filesystem"):
                    for i, v in enumerate(values):
                        if not v.startswith("/"):
                            raise check.fail(item.value[i], f"security.{key}[{i}]",
                                             f"{v!r} must be an absolute path")
                security[key] = values
    return Template(name=name, description=description, version=version, python=python,
                    node=node, system=system, security=security, source=source)


# -- files a template puts into a workspace --------------------------------------------------

def pyproject_toml(template: Template, python_version: str | None) -> str:
    """The pyproject.toml a template puts in a workspace (TOML written by hand: no tomlkit on the hot path)."""
    deps = template.python.dependencies if template.python else ()
    lines = ["[project]", 'name = "workspace"', 'version = "0.1.0"']
    if python_version:
        lines.append(f'requires-python = ">={python_version}"')
    lines.append("dependencies = [")
    lines.extend(f"    {json.dumps(dep)}," for dep in deps)
    lines.append("]")
    lines.append("")
    lines.append("[tool.warden]")
    lines.append(f"template = {json.dumps(template.name)}")
    return "\n".join(lines) + "\n"


def package_json(template: Template) -> str:
    """The package.json a template puts in a workspace."""
    deps = dict(template.node.dependencies) if template.node else {}
    return json.dumps({"name": "workspace", "version": "0.1.0", "private": True, "type": "module",
                       "dependencies": deps}, indent=2) + "\n"
