"""The settings schema: every key Warden reads, its type, default and meaning.

Each row is (key, type, default, description).
A pure resolver merges defaults, the config file and the environment and remembers
where each value came from, so `warden config show` can say it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from warden.core.durations import (
    MAX_RUN_TIMEOUT,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)
from warden.core.errors import InvalidInput, NotFound
from warden.core.limits import MIN_MEMORY

__all__ = ["KEYS", "MAX_PORT", "MAX_WORKERS", "Setting", "Settings", "check_port", "coerce", "env_name",
           "format_value", "resolve"]

Kind = Literal["bool", "int", "str", "path", "list", "size", "duration", "float"]
Source = Literal["default", "file", "environment"]


@dataclass(frozen=True)
class Setting:
    """One key. `minimum`/`maximum` bound an int, a size (in bytes) or a duration (in seconds)."""

    key: str
    kind: Kind
    default: object
    description: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    maximum: int | None = None
    # Values among `choices` that this version knows but cannot use yet, each with why: refused
    # with that reason rather than as a typo.
    not_yet: Mapping[str, str] | None = None


MAX_PORT = 65535
MAX_WORKERS = 64


KEYS: dict[str, Setting] = {
    s.key: s
    for s in (
        Setting("sandbox.enabled", "bool", False,
                "Enforce the command allowlist (sandbox.allowed_commands) before any bot command starts; "
                "the OS sandbox is on whatever this says"),
        Setting("sandbox.backend", "str", "bubblewrap",
                "Where bot commands run: bubblewrap (on this host); kubernetes is designed, not yet runnable",
                choices=("bubblewrap", "kubernetes"),
                not_yet={"kubernetes": "not yet runnable; see docs/kubernetes.md"}),
        Setting("sandbox.root_dir", "path", "",
                "Base directory for workspaces (empty: $WARDEN_HOME/workspaces)"),
        Setting("sandbox.block_system_paths", "bool", True,
                "Refuse access to protected system paths (/etc, /sys, C:\\Windows, ...)"),
        Setting("sandbox.max_file_size_mb", "int", 100,
                "Maximum size of a file a bot writes, in MiB", minimum=1),
        Setting("sandbox.allowed_commands", "list", ["pip", "npm", "git", "python", "node"],
                "Programs a bot may run when sandbox.enabled is on"),
        Setting("sandbox.memory", "size", "1G",
                "Memory limit of one sandboxed command (e.g. 512M, 2G)", minimum=MIN_MEMORY),
        Setting("sandbox.cpu_seconds", "int", 300,
                "CPU-time limit of one sandboxed command, in seconds", minimum=1),
        Setting("sandbox.pids", "int", 256,
                "Maximum number of processes of one sandboxed command", minimum=4),
        Setting("sandbox.open_files", "int", 1024,
                "Maximum number of open files of one sandboxed command", minimum=16),
        Setting("sandbox.timeout", "duration", "10m",
                "Wall-clock timeout of one sandboxed command", minimum=1,
                maximum=int(MAX_RUN_TIMEOUT.total_seconds())),
        Setting("network.enabled", "bool", False,
                "Let sandboxed commands reach the allowed domains through Warden's proxy"),
        Setting("network.allowed_domains", "list", [],
                "Domains reachable when the network is on (*.example.com for subdomains)"),
        Setting("network.denied_domains", "list", [],
                "Domains never reachable; a deny beats an allow"),
        Setting("workspace.default_template", "str", "minimal",
                "Template used by `warden create` when --template is not given"),
        Setting("workspace.blob_max_size", "size", "200M",
                "Largest project a --blob may unpack to (all files together)"),
        Setting("workspace.archive_max_size", "size", "20G",
                "Most file data an archive (archive, destroy) may read; sparse files count at full length",
                minimum=1024 * 1024),
        Setting("workspace.blob_max_files", "int", 20000,
                "Most files and folders a --blob may unpack", minimum=1),
        # The disk quota of one workspace (core/quota.py): writes past it are refused, runs stopped.
        Setting("workspace.max_disk", "size", "10G",
                "Most disk space one workspace may use, all its files together", minimum=1 << 20,
                maximum=1 << 50),
        Setting("workspace.max_files", "int", 500000,
                "Most files and folders one workspace may hold", minimum=100, maximum=1 << 32),
        Setting("workspace.min_free", "size", "1G",
                "Free space kept on the filesystem of Warden's home: below it no run or write starts",
                minimum=0, maximum=1 << 50),
        Setting("workspace.sandbox_idle", "duration", "10m",
                "How long a live sandbox (background processes) stays up with nothing running in it",
                minimum=1, maximum=7 * 86400),
        # The ports a process without capabilities may listen on (the kernel's
        # net.ipv4.ip_unprivileged_port_start, 1024): every bot's.
        Setting("sandbox.forward_ports", "list", ["1024-65535"],
                "Ports of a live sandbox `warden forward` may reach: a port (8000) or a range (3000-3999) each"),
        # The janitor (core/janitor.py): seed 000's cleanup rules, applied on its own.
        Setting("janitor.interval", "duration", "10m",
                "How often `warden serve` (and `warden janitor`) cleans up; 0 switches it off in serve",
                minimum=0, maximum=7 * 86400),
        # Nodes (core/nodes.py): instances' heartbeats, and how a node reaches another's API.
        Setting("node.heartbeat_interval", "duration", "10s",
                "How often a running Warden (serve, daemon, shell, long command) renews its heartbeat",
                minimum=1, maximum=3600),
        Setting("node.heartbeat_window", "duration", "60s",
                "An instance without a heartbeat this long is dead (its locks and sandboxes released); "
                "a node without a live instance is down (its workspaces unreachable)", minimum=1, maximum=86400),
        Setting("node.url", "str", "",
                "The API URL other nodes forward to (empty: http://HOST:PORT that `warden serve` binds; "
                "https://… through a TLS proxy)"),
        Setting("node.ca_file", "path", "",
                "CA certificates (PEM) to verify other nodes' https:// API (empty: the system's)"),
        Setting("cleanup.idle_after", "duration", "7d",
                "A workspace with no run, file operation or background process this long is idle",
                minimum=60, maximum=3650 * 86400),
        Setting("cleanup.idle_archive_after", "duration", "30d",
                "An idle workspace is archived after this long without use (its archive keeps everything)",
                minimum=60, maximum=3650 * 86400),
        Setting("cleanup.temporary_ttl", "duration", "1d",
                "A temporary workspace without its own expiry is destroyed this long after its last use",
                minimum=60, maximum=3650 * 86400),
        Setting("cleanup.bot_ttl", "duration", "7d",
                "A workspace a bot made (POST /v1/workspaces) is archived this long after its last use",
                minimum=60, maximum=3650 * 86400),
        Setting("cleanup.disk_alert_percent", "int", 90,
                "Warn (audit, `warden doctor`) when the disk of Warden's home is this full", minimum=1, maximum=100),
        # Approvals (core/approvals.py): how long a bot's `ask` operation waits for an answer,
        # and how many one bot may keep waiting (each holds up to sandbox.max_file_size_mb).
        Setting("approvals.ttl", "duration", "1d",
                "How long a bot's request for approval waits before it expires", minimum=1,
                maximum=30 * 86400),
        Setting("approvals.max_pending", "int", 50,
                "Requests for approval one bot (with the grants it minted) may have waiting at once",
                minimum=1, maximum=10000),
        Setting("approvals.max_pending_size", "size", "1G",
                "Bytes all requests waiting for approval may hold together (a write's content waits too)",
                minimum=0, maximum=1 << 50),
        # Versions the file API keeps (core/checkpoints.py): they and checkpoints count against
        # workspace.max_disk.
        Setting("versions.keep", "int", 10,
                "Earlier contents of one path kept when Warden's file API overwrites or deletes it (0: none)",
                minimum=0, maximum=10000),
        Setting("versions.max_size", "size", "1G",
                "Most bytes the kept versions of one workspace hold together; the oldest go first",
                minimum=0, maximum=1 << 50),
        Setting("envs.index_url", "str", "",
                "Python package index for layers and installs (empty: uv's and pip's default)"),
        Setting("envs.find_links", "list", [],
                "Extra folders or URLs of wheels for layers and installs (pip's --find-links)"),
        Setting("envs.no_index", "bool", False,
                "Install only from envs.find_links, never from an index"),
        Setting("envs.layer_cache", "path", "",
                "A folder of built layers shared by the Warden homes of this machine: a layer found "
                "there is copied, not built (empty: none)"),
        Setting("envs.npm_registry", "str", "",
                "npm registry URL for Node layers and installs (empty: npm's default)"),
        # With their port: a listed name may then resolve to a private address (a registry
        # mirror or a site's interception proxy), which a bare name would be refused.
        Setting("envs.install_domains", "list",
                ["pypi.org:443", "files.pythonhosted.org:443", "registry.npmjs.org:443"],
                "Package indexes that layer builds and `warden install` may reach from the sandbox"),
        Setting("database.url", "str", "",
                "The registry several nodes share (postgresql+psycopg://…; `warden init --join URL` sets it; "
                "empty: SQLite in $WARDEN_HOME)"),
        Setting("api.host", "str", "127.0.0.1", "Address `warden serve` listens on"),
        Setting("api.port", "int", 8787, "Port `warden serve` listens on", minimum=1, maximum=MAX_PORT),
        Setting("api.tls_cert", "path", "",
                "Certificate chain (PEM) `warden serve` answers HTTPS with (empty: plain HTTP; needs api.tls_key)"),
        Setting("api.tls_key", "path", "", "Private key (PEM) of api.tls_cert"),
        Setting("api.max_body", "size", "16M",
                "Largest JSON request body the API accepts (file uploads use sandbox.max_file_size_mb)"),
        Setting("api.workers", "int", 1,
                "Worker processes of `warden serve` (one per core serves the most requests)",
                minimum=1, maximum=MAX_WORKERS),
        Setting("api.max_execs", "int", 8,
                "Commands bots may run at once through the API (more wait for nobody: 503, retry)",
                minimum=1, maximum=1024),
        Setting("api.max_execs_per_bot", "int", 4,
                "Commands one bot may run at once through the API", minimum=1, maximum=1024),
        Setting("api.max_watches", "int", 32,
                "Change streams (GET …/events) open at once in one server process, all bots together "
                "(each holds an inotify instance: fs.inotify.max_user_instances is often 128)",
                minimum=1, maximum=4096),
        Setting("api.max_watched_folders", "int", 40_000,
                "Folders all change streams and `warden watch`es of one process watch together (each an "
                "inotify watch: fs.inotify.max_user_watches is per user, and runs' quota watchers need some)",
                minimum=1, maximum=10_000_000),
        Setting("watch.max_folders", "int", 10_000,
                "Folders one watch (GET …/events, `warden watch`) watches; past it the rest is not watched "
                "and the watch says so (a notice)", minimum=1, maximum=10_000_000),
        Setting("api.max_watches_per_bot", "int", 4,
                "Change streams (GET …/events) one bot may hold open at once in one server process",
                minimum=1, maximum=1024),
        Setting("api.max_workspaces_per_bot", "int", 20,
                "Workspaces one bot may hold at once that it created itself (POST /v1/workspaces)",
                minimum=0, maximum=100000),
        Setting("api.max_output", "size", "4M",
                "Output of one API exec kept per stream (stdout, stderr); the rest is dropped with a note",
                minimum=64 * 1024, maximum=64 * 1024 * 1024),
        Setting("api.max_connections", "int", 256,
                "Connections one `warden serve` process keeps open at once (each a descriptor); past it "
                "the one idle longest is closed, or the new one refused (503) when all are busy",
                minimum=8, maximum=65536),
        Setting("api.request_timeout", "duration", "60s",
                "Longest time one API request may take (an exec may add its own timeout), and an answer "
                "may wait for its client to read it", minimum=1),
        Setting("grants.default_ttl", "duration", "7d",
                "How long a grant lasts when --ttl is not given", minimum=1),
        Setting("grants.max_ttl", "duration", "30d",
                "The longest a grant may ever last (its immutable maximum); no --max-ttl may exceed it",
                minimum=1),
    )
}


def check_port(port: int, *, label: str = "--port") -> int:
    """A TCP port to listen on, 0..65535 (0: the kernel picks a free one); api.port shares MAX_PORT."""
    if isinstance(port, bool) or not 0 <= port <= MAX_PORT:
        raise InvalidInput(f"bad {label} {port}: use 0-{MAX_PORT} (0 picks a free port)")
    return port


def env_name(key: str) -> str:
    """The environment variable that overrides `key`: sandbox.max_file_size_mb → WARDEN_SANDBOX_MAX_FILE_SIZE_MB."""
    return "WARDEN_" + key.upper().replace(".", "_")


def _spec(key: str) -> Setting:
    try:
        return KEYS[key]
    except KeyError:
        raise NotFound(f"unknown setting {key!r}: `warden config show` lists the keys") from None


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def coerce(key: str, value: object) -> object:
    """Turn `value` (a string from the CLI or environment, or a TOML value) into the key's type."""
    spec = _spec(key)
    where = f"setting {key} ({spec.kind})"
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise InvalidInput(f"{where}: {value!r} is not true or false")
    if kind == "int":
        if isinstance(value, bool):
            raise InvalidInput(f"{where}: {value!r} is not a whole number")
        try:
            number = int(value) if isinstance(value, int | str) else None
        except ValueError:
            number = None
        if number is None:
            raise InvalidInput(f"{where}: {value!r} is not a whole number")
        try:
            _check_range(spec, number, str(number), str)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc.message}") from None
        return number
    if kind == "list":
        if isinstance(value, str):
            return _parse_list(value, where)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise InvalidInput(f"{where}: {value!r} is not a list of strings (write a,b,c)")
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: {value!r} is not text")
    try:
        if kind == "size":
            _check_range(spec, parse_size(value), value, format_size)
        elif kind == "duration":
            seconds = int(parse_duration(value).total_seconds())
            _check_range(spec, seconds, value, lambda n: format_duration(timedelta(seconds=n)))
        elif kind == "path":
            _check_path(value)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}") from None
    if spec.choices and value not in spec.choices:
        raise InvalidInput(f"{where}: {value!r} is not one of {', '.join(spec.choices)}")
    if spec.not_yet and value in spec.not_yet:
        raise InvalidInput(f"{where}: {value!r} is {spec.not_yet[value]}")
    return value


