"""The MCP tools Warden offers: names (INTERFACES.md, binding), JSON Schemas, descriptions for a
model, annotations, and the check of a call's arguments against its schema.

Descriptions speak of a plain filesystem (seed 003, "discoverable interface"): the folders a
token may use are the top-level directories `list_directory("/")` shows, so no description
names a folder or uses Warden's own words for them. Pure data and a pure check; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warden.core.echo import echoed
from warden.core.errors import InvalidInput

__all__ = ["TOOLS", "ToolSpec", "check_arguments", "takes_workspace"]

_WORKSPACE = {"type": "string", "minLength": 1, "maxLength": 64,
              "description": "Workspace name, as list_workspaces shows it."}


def _path(what: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": 4096,
            "description": f"{what}: an absolute path inside the workspace, e.g. /src/app.py; '/' is the "
                           "workspace root. Call list_directory with '/' to see the folders you may use."}


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what a model reads about it, its arguments, and its hints."""

    name: str
    title: str
    description: str
    properties: Mapping[str, Mapping[str, Any]]
    required: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    def input_schema(self, default_workspace: str | None = None) -> dict[str, Any]:
        """Its JSON Schema; with `default_workspace` (a token for that one workspace), the
        description of `workspace` says which workspace a call that leaves it out means. It stays
        required in the schema, as INTERFACES.md shapes the tools (`exec {workspace, cmd, …}`): a
        model names it; a call by hand that forgets it is still taken (check_arguments)."""
        properties = {k: dict(v) for k, v in self.properties.items()}
        if default_workspace is not None and "workspace" in properties:
            properties["workspace"]["description"] = (
                f"Workspace name: {default_workspace!r}, the one workspace this token is for (taken when left out).")
        return {"type": "object", "properties": properties, "required": list(self.required),
                "additionalProperties": False}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_workspaces", "List workspaces",
        "List the workspaces this token may use, with what it may do in each (read, write, execute). "
        "Every other tool takes one of these names as `workspace`.",
        {}, read_only=True, idempotent=True),
    ToolSpec(
        "create_workspace", "Create a workspace",
        "Create a new, empty workspace (an isolated folder with its own Python environment) and get full "
        "use of it. Only a bot's own identity token may create workspaces; a token for one workspace "
        "cannot. Creating one with a template that installs packages can take a while.",
        {"name": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$",
                  "description": "Name of the new workspace: letters, digits, '.', '_' or '-'."},
         "template": {"type": "string", "minLength": 1, "maxLength": 200,
                      "description": "Template to build it from (e.g. minimal, default, data-science, "
                                     "web-dev); leave out for the server's default."}},
        ("name",)),
    ToolSpec(
        "exec", "Run a command",
        "Run a command in the workspace's sandbox (no network, the workspace as working directory and "
        "HOME, its .venv first on PATH) and return its exit code and output. Output is sent as progress "
        "notifications while it runs. `cmd` is an argument list, not a shell line: use "
        "[\"sh\", \"-c\", \"...\"] for pipes or &&. With background true the command keeps running and "
        "you get a process id for process_logs and process_kill.",
        {"workspace": _WORKSPACE,
         "cmd": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4096,
                 "description": "The program and its arguments, e.g. [\"python\", \"-m\", \"pytest\", \"-q\"]."},
         "cwd": {"type": "string", "minLength": 1, "maxLength": 4096,
                 "description": "Working directory, a path inside the workspace such as /src (default: the "
                                "workspace root)."},
         "timeout": {"type": "number", "exclusiveMinimum": 0,
                     "description": "Seconds before the command is killed (default and maximum: the "
                                    "server's limit)."},
         "background": {"type": "boolean",
                        "description": "Start it and return its process id at once (for servers and long jobs)."}},
        ("workspace", "cmd"), destructive=True),
    ToolSpec(
        "process_logs", "Read a background process's output",
        "The output so far of a process started with exec background=true, and whether it is still running "
        "(with its exit code once it ended).",
        {"workspace": _WORKSPACE, "id": {"type": "string", "minLength": 1, "maxLength": 64,
                                         "description": "The process id exec returned."}},
        ("workspace", "id"), read_only=True),
    ToolSpec(
        "process_kill", "Stop a background process",
        "Stop a process started with exec background=true (SIGTERM to its whole process group).",
        {"workspace": _WORKSPACE, "id": {"type": "string", "minLength": 1, "maxLength": 64,
                                         "description": "The process id exec returned."}},
        ("workspace", "id"), destructive=True, idempotent=True),
    ToolSpec(
        "read_file", "Read a file",
        "Read a file of the workspace. Text comes back as text; a binary file as base64. A long text file "
        "comes back in pieces of lines: use offset (first line, from 1) and limit (number of lines) to "
        "read the rest.",
        {"workspace": _WORKSPACE, "path": _path("The file"),
         "offset": {"type": "integer", "minimum": 1, "description": "First line to return (from 1)."},
         "limit": {"type": "integer", "minimum": 1, "maximum": 100000,
                   "description": "How many lines to return (default 2000)."}},
        ("workspace", "path"), read_only=True, idempotent=True),
    ToolSpec(
        "write_file", "Write a file",
        "Create a file or replace its whole content (missing parent directories are made). Use edit_file "
        "to change part of an existing file. Some folders need a person's approval for changes: the answer "
        "then says the change waits for approval, with its id; it is not written until approved.",
        {"workspace": _WORKSPACE, "path": _path("The file"),
         "content": {"type": "string", "description": "The new content."},
         "encoding": {"type": "string", "enum": ["utf-8", "base64"],
                      "description": "How `content` is given: utf-8 text (default) or base64 bytes."}},
        ("workspace", "path", "content"), destructive=True, idempotent=True),
    ToolSpec(
        "edit_file", "Edit a file",
        "Replace one exact piece of text in a file with another and get the change as a unified diff. "
        "`old` must occur exactly once: copy it from read_file with its whitespace and line breaks, and "
        "include a few surrounding lines when it could occur more than once. Files of at most 8 MiB.",
        {"workspace": _WORKSPACE, "path": _path("The file"),
         "old": {"type": "string", "minLength": 1, "description": "The exact text to replace."},
         "new": {"type": "string", "description": "The text to put in its place (may be empty)."}},
        ("workspace", "path", "old", "new"), destructive=True),
    ToolSpec(
        "list_directory", "List a directory",
        "List the entries of a directory: folders end with '/'. list_directory('/') shows the top-level "
        "folders you may use.",
        {"workspace": _WORKSPACE, "path": _path("The directory")},
        ("workspace", "path"), read_only=True, idempotent=True),
    ToolSpec(
        "directory_tree", "Show a directory tree",
        "The files and folders below a directory as an indented tree, a few levels deep and at most a few "
        "hundred entries (folders such as .git, .venv and node_modules are not expanded).",
        {"workspace": _WORKSPACE, "path": _path("The directory (default '/')"),
         "depth": {"type": "integer", "minimum": 1, "maximum": 8, "description": "Levels to show (default 3)."}},
        ("workspace",), read_only=True, idempotent=True),
    ToolSpec(
        "search_files", "Find files",
        "Find files whose name (or path below `path`) matches a glob pattern such as '*.py' or "
        "'tests/test_*.py'; with `contains`, only files holding that text, with the matching lines. "
        "Results are bounded.",
        {"workspace": _WORKSPACE,
         "pattern": {"type": "string", "minLength": 1, "maxLength": 512,
                     "description": "Glob on names or relative paths, e.g. '*.md' or 'src/**/*.py'."},
         "path": _path("Where to search (default '/')"),
         "contains": {"type": "string", "minLength": 1, "maxLength": 1000,
                      "description": "Only files containing this exact text (case-sensitive)."}},
        ("workspace", "pattern"), read_only=True, idempotent=True),
    ToolSpec(
        "file_info", "File information",
        "What a path is: file, directory or link, its size, permissions, modification time and link count.",
        {"workspace": _WORKSPACE, "path": _path("The path")},
        ("workspace", "path"), read_only=True, idempotent=True),
    ToolSpec(
        "delete_file", "Delete a file",
        "Delete a file, a link or an empty directory (a directory with files in it only with recursive true).",
        {"workspace": _WORKSPACE, "path": _path("The path"),
         "recursive": {"type": "boolean", "description": "Delete a directory with everything in it."}},
        ("workspace", "path"), destructive=True),
    ToolSpec(
        "move_file", "Move or rename",
        "Move or rename a file or directory. It never replaces something already at the destination: "
        "delete that first if you mean to.",
        {"workspace": _WORKSPACE, "source": _path("What to move"), "destination": _path("Its new path")},
        ("workspace", "source", "destination"), destructive=True),
)

