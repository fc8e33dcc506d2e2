"""Fakes of our own ports (core/ports) for unit tests of services: in memory, milliseconds.

Each keeps the promises its real adapter keeps that the services rely on; the contract tests
(tests/contracts/) hold fake and real to the same checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import posixpath
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from warden.core.bwrap_argv import Bind
from warden.core.errors import InvalidInput, NotFound, TooLarge
from warden.core.gitcontrol import GitSweep
from warden.core.layers import IndexOptions, Interpreter, Layer, NodeRuntime
from warden.core.limits import Limits
from warden.core.quota import Quota, Usage
from warden.core.runs import RunResult, SandboxRequest


# -- workspace folders, layers, installs, health, quota, settings (services/folders.py and friends) --
class FakeWorkspaceIO:
    """An in-memory host (core.ports.WorkspaceFolders and WorkspaceReads): folders, files and
    links by absolute path. `fail["method"] = exc` makes that method raise."""

    def __init__(self) -> None:
        self.dirs: set[str] = {"/"}
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.venvs: dict[str, dict[str, object]] = {}
        self.trashed: list[str] = []
        self.fail: dict[str, BaseException] = {}

    def _maybe_fail(self, method: str) -> None:
        if method in self.fail:
            raise self.fail[method]

    def _parents(self, path: str) -> None:
        parent = posixpath.dirname(path)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = posixpath.dirname(parent)

    def _resolve(self, path: str) -> str:
        for _ in range(40):
            if path not in self.links:
                return path
            target = self.links[path]
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        return path

    def kind(self, path: str) -> str | None:
        if path in self.links:
            return "symlink"
        if path in self.dirs:
            return "dir"
        return "file" if path in self.files else None

    def exists(self, path: str) -> bool:
        return self.kind(self._resolve(path)) is not None

    def is_dir(self, path: str) -> bool:
        return self.kind(self._resolve(path)) == "dir"

    def is_file(self, path: str) -> bool:
        return self.kind(self._resolve(path)) == "file"

    def make_folder(self, path: str) -> None:
        self._maybe_fail("make_folder")
        if self.kind(path) is not None:
            raise FileExistsError(path)
        self._parents(path)
        self.dirs.add(path)

    def read_bytes(self, path: str) -> bytes | None:
        return self.files.get(self._resolve(path))

    def write_atomic(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        self._maybe_fail("write_atomic")
        self._parents(path)
        self.files[path] = data

    def write_thin_venv(self, workspace: str, *, interpreter: str, version: str, layer_site: str | None,
                        scripts: Mapping[str, str]) -> None:
        self._maybe_fail("write_thin_venv")
        venv = f"{workspace}/.venv"
        xy = ".".join(version.split(".")[:2])
        for folder in (venv, f"{venv}/bin", f"{venv}/lib", f"{venv}/lib/python{xy}",
                       f"{venv}/lib/python{xy}/site-packages"):
            self.dirs.add(folder)
        self.files[f"{venv}/pyvenv.cfg"] = f"executable = {interpreter}\n".encode()
        self.links[f"{venv}/bin/python"] = interpreter
        self.venvs[workspace] = {"interpreter": interpreter, "version": version, "layer_site": layer_site,
                                 "scripts": dict(scripts)}

    def link_node_modules(self, workspace: str, layer: Layer) -> None:
        self._maybe_fail("link_node_modules")
        self.dirs.add(f"{workspace}/node_modules")
        for name in layer.packages:
            self.links[f"{workspace}/node_modules/{name}"] = f"{layer.node_modules}/{name}"

    def write_new_files(self, workspace: str, files: Mapping[str, str | bytes]) -> None:
        self._maybe_fail("write_new_files")
        for name, content in files.items():
            path = f"{workspace}/{name}"
            if self.kind(path) is None:
                self.files[path] = content.encode() if isinstance(content, str) else content

    def unpack_blob(self, blob: bytes, workspace: str, *, max_bytes: int, max_files: int,
                    disk_bytes: int | None, disk_files: int | None) -> dict[str, int]:
        """The fake's blob format: JSON {"path": "text", ...}."""
        self._maybe_fail("unpack_blob")
        if len(blob) > max_bytes:
            raise TooLarge("the blob is too large", rule="workspace.blob_max_size")
        entries = json.loads(blob)
        total = sum(len(text.encode()) for text in entries.values())
        if len(entries) > max_files or (disk_files is not None and len(entries) > disk_files):
            raise TooLarge("too many files", rule="workspace.max_files")
        if disk_bytes is not None and total > disk_bytes:
            raise TooLarge("over the disk quota", rule="workspace.max_disk")
        for name, text in entries.items():
            self.write_atomic(f"{workspace}/{name}", text.encode())
        return {"files": len(entries), "bytes": total}

    def trash(self, path: str) -> None:
        if self.kind(path) is None:
            return
        prefix = path + "/"
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}
        self.files = {f: b for f, b in self.files.items() if not f.startswith(prefix) and f != path}
        self.links = {k: v for k, v in self.links.items() if not k.startswith(prefix) and k != path}
        self.trashed.append(path)

    def read_small(self, root: str, rel: str, limit: int = 1 << 20) -> bytes | None:
        path = f"{root}/{rel}"
        data = self.files.get(path) if path not in self.links else None
        return data if data is not None and len(data) <= limit else None

    def regular_dirs(self, root: str, rel: str, suffix: str) -> list[str]:
        folder = f"{root}/{rel}" if rel else root
        return sorted(posixpath.basename(d) for d in self.dirs
                      if posixpath.dirname(d) == folder and d.endswith(suffix) and d not in self.links)

    def layer_site(self, workspace: str) -> str | None:
        venv = self.venvs.get(workspace)
        site = venv.get("layer_site") if venv else None
        return site if isinstance(site, str) else None

    def disk_usage(self, workspace: str) -> int:
        return sum(len(data) for path, data in self.files.items() if path.startswith(workspace + "/"))