# `["a"`, `['a'` or `[]`: the start of an array, so an error when it does not parse, not the
# one-item list `[::1]:443` of the a,b,c form.
_ARRAY_START = re.compile(r"\[\s*[\[\]\"'{]")


def _parse_list(text: str, where: str) -> list[str]:
    """A list from text: a JSON or TOML array of strings, or `a,b,c` (blank items dropped)."""
    stripped = text.strip()
    items: object = None
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except (ValueError, RecursionError):  # both parsers recurse: `[[[[…` is not a list of names either
            try:
                items = tomllib.loads(f"v = {stripped}")["v"]
            except (tomllib.TOMLDecodeError, RecursionError):
                if _ARRAY_START.match(stripped):
                    raise InvalidInput(f'{where}: {text[:80]!r} is not a valid array; write '
                                       '["a", "b"] or a,b') from None
    if items is None:
        return [item for item in (part.strip() for part in text.split(",")) if item]
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise InvalidInput(f'{where}: {text[:80]!r} is not an array of strings; write ["a", "b"]')
    return items


def format_value(value: object) -> str:
    """A value as `warden config set` takes it back: `a, b` for a list (a JSON array when an
    item would not survive that form), `true`/`false` for a bool, the text of the rest."""
    if isinstance(value, list):
        text = ", ".join(str(item) for item in value)
        try:
            if _parse_list(text, "") == value:
                return text
        except InvalidInput:
            pass  # an item that looks like the start of an array
        return json.dumps(value, ensure_ascii=False)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_range(spec: Setting, number: int, shown: str, unit: Callable[[int], str]) -> None:
    """Refuse `number` (bytes, seconds or a count) outside the key's minimum..maximum."""
    if spec.minimum is not None and number < spec.minimum:
        raise InvalidInput(f"{shown} is below the minimum {unit(spec.minimum)}; give at least that")
    if spec.maximum is not None and number > spec.maximum:
        raise InvalidInput(f"{shown} is above the maximum {unit(spec.maximum)}; give at most that")


