"""Seed 001 templates: the bundled ones parse, and mistakes name file, line and field."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

import warden
from warden.core.errors import InvalidInput
from warden.core.templates import TemplateError, package_json, parse_template, pyproject_toml, template_from_json

BUNDLED = Path(warden.__file__).parent / "templates"


@pytest.mark.parametrize("name", ["default", "data-science", "web-dev", "minimal"])
def test_bundled_templates_are_valid(name: str) -> None:
    template = parse_template((BUNDLED / f"{name}.yaml").read_text(), f"{name}.yaml")
    assert template.name == name
    assert template.python is not None


def test_default_template_matches_seed_001() -> None:
    t = parse_template((BUNDLED / "default.yaml").read_text(), "default.yaml")
    assert t.python is not None and t.node is not None
    assert t.python.version == "3.12"
    assert {d.split(">")[0] for d in t.python.dependencies} == {
        "matplotlib", "pandas", "numpy", "requests", "python-dotenv", "pillow"}
    assert set(t.node.dependencies) == {"docx", "axios", "dotenv"}
    assert t.node.version == "20"


@pytest.mark.parametrize(("text", "expected"), [
    ("name: x\npython:\n  versio: '3.12'\n", "t.yaml:3: field python.versio: unknown field"),
    ("name: x\npython:\n  version: '3'\n", "t.yaml:3: field python.version: '3' is not valid"),
    ("name: x\npython:\n  dependencies:\n    - ok\n    - '-r /etc/passwd'\n",
     "t.yaml:5: field python.dependencies[1]: '-r /etc/passwd' is not a requirement"),
    ("name: x\npython:\n  dependencies:\n    - '--index-url=http://evil'\n", "field python.dependencies[0]"),
    # Name-first, but not a requirement an installer can read: refused now, not at build time.
    ("name: x\npython:\n  dependencies:\n    - 'six; import os'\n",
     "t.yaml:4: field python.dependencies[0]: 'six; import os' is not a requirement (Expected a marker"),
    ("name: x\npython:\n  dependencies:\n    - 'six=='\n", "field python.dependencies[0]: 'six==' is not"),
    ("name: x\npython:\n  dependencies: pandas\n", "t.yaml:3: field python.dependencies: expected a list"),
    ("name: x\nnodejs:\n  dependencies:\n    Bad_Name: '1'\n", "t.yaml:4: field nodejs.dependencies.Bad_Name"),
    ("name: x\nnodejs:\n  runtime: deno\n", "t.yaml:3: field nodejs.runtime: 'deno' is not one of"),
    ("name: x\nsecurity:\n  network_enabled: maybe\n", "t.yaml:3: field security.network_enabled"),
    ("name: x\nname: y\n", "t.yaml:2: field 'name' given twice (first on line 1)"),
    ("name: [x\n", "t.yaml:2: not valid YAML"),
    ("", "t.yaml:1: the template is empty"),
    ("python: {}\n", "field name: missing"),
    ("- a\n- b\n", "t.yaml:1: field : expected a mapping, got a list"),
])
def test_mistakes_name_file_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(TemplateError) as info:
        parse_template(text, "t.yaml")
    assert expected in info.value.message
    assert "\n" not in info.value.message
    assert isinstance(info.value, InvalidInput)


def test_versions_keep_what_was_written() -> None:
    # YAML reads an unquoted 3.10 as the float 3.1; the template means Python 3.10.
    t = parse_template("name: x\npython:\n  version: 3.10\nnodejs:\n  version: 20\n", "t.yaml")
    assert t.python is not None and t.python.version == "3.10"
    assert t.node is not None and t.node.version == "20"


def test_no_yaml_tags_are_constructed() -> None:
    with pytest.raises(TemplateError):
        parse_template("name: !!python/object/apply:os.system ['true']\n", "t.yaml")


def test_project_files_and_json_round_trip() -> None:
    t = parse_template((BUNDLED / "default.yaml").read_text(), "default.yaml")
    py = tomllib.loads(pyproject_toml(t, "3.12"))
    assert py["project"]["dependencies"] == list(t.python.dependencies)  # type: ignore[union-attr]
    assert py["project"]["requires-python"] == ">=3.12"
    pkg = json.loads(package_json(t))
    assert pkg["type"] == "module" and pkg["dependencies"]["axios"] == "^1.6.0"
    assert template_from_json(t.to_json()) == t
    assert t.digest() == template_from_json(t.to_json()).digest()