class FakeArchives:
    """The archives folder in memory (core.ports.ArchiveFiles); `packed` maps archive → the folder packed."""

    def __init__(self, io: FakeWorkspaceIO | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.folders: set[str] = set()
        self.packed: dict[str, str] = {}
        self._io = io

    def pack(self, source: str, target: str, *, max_bytes: int | None) -> int:
        size = self._io.disk_usage(source) if self._io is not None else 0
        if max_bytes is not None and size > max_bytes:
            raise TooLarge(f"{source} holds {size:,} bytes", rule="workspace.archive_max_size")
        self.files[target] = b"tar.zst"
        self.packed[target] = source
        return len(self.files[target])

    def make_folder(self, path: str) -> None:
        self.folders.add(path)

    def names(self, folder: str) -> list[str]:
        return sorted(posixpath.basename(p) for p in self.files if posixpath.dirname(p) == folder)

    def is_file(self, path: str) -> bool:
        return path in self.files

    def read_bytes(self, path: str) -> bytes | None:
        return self.files.get(path)

    def write_atomic(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        self.files[path] = data

    def remove(self, path: str) -> None:
        self.files.pop(path, None)


class FakeGitDefuser:
    """Moves nothing unless told: `moves[workspace]` is what a defuse of it reports."""

    def __init__(self) -> None:
        self.moves: dict[str, tuple[str, ...]] = {}
        self.calls: list[tuple[str, tuple[str, ...] | None]] = []

    def defuse(self, workspace: str, folders: Sequence[str] | None = None) -> tuple[str, ...]:
        self.calls.append((workspace, tuple(folders) if folders is not None else None))
        return self.moves.get(workspace, ())


class FakeHostProcesses:
    """core.ports.Processes: the pids in `running` are alive; `stopped` lists the folders stopped."""

    def __init__(self) -> None:
        self.running: set[int] = {os.getpid()}
        self.stopped: list[str] = []

    def alive(self, pid: int, started: int | None = None) -> bool:
        return pid in self.running

    def start_time(self, pid: int) -> int | None:
        return 7 if pid in self.running else None

    def stop_processes(self, root: str) -> list[int]:
        self.stopped.append(root)
        return []

    def orphan_sandboxes(self, roots: Sequence[str]) -> set[int]:
        return set()

    def kill_orphan_sandboxes(self, roots: Sequence[str]) -> list[int]:
        return []


class FakeLayerStore:
    """Layers by id in memory (core.ports.LayerStore); `writable` and `changed` mark damaged ones.
    With `io`, a layer's folders appear there too (health and reconcile look for them)."""

    def __init__(self, io: FakeWorkspaceIO | None = None) -> None:
        self.io = io
        self.layers: dict[str, Layer] = {}
        self.writable: set[str] = set()
        self.changed: set[str] = set()
        self.removed: list[str] = []

    def read(self, layer_id: str) -> Layer | None:
        return self.layers.get(layer_id)

    def all(self) -> list[Layer]:
        return [self.layers[k] for k in sorted(self.layers)]

    def path(self, layer_id: str) -> str:
        return f"/layers/{layer_id}"

    def read_only(self, layer_id: str) -> bool:
        return layer_id not in self.writable

    def tampered(self, layer_id: str) -> bool:
        return layer_id in self.changed

    def put(self, layer: Layer) -> None:
        self.layers[layer.id] = layer
        if self.io is not None:
            for folder in (layer.path, layer.site_packages, layer.node_modules):
                if folder:
                    self.io._parents(folder)
                    self.io.dirs.add(folder)

    def remove(self, layer_id: str) -> None:
        self.layers.pop(layer_id, None)
        self.changed.discard(layer_id)
        self.removed.append(layer_id)
        if self.io is not None:
            self.io.trash(self.path(layer_id))

    def sweep(self) -> int:
        return 0


FAKE_PYTHON = Interpreter(executable="/py/3.12/bin/python3.12", version="3.12.4", implementation="cpython",
                          prefix="/py/3.12", stdlib="/py/3.12/lib/python3.12", platform="linux")
FAKE_NODE = NodeRuntime(node="/usr/bin/node", npm="/usr/bin/npm", version="20.11.1")


class FakeLayerBuilder:
    """Interpreters by X.Y in `pythons` (and `node`); a build puts a layer in `store` (`fail`: raise instead)."""

    def __init__(self, store: FakeLayerStore) -> None:
        self.store = store
        self.pythons: dict[str, Interpreter] = {"3.12": FAKE_PYTHON}
        self.node: NodeRuntime | None = FAKE_NODE
        self.installed: set[str] = {FAKE_PYTHON.executable}
        self.builds: list[str] = []
        self.lookups = 0
        self.fail: BaseException | None = None

    @staticmethod
    def installed_pythons() -> list[Interpreter]:
        return [FAKE_PYTHON]

    @property
    def builder_version(self) -> str:
        return "1"

    @property
    def machine(self) -> str:
        return "x86_64"

    def find_python(self, wanted: str | None, *, at_least: bool) -> Interpreter:
        self.lookups += 1
        if wanted is None:
            return self.pythons[max(self.pythons)]
        found = [xy for xy in self.pythons if xy == wanted or (at_least and _xy(xy) >= _xy(wanted))]
        if not found:
            raise NotFound(f"Python {wanted} is not installed here")
        return self.pythons[min(found, key=_xy)]

    def find_node(self, major: str | None) -> NodeRuntime:
        if self.node is None or (major and self.node.major != major):
            raise NotFound(f"Node.js {major} is not installed here")
        return self.node

    def has_interpreter(self, executable: str) -> bool:
        return executable in self.installed

    def build_python(self, layer_id: str, *, dependencies: Sequence[str], interpreter: Interpreter,
                     index: IndexOptions, domains: Sequence[str], template: str, progress: bool) -> Layer:
        if self.fail is not None:
            raise self.fail
        self.builds.append(layer_id)
        path = self.store.path(layer_id)
        layer = Layer(layer_id, "python", path, size=100, template=template, packages=tuple(dependencies),
                      site_packages=f"{path}/venv/lib/python{interpreter.xy}/site-packages")
        self.store.put(layer)
        return layer

    def build_node(self, layer_id: str, *, package_json: str, runtime: NodeRuntime, registry: str,
                   template: str, progress: bool) -> Layer:
        if self.fail is not None:
            raise self.fail
        self.builds.append(layer_id)
        path = self.store.path(layer_id)
        layer = Layer(layer_id, "node", path, size=50, template=template,
                      packages=tuple(json.loads(package_json).get("dependencies", {})),
                      node_modules=f"{path}/node_modules")
        self.store.put(layer)
        return layer


def _xy(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


class FakeResolutionCache:
    def __init__(self) -> None:
        self.entries: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.entries.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.entries[key] = data

    def clear(self) -> None:
        self.entries.clear()


class FakeQuotaWatch:
    def __init__(self, start: Usage) -> None:
        self.start = start
        self.breach: str | None = None
        self.at: Usage | None = None
        self.notes: list[str] = []

    def arm(self, stop: Callable[[], None]) -> None:
        if self.breach is not None:
            stop()

    def __enter__(self) -> FakeQuotaWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class FakeDisk:
    """core.ports.DiskUsage: `free` bytes under the home, `usage[folder]` what a folder holds."""

    def __init__(self, free: int = 1 << 40) -> None:
        self.free = free
        self.usage: dict[str, Usage] = {}

    def nearest_existing(self, path: str) -> str:
        return path

    def free_bytes(self, path: str) -> int:
        return self.free

    def measure(self, root: str) -> Usage:
        return self.usage.get(root, Usage(0, 0))

    def watch(self, root: str, quota: Quota, *, home: str) -> FakeQuotaWatch:
        return FakeQuotaWatch(self.measure(root))


class FakeSandboxTools:
    """Records each tool run; `exit_code` and `stderr` are what every run answers."""

    def __init__(self, *, available: bool = True) -> None:
        self.runs: list[dict[str, object]] = []
        self.exit_code = 0
        self.stderr = ""
        self._available = available

    def available(self) -> bool:
        return self._available

    def trust(self) -> tuple[dict[str, str], list[str]]:
        return {"UV_NATIVE_TLS": "1"}, []

    def run(self, folder: str, argv: Sequence[str], *, env: Mapping[str, str], ro_paths: Sequence[str] = (),
            rw_paths: Sequence[str] = (), domains: Sequence[str] = (), limits: Limits | None = None) -> RunResult:
        self.runs.append({"folder": folder, "argv": list(argv), "env": dict(env), "ro_paths": list(ro_paths),
                          "domains": list(domains), "limits": limits})
        return RunResult(exit_code=self.exit_code, stdout="", stderr=self.stderr, duration_s=0.0)


class FakeConfigFile:
    def __init__(self, tables: dict[str, object] | None = None, *, broken: bool = False) -> None:
        self.values: dict[str, object] = {}
        self.tables = tables or {}
        self.broken = broken

    def read(self) -> dict[str, object]:
        if self.broken:
            raise InvalidInput("config.toml: not valid TOML")
        return dict(self.tables)

    def set_value(self, key: str, value: object) -> None:
        self.values[key] = value


class FakeHomeFiles:
    def __init__(self) -> None:
        self.folders: dict[str, int] = {}
        self.configs: dict[str, str] = {}
        self.marked = False

    def make_folder(self, path: str, mode: int) -> bool:
        if path in self.folders:
            return False
        self.folders[path] = mode
        return True

    def create_config(self, path: str, text: str) -> bool:
        if path in self.configs:
            return False
        self.configs[path] = text
        return True

    def mark(self, clock: Callable[[], datetime]) -> bool:
        new, self.marked = not self.marked, True
        return new


class FakeKeyFiles:
    def __init__(self) -> None:
        self.made: set[str] = set()
        self.resets: list[str] = []

    def ensure(self) -> list[str]:
        new = [f"keys/{name}" for name in ("pepper", "master.key") if name not in self.made]
        self.made |= {"pepper", "master.key"}
        return new

    def reset(self, stamp: str) -> list[str]:
        self.resets.append(stamp)
        self.made.clear()
        return []


class _FakeEntry:
    def __init__(self, name: str, type: str, size: int) -> None:
        self.name, self.type, self.size, self.mode, self.mtime, self.nlink = name, type, size, 0o644, 0.0, 1

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "type": self.type, "size": self.size}


class _FakeRoot:
    """A WorkspaceRoot over a FakeWorkspaceIO folder (links refused, as the real one refuses them)."""

    def __init__(self, io: FakeWorkspaceIO, root: str, max_bytes: int | None) -> None:
        self._io, self._root, self._max = io, root.rstrip("/"), max_bytes

    def _path(self, path: str) -> str:
        full = posixpath.normpath(f"{self._root}/{path.lstrip('/')}")
        if full in self._io.links:
            raise InvalidInput(f"{path} is a symbolic link")
        return full

    def read_bytes(self, path: str) -> bytes:
        data = self._io.files.get(self._path(path))
        if data is None:
            raise NotFound(f"no file {path}")
        if self._max is not None and len(data) > self._max:
            raise TooLarge(f"{path} is over {self._max} bytes")
        return data

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(path).decode(encoding)

    def stat(self, path: str) -> _FakeEntry:
        full = self._path(path)
        kind = self._io.kind(full)
        if kind is None:
            raise NotFound(f"no entry {path}")
        return _FakeEntry(posixpath.basename(full), kind, len(self._io.files.get(full, b"")))

    def exists(self, path: str) -> bool:
        return self._io.kind(self._path(path)) is not None

    def list(self, path: str) -> list[_FakeEntry]:
        full = self._path(path)
        names = {posixpath.basename(p) for p in (*self._io.dirs, *self._io.files, *self._io.links)
                 if posixpath.dirname(p) == full and p != full}
        return [self.stat(f"{path.rstrip('/')}/{name}") for name in sorted(names)]

    def write_bytes(self, path: str, data: bytes) -> int:
        self._io.write_atomic(self._path(path), data)
        return len(data)

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(path, text.encode(encoding))

    def mkdir(self, path: str) -> bool:
        full = self._path(path)
        if self._io.kind(full) == "dir":
            return False
        self._io._parents(full)
        self._io.dirs.add(full)
        return True

    def delete(self, path: str, *, recursive: bool = False) -> str:
        full = self._path(path)
        kind = self._io.kind(full) or "missing"
        self._io.trash(full)
        return kind

    def __enter__(self) -> _FakeRoot:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class FakeSafeRoots:
    """core.ports.SafeRoots over a FakeWorkspaceIO; also core.ports.NpmTarballs (`tarballs` by path)."""

    def __init__(self, io: FakeWorkspaceIO) -> None:
        self._io = io
        self.tarballs: dict[str, str] = {}

    def open(self, root: str, *, max_bytes: int | None = None, use_openat2: bool | None = None) -> _FakeRoot:
        if not self._io.is_dir(root) or root in self._io.links:
            raise NotFound(f"the workspace folder {root} is missing")
        return _FakeRoot(self._io, root, max_bytes)

    def package_name(self, tarball: str) -> str:
        if tarball not in self.tarballs:
            raise InvalidInput(f"{tarball} is not an npm package tarball")
        return self.tarballs[tarball]


# -- processes and the sandbox (services/runs.py, lifecycle.py, sweeper.py) ------------------------
@dataclass(frozen=True)
class FakeNetEvent:
    """One decision of the filtering proxy (core.runs.NetEvent)."""

    method: str
    host: str
    port: int
    allowed: bool
    rule: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"method": self.method, "host": self.host, "port": self.port, "allowed": self.allowed,
                "rule": self.rule, "reason": self.reason}


class FakeSandboxRunner:
    """core.ports.SandboxRunner: records every request and answers `result`, or raises `error`.
    The output goes to the request's sinks, and `net_events` to its `on_net_event`, as they would."""

    def __init__(self, result: RunResult | None = None) -> None:
        self.result = result or RunResult(0, "", "", 0.01)
        self.error: BaseException | None = None
        self.net_events: list[FakeNetEvent] = []
        self.requests: list[SandboxRequest] = []

    def run(self, request: SandboxRequest) -> RunResult:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        if request.on_started is not None:
            request.on_started(lambda: None)
        for event in self.net_events:
            if request.on_net_event is not None:
                request.on_net_event(event)
        for text, sink in ((self.result.stdout, request.on_stdout), (self.result.stderr, request.on_stderr)):
            if text and sink is not None:
                sink(text.encode())
        if not request.capture:
            return dataclasses.replace(self.result, stdout="", stderr="", net_events=tuple(self.net_events))
        return dataclasses.replace(self.result, net_events=tuple(self.net_events))


class FakeGitGuard:
    """One folder's guard: `protected` are the person's .git entries, `left` what a bot leaves
    (moved aside by `after`); `calls` records the sweeps."""

    def __init__(self) -> None:
        self.protected: tuple[str, ...] = ()
        self.left: tuple[str, ...] = ()
        self.calls: list[str] = []

    def before(self, *, bot_active: bool) -> GitSweep:
        self.calls.append(f"before(bot_active={bot_active})")
        return GitSweep(self.protected, ())

    def after(self) -> GitSweep:
        self.calls.append("after")
        moved, self.left = self.left, ()
        return GitSweep((), moved)


class FakeGitGuards:
    """core.ports.GitGuards: one FakeGitGuard per folder, made on first use."""

    def __init__(self) -> None:
        self.guards: dict[str, FakeGitGuard] = {}

    def guard(self, folder: str) -> FakeGitGuard:
        return self.guards.setdefault(folder, FakeGitGuard())

    def workspace(self, path: str) -> FakeGitGuard:
        return self.guard(path)

    def allowed_folder(self, path: str, fd: int, workspace: str) -> FakeGitGuard:
        return self.guard(path)


class FakeMountSources:
    """core.ports.MountSources: every path outside the workspace "opens" as a new number unless
    it is `missing` (not mounted, silently) or in `unsafe` (skipped with the reason given);
    `open` holds the descriptors not yet closed."""

    def __init__(self) -> None:
        self.missing: set[str] = set()
        self.unsafe: dict[str, str] = {}
        self.open: set[int] = set()
        self._next = 100

    def _fd(self) -> int:
        self._next += 1
        self.open.add(self._next)
        return self._next

    @contextlib.contextmanager
    def open_binds(self, binds: Sequence[Bind], workspace: str
                   ) -> Iterator[tuple[list[Bind], list[tuple[str, int]], list[str]]]:
        kept: list[Bind] = []
        fds: list[tuple[str, int]] = []
        skipped: list[str] = []
        for bind in binds:
            if bind.path == workspace or bind.path.startswith(workspace + "/"):
                kept.append(bind)
            elif bind.path in self.unsafe:
                skipped.append(f"{bind.path} ({self.unsafe[bind.path]})")
            elif bind.path not in self.missing:
                kept.append(bind)
                fds.append((bind.path, self._fd()))
        try:
            yield kept, fds, skipped
        finally:
            self.open -= {fd for _, fd in fds}

    @contextlib.contextmanager
    def open_beneath(self, dir_fd: int, rel: str) -> Iterator[int | None]:
        fd = self._fd()
        try:
            yield fd
        finally:
            self.open.discard(fd)


class FakeRunCgroups:
    """core.ports.RunCgroups: `orphans` are removed by the next sweep."""

    def __init__(self) -> None:
        self.orphans: list[str] = []

    def sweep_orphans(self) -> list[str]:
        removed, self.orphans = self.orphans, []
        return removed


class FakeUnarchiver:
    """core.ports.Unarchiver over a FakeWorkspaceIO and FakeArchives: a restored folder appears
    in `io` with the archive's `contents` (relative path → bytes)."""

    def __init__(self, io: FakeWorkspaceIO, archives: FakeArchives) -> None:
        self._io = io
        self._archives = archives
        self.contents: dict[str, bytes] = {}
        self.restored: list[tuple[str, str]] = []

    def restore(self, archive: str, folder: str) -> None:
        if self._io.exists(folder):
            raise FileExistsError(folder)
        self._io.make_folder(folder)
        for rel, data in self.contents.items():
            self._io.write_atomic(f"{folder}/{rel}", data)
        self.restored.append((archive, folder))

    def discard(self, archive: str) -> None:
        self._archives.remove(archive)


class FakeLeftovers:
    """core.ports.Leftovers: `temp[folder]` half-written archives with their writers' pids,
    `trash[root]` and `folders[root]` as found; `removed` and `background` what was deleted."""

    def __init__(self) -> None:
        self.temp: dict[str, list[tuple[str, int]]] = {}
        self.trash: dict[str, list[str]] = {}
        self.folder_names: dict[str, list[str]] = {}
        self.removed: list[str] = []
        self.background: list[str] = []

    def temp_archives(self, folder: str) -> list[tuple[str, int]]:
        return list(self.temp.get(folder, []))

    def trashed(self, root: str) -> list[str]:
        return sorted(self.trash.get(root, []))

    def folders(self, root: str) -> list[str]:
        return list(self.folder_names.get(root, []))

    def remove(self, path: str) -> None:
        self.removed.append(path)

    def remove_in_background(self, path: str) -> None:
        self.background.append(path)