def _check_path(value: str) -> None:
    """Empty (the default) or absolute (`~` allowed): a relative folder would move with the cwd."""
    if "\0" in value:
        raise InvalidInput(f"{value!r} holds a NUL byte; give a plain path")
    if value and not value.startswith(("/", "~")):
        raise InvalidInput(f"{value!r} is a relative path; give an absolute one (e.g. /srv/warden "
                           "or ~/warden-workspaces), or an empty value for the default")


@dataclass(frozen=True)
class Settings:
    """Resolved settings: each key's value and where it came from."""

    values: Mapping[str, object]
    sources: Mapping[str, Source]

    def get(self, key: str) -> object:
        _spec(key)
        return self.values[key]

    def source(self, key: str) -> Source:
        _spec(key)
        return self.sources[key]

    def get_bool(self, key: str) -> bool:
        value = self.get(key)
        assert isinstance(value, bool)
        return value

    def get_int(self, key: str) -> int:
        value = self.get(key)
        assert isinstance(value, int)
        return value

    def get_str(self, key: str) -> str:
        value = self.get(key)
        assert isinstance(value, str)
        return value

    def get_list(self, key: str) -> list[str]:
        value = self.get(key)
        assert isinstance(value, list)
        return list(value)

    def get_size(self, key: str) -> int:
        return parse_size(self.get_str(key))

    def get_seconds(self, key: str) -> float:
        return parse_duration(self.get_str(key)).total_seconds()


def flatten(table: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested TOML tables → dotted keys."""
    flat: dict[str, object] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, key + "."))
        else:
            flat[key] = value
    return flat


def resolve(file_table: Mapping[str, object], environ: Mapping[str, str],
            *, file_label: str = "config.toml") -> Settings:
    """Merge defaults < file < environment; a bad value names its key and where it came from."""
    values: dict[str, object] = {}
    sources: dict[str, Source] = {}
    file_values = flatten(file_table)
    for key in file_values:
        if key not in KEYS:
            raise InvalidInput(f"{file_label}: unknown setting {key!r}; remove it or fix its name")
    for key, spec in KEYS.items():
        if (raw := environ.get(env_name(key))) is not None:
            try:
                values[key] = coerce(key, raw)
            except InvalidInput as exc:
                raise InvalidInput(f"environment {env_name(key)}: {exc.message}") from None
            sources[key] = "environment"
        elif key in file_values:
            try:
                values[key] = coerce(key, file_values[key])
            except InvalidInput as exc:
                raise InvalidInput(f"{file_label}: {exc.message}; fix it with `warden config set`") from None
            sources[key] = "file"
        else:
            values[key] = spec.default
            sources[key] = "default"
    return Settings(values, sources)