_BY_NAME = {tool.name: tool for tool in TOOLS}
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                       "boolean": (bool,), "array": (list,)}


def _check(value: object, schema: Mapping[str, Any], where: str) -> None:
    kind = schema.get("type")
    if kind is not None:
        wanted = _TYPES[kind]
        if (isinstance(value, bool) and kind in ("integer", "number")) or not isinstance(value, wanted):
            said = f"{where} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
            if kind == "array" and isinstance(value, str) and schema.get("items", {}).get("type") == "string":
                # A model's most frequent slip: a command line as one string. Show it the list it meant.
                said += f" of strings, one per argument: {_as_list(value)}"
            raise InvalidInput(said)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise InvalidInput(f"{where} must not be empty")
        if len(value) > schema.get("maxLength", len(value)):
            raise InvalidInput(f"{where} is longer than {schema['maxLength']} characters")
        if "enum" in schema and value not in schema["enum"]:
            raise InvalidInput(f"{where} must be one of {', '.join(schema['enum'])}")
        if "pattern" in schema:
            import re

            if not re.search(schema["pattern"], value):
                raise InvalidInput(f"{where} {value!r} does not match {schema['pattern']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise InvalidInput(f"{where} must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise InvalidInput(f"{where} must be at most {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise InvalidInput(f"{where} must be more than {schema['exclusiveMinimum']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise InvalidInput(f"{where} must not be empty")
        if len(value) > schema.get("maxItems", len(value)):
            raise InvalidInput(f"{where} has more than {schema['maxItems']} items")
        for index, item in enumerate(value):
            _check(item, schema.get("items", {}), f"{where}[{index}]")


def _as_list(line: str) -> str:
    """`line` split as a shell would (no shell runs it: a pipe or `&&` needs ["sh", "-c", line])."""
    import json
    import shlex

    try:
        words = shlex.split(line)
    except ValueError:  # an unclosed quote
        words = line.split()
    if any(word in ("|", "&&", "||", ";", ">", "<") for word in words):
        words = ["sh", "-c", line]
    return echoed(json.dumps(words[:8] + (["…"] if len(words) > 8 else []), ensure_ascii=False), 200)


def takes_workspace(name: str) -> bool:
    """Whether tool `name` acts on one workspace (its `workspace` argument)."""
    tool = _BY_NAME.get(name)
    return tool is not None and "workspace" in tool.properties


def check_arguments(name: str, arguments: Mapping[str, Any] | None,
                    default_workspace: str | None = None) -> tuple[ToolSpec, dict[str, Any]]:
    """The tool called `name` and its arguments, checked against its schema (InvalidInput names
    the first problem, so a model can mend its call). `default_workspace` (the one workspace of a
    grant token) stands in for a `workspace` left out."""
    tool = _BY_NAME.get(name)
    if tool is None:
        raise InvalidInput(f"no tool '{echoed(name)}'; the tools are {', '.join(_BY_NAME)}")  # escaped once
    given = dict(arguments or {})
    if default_workspace is not None and "workspace" in tool.properties and "workspace" not in given:
        given["workspace"] = default_workspace
    unknown = sorted(set(given) - set(tool.properties))
    if unknown:
        # The names are the caller's to choose: escaped, cut, and a few.
        shown = ", ".join(echoed(key, 60) for key in unknown[:5])
        shown += f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        takes = ", ".join(tool.properties) or "none"
        raise InvalidInput(f"{name} takes no argument {shown}; it takes {takes}")
    missing = [key for key in tool.required if key not in given]
    if missing:
        how = ("; give it as \"workspace\": \"NAME\", a name list_workspaces shows (only a token for one "
               "workspace may leave it out)") if "workspace" in missing else ""
        raise InvalidInput(f"{name} needs {', '.join(missing)}{how}")
    for key, value in given.items():
        _check(value, tool.properties[key], key)
    return tool, given
