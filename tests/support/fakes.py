"""Fakes of our own ports (core/ports) for unit tests of services: in memory, milliseconds.

Each keeps the promises its real adapter keeps that the services rely on; the contract tests
(tests/contracts/) hold fake and real to the same checks.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import posixpath
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from warden.core.bwrap_argv import Bind
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound, TooLarge, Unavailable
from warden.core.forwards import Connection
from warden.core.gitcontrol import GitControl, GitSweep, adoptable, is_git_name
from warden.core.layers import IndexOptions, Interpreter, Layer, NodeRuntime
from warden.core.limits import Limits
from warden.core.live import (
    RING_BYTES,
    Chunk,
    Exited,
    LiveProcess,
    LiveSandbox,
    Logs,
    NotListening,
    StartedSandbox,
    Supervised,
)
from warden.core.quota import Quota, Usage
from warden.core.runs import RunResult, SandboxRequest, usage_of
from warden.core.runs import Usage as RunUsage
from warden.core.watching import Batch, Coalescer, Notice


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

    def changed_at(self, path: str) -> float | None:
        return 0.0 if self.kind(path) is not None else None  # made before any event

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

    def trash(self, path: str, *, now: bool = False) -> None:
        if self.kind(path) is None:
            return
        prefix = path + "/"
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}
        self.files = {f: b for f, b in self.files.items() if not f.startswith(prefix) and f != path}
        self.links = {k: v for k, v in self.links.items() if not k.startswith(prefix) and k != path}
        self.trashed.append(path)

    def read_small(self, root: str, rel: str, limit: int = 1 << 20, *, head: bool = False) -> bytes | None:
        path = f"{root}/{rel}"
        data = self.files.get(path) if path not in self.links else None
        if data is not None and head:
            return data[:limit]
        return data if data is not None and len(data) <= limit else None

    def read_heads(self, root: str, rels: Iterable[str], limit: int) -> Iterator[bytes | None]:
        return (self.read_small(root, rel, limit, head=True) for rel in rels)

    def regular_dirs(self, root: str, rel: str, suffix: str) -> list[str]:
        folder = f"{root}/{rel}" if rel else root
        return sorted(posixpath.basename(d) for d in self.dirs
                      if posixpath.dirname(d) == folder and d.endswith(suffix) and d not in self.links)

    def links_in(self, root: str, rel: str) -> list[str]:
        folder = f"{root}/{rel}" if rel else root
        if any(folder == link or folder.startswith(link + "/") for link in self.links):
            return []  # a link on the way: never followed
        return sorted(posixpath.basename(k) for k in self.links if posixpath.dirname(k) == folder)

    def layer_site(self, workspace: str) -> str | None:
        venv = self.venvs.get(workspace)
        site = venv.get("layer_site") if venv else None
        return site if isinstance(site, str) else None

    def disk_usage(self, workspace: str) -> int:
        return sum(len(data) for path, data in self.files.items() if path.startswith(workspace + "/"))


@dataclass(frozen=True)
class _Tree:
    """A folder of a FakeWorkspaceIO as packed: its folders, files and links, by relative path."""

    dirs: frozenset[str]
    files: Mapping[str, bytes]
    links: Mapping[str, str]

    @classmethod
    def of(cls, io: FakeWorkspaceIO, folder: str) -> _Tree:
        prefix = folder.rstrip("/") + "/"
        return cls(frozenset(d[len(prefix):] for d in io.dirs if d.startswith(prefix)),
                   {p[len(prefix):]: b for p, b in io.files.items() if p.startswith(prefix)},
                   {p[len(prefix):]: t for p, t in io.links.items() if p.startswith(prefix)})


class FakeArchives:
    """The archives folder in memory (core.ports.ArchiveFiles); `packed` maps archive → the folder packed."""

    def __init__(self, io: FakeWorkspaceIO | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.folders: set[str] = set()
        self.packed: dict[str, str] = {}
        self.trees: dict[str, _Tree] = {}
        self._io = io

    def pack(self, source: str, target: str, *, max_bytes: int | None, progress: bool = False) -> int:
        size = self._io.disk_usage(source) if self._io is not None else 0
        if max_bytes is not None and size > max_bytes:
            raise TooLarge(f"{source} holds {size:,} bytes", rule="workspace.archive_max_size")
        self.files[target] = b"tar.zst"
        self.packed[target] = source
        if self._io is not None:  # what FakeUnarchiver brings back
            self.trees[target] = _Tree.of(self._io, source)
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
        self.packed.pop(path, None)  # other bytes now: not the archive packed there
        self.trees.pop(path, None)

    def remove(self, path: str) -> None:
        self.files.pop(path, None)
        self.trees.pop(path, None)


class FakeGitDefuser:
    """Moves nothing unless told: `moves[workspace]` is what a defuse of it reports."""

    def __init__(self) -> None:
        self.moves: dict[str, tuple[str, ...]] = {}
        self.calls: list[tuple[str, tuple[str, ...] | None]] = []

    def defuse(self, workspace: str, folders: Sequence[str] | None = None) -> tuple[str, ...]:
        self.calls.append((workspace, tuple(folders) if folders is not None else None))
        return self.moves.get(workspace, ())


class FakeHostProcesses:
    """core.ports.Processes: the pids in `running` are alive, each started at `starts[pid]` (7
    unless set), so a pid given with another start time is a reused one, as on the host;
    `sandboxes[folder]` are the pids of sandboxes running in a workspace folder (stopped by
    `stop_processes`), `orphans[folder]` those whose Warden died; `stopped` lists the folders stopped."""

    def __init__(self) -> None:
        self.running: set[int] = {os.getpid()}
        self.starts: dict[int, int] = {}
        self.sandboxes: dict[str, set[int]] = {}
        self.orphans: dict[str, set[int]] = {}
        self.stopped: list[str] = []

    def alive(self, pid: int, started: int | None = None) -> bool:
        return pid in self.running and (started is None or started == self.start_time(pid))

    def start_time(self, pid: int) -> int | None:
        return self.starts.get(pid, 7) if pid in self.running else None

    def _in(self, table: dict[str, set[int]], roots: Sequence[str]) -> set[int]:
        """The live pids of `table` working in a folder under one of `roots`."""
        return {pid for folder, pids in table.items()
                if any(folder == root or folder.startswith(root.rstrip("/") + "/") for root in roots)
                for pid in pids if pid in self.running}

    def _end(self, pids: set[int]) -> list[int]:
        self.running -= pids
        for table in (self.sandboxes, self.orphans):
            for folder in list(table):
                table[folder] -= pids
                if not table[folder]:
                    del table[folder]
        return sorted(pids)

    def stop_processes(self, root: str) -> list[int]:
        self.stopped.append(root)
        return self._end(self._in(self.sandboxes, [root]) | self._in(self.orphans, [root]))

    def orphan_sandboxes(self, roots: Sequence[str], keep: Collection[int] = ()) -> set[int]:
        return self._in(self.orphans, roots) - set(keep)

    def kill_orphan_sandboxes(self, roots: Sequence[str], keep: Collection[int] = ()) -> list[int]:
        return self._end(self.orphan_sandboxes(roots, keep))


class FakeLayerStore:
    """Layers by id in memory (core.ports.LayerStore); `writable` and `changed` mark damaged ones.
    With `io`, a layer's folders appear there too (health and reconcile look for them)."""

    def __init__(self, io: FakeWorkspaceIO | None = None) -> None:
        self.io = io
        self.layers: dict[str, Layer] = {}
        self.writable: set[str] = set()
        self.changed: set[str] = set()
        self.removed: list[str] = []
        self.held: list[str] = []  # one entry per holder, as the shared locks are

    def read(self, layer_id: str) -> Layer | None:
        return self.layers.get(layer_id)

    @contextlib.contextmanager
    def hold(self, layer_ids: Sequence[str]) -> Iterator[None]:
        mine = sorted(set(layer_ids))
        self.held.extend(mine)
        try:
            yield
        finally:
            for layer_id in mine:
                self.held.remove(layer_id)

    @contextlib.contextmanager
    def removable(self, layer_id: str) -> Iterator[bool]:
        yield layer_id not in self.held

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

    def sweep(self, *, dry_run: bool = False) -> int:
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
                     index: IndexOptions, domains: Sequence[str], template: str, progress: bool,
                     replace: bool = False) -> Layer:
        if self.fail is not None:
            raise self.fail
        self.builds.append(layer_id)
        path = self.store.path(layer_id)
        layer = Layer(layer_id, "python", path, size=100, template=template, packages=tuple(dependencies),
                      site_packages=f"{path}/venv/lib/python{interpreter.xy}/site-packages")
        self.store.put(layer)
        return layer

    def build_node(self, layer_id: str, *, package_json: str, runtime: NodeRuntime, registry: str,
                   template: str, progress: bool, replace: bool = False) -> Layer:
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
    """One run's watch (core.ports.QuotaWatch). Made by FakeDisk.watch, it measures on entry and
    sees what `FakeDisk.grow` adds while it is entered: growth past `quota` sets `breach` and
    calls the armed stop once, as the host's inotify watcher does. Made by hand, only `breach`
    set by the test stops a run (at `arm`)."""

    def __init__(self, start: Usage, quota: Quota | None = None, *, disk: FakeDisk | None = None,
                 root: str = "") -> None:
        self.start = start
        self.breach: str | None = None
        self.at: Usage | None = None
        self.notes: list[str] = []
        self.changes: Coalescer | None = None  # a fake sees no file changes
        self._quota = quota
        self._disk = disk
        self.root = root
        self._stop: Callable[[], None] | None = None
        self._closed = False

    def arm(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        if self.breach is not None:
            stop()

    def take(self) -> bool:
        return False  # a fake needs no thread: `see` stops the run

    def fileno(self) -> int:
        raise NotImplementedError("never taken")

    def due(self) -> float | None:
        return None

    def look(self) -> None:
        return None

    def see(self, now: Usage) -> None:
        """The workspace now holds `now` (FakeDisk.grow says so)."""
        if self._closed or self.breach is not None or self._quota is None:
            return
        key = self._quota.breach(self.start, now)
        if key is not None:
            self.breach, self.at = key, now
            if self._stop is not None:
                self._stop()

    def __enter__(self) -> FakeQuotaWatch:
        if self._disk is not None:
            self.start = self._disk.measure(self.root)
            self._disk.watching.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed, self._stop = True, None
        if self._disk is not None and self in self._disk.watching:
            self._disk.watching.remove(self)


class FakeDisk:
    """core.ports.DiskUsage: `free` bytes under the home, `usage[folder]` what a folder holds
    (`grow` adds to it and tells the watches), `missing` paths not made yet (with all below them)."""

    def __init__(self, free: int = 1 << 40) -> None:
        self.free = free
        self.usage: dict[str, Usage] = {}
        self.missing: set[str] = set()
        self.watching: list[FakeQuotaWatch] = []

    def nearest_existing(self, path: str) -> str:
        found = path
        while found != "/" and any(found == gone or found.startswith(gone.rstrip("/") + "/")
                                   for gone in self.missing):
            found = posixpath.dirname(found)
        return found

    def free_bytes(self, path: str) -> int:
        return self.free

    def measure(self, root: str) -> Usage:
        return self.usage.get(root, Usage(0, 0))

    def grow(self, root: str, bytes_: int, files: int = 1) -> None:
        """Folder `root` gains `bytes_` in `files` new files (a running command wrote them)."""
        now = self.usage[root] = self.measure(root).plus(bytes_, files)
        for watch in list(self.watching):
            if watch.root == root:
                watch.see(now)

    def watch(self, root: str, quota: Quota, *, home: str) -> FakeQuotaWatch:
        return FakeQuotaWatch(self.measure(root), quota, disk=self, root=root)


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

    def uv(self) -> str:
        return "/opt/fake/bin/uv"

    def run(self, folder: str, argv: Sequence[str], *, env: Mapping[str, str], ro_paths: Sequence[str] = (),
            rw_paths: Sequence[str] = (), domains: Sequence[str] = (), limits: Limits | None = None) -> RunResult:
        self.runs.append({"folder": folder, "argv": list(argv), "env": dict(env), "ro_paths": list(ro_paths),
                          "domains": list(domains), "limits": limits})
        return RunResult(exit_code=self.exit_code, stdout="", stderr=self.stderr, duration_s=0.0)


class FakeConfigFile:
    """core.ports.ConfigFile: `tables` as config.toml holds them (`set_value` writes there too),
    `values` every key set; `broken`: the file is not TOML (reads and writes refused)."""

    def __init__(self, tables: dict[str, object] | None = None, *, broken: bool = False) -> None:
        self.values: dict[str, object] = {}
        self.tables = tables or {}
        self.broken = broken

    def read(self) -> dict[str, object]:
        if self.broken:
            raise InvalidInput("config.toml: not valid TOML")
        return copy.deepcopy(self.tables)

    def set_value(self, key: str, value: object) -> None:
        if self.broken:
            raise InvalidInput("config.toml: not valid TOML")
        self.values[key] = value
        *tables, leaf = key.split(".")
        node = self.tables
        for name in tables:
            child = node.setdefault(name, {})
            assert isinstance(child, dict)
            node = child
        node[leaf] = value


class FakeHomeFiles:
    """core.ports.HomeFiles: `folders` made (path → mode; their parents made along in `parents`),
    `configs` written (path → text), `marked` once set up."""

    def __init__(self) -> None:
        self.folders: dict[str, int] = {}
        self.parents: set[str] = set()
        self.configs: dict[str, str] = {}
        self.marked = False

    def make_folder(self, path: str, mode: int) -> bool:
        if path in self.folders or path in self.parents:
            return False
        self.folders[path] = mode
        parent = posixpath.dirname(path)
        while parent not in ("/", ""):
            self.parents.add(parent)
            parent = posixpath.dirname(parent)
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
    """core.ports.KeyFiles: `made` the key files there; `resets` the stamps of each reset."""

    def __init__(self) -> None:
        self.made: set[str] = set()
        self.resets: list[str] = []

    def ensure(self) -> list[str]:
        new = [f"keys/{name}" for name in ("pepper", "master.key") if name not in self.made]
        self.made |= {"pepper", "master.key"}
        return new

    def reset(self, stamp: str) -> list[str]:
        """New keys made at once (the old ones kept aside), as the host's Keystore does."""
        self.resets.append(stamp)
        self.made = {"pepper", "master.key"}
        return ["keys/pepper", "keys/master.key"]


class _FakeEntry:
    def __init__(self, name: str, type: str, size: int) -> None:
        self.name, self.type, self.size, self.mode, self.mtime, self.nlink = name, type, size, 0o644, 0.0, 1

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "type": self.type, "size": self.size}


class _FakeRoot:
    """A WorkspaceRoot over a FakeWorkspaceIO folder: a link anywhere on a path is refused
    (Denied), one at its end is stat'ed, listed and deleted as a link, never followed; errors
    as the host's SafeRoot raises them."""

    def __init__(self, io: FakeWorkspaceIO, root: str, max_bytes: int | None) -> None:
        self._io, self._root, self._max = io, root.rstrip("/"), max_bytes

    def _path(self, path: str, *, final_link: bool = False) -> str:
        """The full path of workspace path `path`; Denied for a link on the way (and at its end
        unless `final_link`), NotFound for a file on the way."""
        parts = [p for p in path.split("/") if p]
        for part in parts:
            if part in (".", "..") or "\0" in part:
                raise InvalidInput(f"path {path!r} is not canonical; it holds {part!r}")
        full = self._root
        for index, part in enumerate(parts):
            full = f"{full}/{part}"
            last = index == len(parts) - 1
            if full in self._io.links and not (last and final_link):
                raise Denied(f"{path} goes through a symbolic link; Warden does not follow links",
                             rule="deny: symbolic link")
            if not last and full in self._io.files:
                raise NotFound(f"{path}: a part of the path is not a directory")
        return full

    def _entry(self, full: str) -> _FakeEntry:
        kind = self._io.kind(full)
        if kind is None:
            raise NotFound(f"no such file or directory: {full}")
        name = "/" if full == self._root else posixpath.basename(full)
        return _FakeEntry(name, kind, len(self._io.files.get(full, b"")) if kind == "file" else 0)

    def read_bytes(self, path: str, *, room: Callable[[int], None] | None = None) -> bytes:
        full = self._path(path)
        kind = self._io.kind(full)
        if kind is None:
            raise NotFound(f"no such file or directory: {path}")
        if kind == "dir":
            raise InvalidInput(f"{path} is a directory; list it instead")
        data = self._io.files[full]
        if room is not None:
            room(len(data))
        if self._max is not None and len(data) > self._max:
            raise TooLarge(f"{path} is {len(data)} bytes, over the limit of {self._max}")
        return data

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        try:
            return self.read_bytes(path).decode(encoding)
        except UnicodeDecodeError:
            raise InvalidInput(f"{path} is not valid {encoding} text; read it as bytes") from None

    def stat(self, path: str) -> _FakeEntry:
        return self._entry(self._path(path, final_link=True))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def list(self, path: str) -> list[_FakeEntry]:
        full = self._path(path)
        kind = self._io.kind(full)
        if kind != "dir":
            raise NotFound(f"no such file or directory: {path}" if kind is None
                           else f"{path}: a part of the path is not a directory")
        names = {posixpath.basename(p) for p in (*self._io.dirs, *self._io.files, *self._io.links)
                 if posixpath.dirname(p) == full and p != full}
        return [self._entry(f"{full}/{name}") for name in sorted(names)]

    def write_bytes(self, path: str, data: bytes) -> int:
        full = self._path(path)
        if full == self._root or self._io.kind(full) == "dir":
            raise InvalidInput(f"{path} is a directory; give a file path")
        if self._max is not None and len(data) > self._max:
            raise TooLarge(f"{len(data)} bytes for {path} is over the limit of {self._max}")
        self._io.write_atomic(full, data)
        return len(data)

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(path, text.encode(encoding))

    def mkdir(self, path: str) -> bool:
        full = self._path(path)
        kind = self._io.kind(full)
        if kind == "dir":
            return False
        if kind is not None:
            raise Conflict(f"{path} exists and is not a directory; remove it first or pick another name")
        self._io._parents(full)
        self._io.dirs.add(full)
        return True

    def delete(self, path: str, *, recursive: bool = False) -> str:
        full = self._path(path, final_link=True)
        if full == self._root:
            raise InvalidInput("the root cannot be deleted")
        kind = self._io.kind(full)
        if kind is None:
            raise NotFound(f"no such file or directory: {path}")
        prefix = full + "/"
        inside = [p for p in (*self._io.dirs, *self._io.files, *self._io.links) if p.startswith(prefix)]
        if kind == "dir" and inside and not recursive:
            raise Conflict(f"{path} is a directory that is not empty; delete it recursively")
        for gone in (full, *inside):
            self._io.dirs.discard(gone)
            self._io.files.pop(gone, None)
            self._io.links.pop(gone, None)
        return kind

    def move(self, source: str, destination: str, *, sha256: str | None = None) -> str:
        """As SafeRoot.move: never replaces, never into itself, a link moved as a link."""
        src, dst = self._path(source, final_link=True), self._path(destination, final_link=True)
        if sha256 is not None:
            data = self._io.files.get(src)
            if data is None or hashlib.sha256(data).hexdigest() != sha256:
                raise Conflict(f"{source} is no longer the file that was asked to be moved; nothing was moved",
                               rule="approval.changed")
        if self._root in (src, dst):
            raise InvalidInput("the root cannot be moved, nor anything moved onto it")
        if dst == src or dst.startswith(src + "/"):
            raise InvalidInput(f"cannot move {source} into itself ({destination})")
        kind = self._io.kind(src)
        if kind is None:
            raise NotFound(f"no such file or directory: {source}")
        if self._io.kind(dst) is not None:
            raise Conflict(f"{destination} already exists; Warden never replaces it with a move")
        self._io._parents(dst)
        for store in (self._io.files, self._io.links):
            for old in [p for p in store if p == src or p.startswith(src + "/")]:
                store[dst + old[len(src):]] = store.pop(old)  # type: ignore[index]
        for old in [p for p in self._io.dirs if p == src or p.startswith(src + "/")]:
            self._io.dirs.discard(old)
            self._io.dirs.add(dst + old[len(src):])
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
        if root in self._io.links:
            raise Denied(f"the workspace folder {root} is a symbolic link; Warden works only on a real folder",
                         rule="deny: symbolic link")
        if self._io.kind(root) != "dir":
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
    As the host's runner does: the output goes to the request's sinks and `net_events` to its
    `on_net_event`; `on_started` gets a stop function, and a run stopped by it ends killed
    (137, SIGKILL); output past `max_capture` is cut (`truncated`); the end of stderr is kept
    in `stderr_tail`, captured or not; on a `terminal` the output is written there alone."""

    def __init__(self, result: RunResult | None = None) -> None:
        self.result = result or RunResult(0, "", "", 0.01)
        self.error: BaseException | None = None
        self.net_events: list[FakeNetEvent] = []
        self.requests: list[SandboxRequest] = []

    def run(self, request: SandboxRequest) -> RunResult:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        stopped: list[bool] = []
        if request.on_started is not None:
            request.on_started(lambda: stopped.append(True))
        result = self.result
        if stopped:
            result = dataclasses.replace(result, exit_code=128 + 9, signal=9, timed_out=False)
        for event in self.net_events:
            if request.on_net_event is not None:
                request.on_net_event(event)
        if request.terminal is not None:  # the command's stdout and stderr are the terminal
            os.write(request.terminal, (result.stdout + result.stderr).encode())
            return dataclasses.replace(result, stdout="", stderr="", net_events=tuple(self.net_events))
        for text, sink in ((result.stdout, request.on_stdout), (result.stderr, request.on_stderr)):
            if text and sink is not None:
                sink(text.encode())
        tail = result.stderr_tail or result.stderr.encode()[-_ERR_TAIL:].decode("utf-8", "replace")
        if not request.capture:
            return dataclasses.replace(result, stdout="", stderr="", stderr_tail=tail,
                                       net_events=tuple(self.net_events))
        cap = request.max_capture
        truncated = result.truncated or (cap is not None and max(len(result.stdout.encode()),
                                                                 len(result.stderr.encode())) > cap)
        if cap is not None:
            result = dataclasses.replace(result, stdout=result.stdout.encode()[:cap].decode("utf-8", "replace"),
                                         stderr=result.stderr.encode()[:cap].decode("utf-8", "replace"))
        return dataclasses.replace(result, truncated=truncated, stderr_tail=tail, net_events=tuple(self.net_events))


_ERR_TAIL = 4096  # the bytes of stderr's end the host's runner keeps (adapters/sandbox/runner.py)


class FakeGitGuard:
    """One folder's guard (core.ports.GitGuard), by workspace-relative paths: `protected` are the
    person's .git entries (known), `new` the git structures that appeared since the last sweep
    (a `.git` entry, or a repository look-alike by any other name), `left` what a bot leaves
    during a run (only `after` sees it); `calls` records the sweeps.

    As the host's guard judges: a new `.git` seen while no bot was active is the person's; any
    other new structure is moved aside by the next sweep (named as it was, where the host adds
    QUARANTINE_SUFFIX and a tag)."""

    def __init__(self) -> None:
        self.protected: tuple[str, ...] = ()
        self.new: tuple[str, ...] = ()
        self.left: tuple[str, ...] = ()
        self.calls: list[str] = []

    def before(self, *, bot_active: bool) -> GitSweep:
        self.calls.append(f"before(bot_active={bot_active})")
        adopted = () if bot_active else tuple(path for path in self.new if adoptable(_git_control(path)))
        moved = tuple(path for path in self.new if path not in adopted)
        self.protected, self.new = (*self.protected, *adopted), ()
        return GitSweep(self.protected, moved)

    def after(self) -> GitSweep:
        self.calls.append("after")
        moved, self.new, self.left = (*self.new, *self.left), (), ()
        return GitSweep(self.protected, moved)


def _git_control(path: str) -> GitControl:
    return GitControl(path, "dotgit" if is_git_name(posixpath.basename(path)) else "gitdir", 0, 0)


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
    it or a folder above it is `missing` (not mounted, silently) or in `unsafe` (skipped with the
    reason given: a link on the way, Warden's state); beneath an opened folder such a path opens
    as None; `open` holds the descriptors not yet closed (`paths` what each names)."""

    def __init__(self) -> None:
        self.missing: set[str] = set()
        self.unsafe: dict[str, str] = {}
        self.open: set[int] = set()
        self.paths: dict[int, str] = {}
        self._next = 100

    def _fd(self, path: str) -> int:
        self._next += 1
        self.open.add(self._next)
        self.paths[self._next] = path
        return self._next

    def _why_not(self, path: str) -> str | None:
        """Why `path` cannot be opened: the reason it or a folder above it is unsafe, "missing", or None."""
        above = path
        while True:
            if above in self.unsafe:
                return self.unsafe[above]
            if above in self.missing:
                return "missing"
            if above in ("/", ""):
                return None
            above = posixpath.dirname(above)

    @contextlib.contextmanager
    def open_binds(self, binds: Sequence[Bind], workspace: str
                   ) -> Iterator[tuple[list[Bind], list[tuple[str, int]], list[str]]]:
        kept: list[Bind] = []
        fds: list[tuple[str, int]] = []
        skipped: list[str] = []
        for bind in binds:
            why = self._why_not(bind.path)
            if bind.path == workspace or bind.path.startswith(workspace + "/"):
                kept.append(bind)
            elif why is None:
                kept.append(bind)
                fds.append((bind.path, self._fd(bind.path)))
            elif why != "missing":
                skipped.append(f"{bind.path} ({why})")
        try:
            yield kept, fds, skipped
        finally:
            self.open -= {fd for _, fd in fds}

    @contextlib.contextmanager
    def open_beneath(self, dir_fd: int, rel: str) -> Iterator[int | None]:
        path = posixpath.join(self.paths.get(dir_fd, ""), rel)
        if self._why_not(path) is not None:
            yield None
            return
        fd = self._fd(path)
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
    in `io` as FakeArchives packed it (or with `contents`, relative path → bytes, when set); an
    archive that is not there (FileNotFoundError) or that FakeArchives never packed (damaged:
    Unavailable) restores nothing."""

    def __init__(self, io: FakeWorkspaceIO, archives: FakeArchives) -> None:
        self._io = io
        self._archives = archives
        self.contents: dict[str, bytes] = {}
        self.restored: list[tuple[str, str]] = []

    def restore(self, archive: str, folder: str) -> None:
        if self._io.kind(folder) is not None:
            raise FileExistsError(folder)
        if not self._archives.is_file(archive):
            raise FileNotFoundError(archive)
        if archive not in self._archives.packed and not self.contents:
            raise Unavailable(f"the archive {archive} is damaged: not an archive Warden packed")
        tree = self._archives.trees.get(archive, _Tree(frozenset(), {}, {}))
        self._io.make_folder(folder)
        for rel in sorted(tree.dirs):
            self._io.dirs.add(f"{folder}/{rel}")
        for rel, data in (self.contents or tree.files).items():
            self._io.write_atomic(f"{folder}/{rel}", data)
        for rel, target in ({} if self.contents else tree.links).items():
            self._io.links[f"{folder}/{rel}"] = target
        self.restored.append((archive, folder))

    def discard(self, archive: str) -> None:
        self._archives.remove(archive)


class FakeLeftovers:
    """core.ports.Leftovers: `temp[folder]` half-written archives with their writers' pids,
    `trash[root]`, `folder_names[root]` and `scratch[workspace]` as found; `removed` and `background` what was deleted
    (gone from what is found next, as on the host)."""

    def __init__(self) -> None:
        self.temp: dict[str, list[tuple[str, int]]] = {}
        self.trash: dict[str, list[str]] = {}
        self.folder_names: dict[str, list[str]] = {}
        self.scratch: dict[str, list[tuple[str, int]]] = {}  # workspace folder: git scratch with its maker's pid
        # workspace folder: Warden's temporary files (relative path, writer's pid and start time)
        self.workspace_temp: dict[str, list[tuple[str, int, int]]] = {}
        self.removed: list[str] = []
        self.background: list[str] = []

    def temp_archives(self, folder: str) -> list[tuple[str, int]]:
        return list(self.temp.get(folder, []))

    def trashed(self, root: str) -> list[str]:
        return sorted(self.trash.get(root, []))

    def folders(self, root: str) -> list[str]:
        return list(self.folder_names.get(root, []))

    def git_scratch(self, workspace: str) -> list[tuple[str, int]]:
        return sorted(self.scratch.get(workspace, []))

    def workspace_temps(self, workspace: str) -> list[tuple[str, int, int]]:
        return sorted(self.workspace_temp.get(workspace, []))

    def remove_workspace_temp(self, workspace: str, path: str) -> None:
        self.removed.append(f"{workspace}/{path}")
        self.workspace_temp[workspace] = [t for t in self.workspace_temp.get(workspace, []) if t[0] != path]

    def remove_scratch(self, path: str) -> None:
        self.removed.append(path)
        self.temp = {folder: [t for t in found if t[0] != path] for folder, found in self.temp.items()}
        self.scratch = {ws: [t for t in found if t[0] != path] for ws, found in self.scratch.items()}

    def remove_in_background(self, path: str) -> None:
        self.background.append(path)
        self.trash = {root: [p for p in found if p != path] for root, found in self.trash.items()}


class _FakeProcess:
    def __init__(self, process_id: str, pid: int, argv: tuple[str, ...], stdout: bytes, code: int | None) -> None:
        self.id, self.pid, self.argv, self.stdout = process_id, pid, argv, stdout
        self.exited: Exited | None = None if code is None else Exited(code, None)
        self.dying: Exited | None = None  # signalled, not yet reaped (FakeLiveSandboxes.reap_late)


def _script(argv: tuple[str, ...]) -> tuple[bytes, int | None]:
    """What a command the fake understands prints and how it ends: `sh -c "echo WORD; exit N"`
    (either part), anything else runs until it is signalled."""
    if len(argv) != 3 or argv[:2] != ("sh", "-c"):
        return b"", None
    out, code = b"", 0
    for part in (p.strip() for p in argv[2].split(";")):
        if part.startswith("echo "):
            out += part[5:].encode() + b"\n"
        elif part.startswith("exit "):
            code = int(part[5:])
    return out, code


class FakeLiveSandboxes:
    """core.ports.LiveSandboxes in memory: a sandbox is alive until stopped (or `end(id)`), its
    background processes run until signalled unless their argv is a script `_script` knows; a
    foreground run answers `result` (or the script's output and status). `bad` makes every
    supervisor call after start raise as a hostile supervisor's answer would."""

    def __init__(self, result: RunResult | None = None) -> None:
        self.result = result
        self.alive_ids: set[str] = set()
        self.undone: set[str] = set()  # sandboxes whose masks a change on the host undid
        self.started: list[tuple[str, SandboxRequest]] = []
        self.stopped: list[str] = []
        self.runs: list[tuple[str, SandboxRequest]] = []
        self.procs: dict[str, dict[str, _FakeProcess]] = {}
        self.kept: dict[str, Logs] = {}
        self.released: list[str] = []
        self.cpu_so_far: dict[str, float] = {}  # process id: CPU seconds a running one has used
        self.bad = False
        self.events: list[FakeNetEvent] = []  # what the proxy of a sandbox with network decided
        self.listening: dict[tuple[str, int], Callable[[], Connection]] = {}  # what `connect` reaches
        # Called in the middle of a stop, once the supervisor has ended and before the rest is
        # cleaned up: where another Warden process may look at the sandbox.
        self.during_stop: Callable[[LiveSandbox], None] | None = None
        # A signalled process ends only once waited for, as a real supervisor reaps it a moment
        # after the signal (a listing at once still shows it running).
        self.reap_late = False
        self._pids = iter(range(2, 1 << 20))

    def _check(self, sandbox: LiveSandbox) -> dict[str, _FakeProcess]:
        if self.bad:
            raise Unavailable("the live sandbox answered what Warden does not accept", rule="live.bad_answer")
        if sandbox.id not in self.alive_ids:
            raise Unavailable("the live sandbox does not answer", rule="live.unreachable")
        return self.procs[sandbox.id]

    def start(self, sandbox_id: str, request: SandboxRequest, *, idle_s: float) -> StartedSandbox:
        self.alive_ids.add(sandbox_id)
        self.started.append((sandbox_id, request))
        self.procs[sandbox_id] = {}
        return StartedSandbox(1000 + len(self.started), 7, 2000 + len(self.started), 7,
                              f"/run/{sandbox_id}/supervisor.sock", {"limits_via": "rlimit", "seccomp": True})

    def end(self, sandbox_id: str) -> None:
        """The sandbox ended by itself (idle, its supervisor killed)."""
        self.alive_ids.discard(sandbox_id)

    def alive(self, sandbox: LiveSandbox) -> bool:
        return sandbox.id in self.alive_ids

    def intact(self, sandbox: LiveSandbox) -> bool:
        return sandbox.id not in self.undone

    def run(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        self._check(sandbox)
        self.runs.append((sandbox.id, request))
        if self.result is not None:
            return self.result
        out, code = _script(request.argv)
        return RunResult(code if code is not None else 0, out.decode(), "", 0.01, seccomp=True)

    def spawn(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest, *,
              ring: int = RING_BYTES) -> dict[str, object]:
        procs = self._check(sandbox)
        out, code = _script(request.argv)
        procs[process_id] = _FakeProcess(process_id, next(self._pids), request.argv, out[-ring:], code)
        return {"host_pid": 4000 + len(procs), "host_start": 7, "cgroups": []}

    def _seen(self, proc: _FakeProcess) -> Supervised:
        return Supervised(proc.id, proc.pid, "exited" if proc.exited else "running", proc.exited,
                          0.0 if proc.exited else None, True)

    def listing(self, sandbox: LiveSandbox) -> list[Supervised]:
        return [self._seen(p) for p in self._check(sandbox).values()]

    def logs(self, sandbox: LiveSandbox, process_id: str) -> tuple[Logs, Exited | None]:
        proc = self._check(sandbox)[process_id]
        return Logs(proc.stdout, b""), proc.exited

    def follow(self, sandbox: LiveSandbox, process_id: str, *, tick: float = 1.0) -> Iterator[Chunk | None]:
        proc = self._check(sandbox)[process_id]
        if proc.stdout:
            yield Chunk("stdout", proc.stdout)
        if proc.exited is None:
            yield None
            return
        yield Chunk("", b"", proc.exited)

    def wait(self, sandbox: LiveSandbox, process_id: str, timeout: float) -> Supervised:
        proc = self._check(sandbox)[process_id]
        if proc.dying is not None:
            proc.exited, proc.dying = proc.dying, None
        return self._seen(proc)

    def signal(self, sandbox: LiveSandbox | None, process: LiveProcess, sig: int) -> None:
        if sandbox is None or sandbox.id not in self.alive_ids:
            return
        proc = self.procs[sandbox.id].get(process.id)
        if proc is not None and proc.exited is None:
            if self.reap_late:
                proc.dying = Exited(128 + sig, sig)
            else:
                proc.exited = Exited(128 + sig, sig)

    def forget(self, sandbox: LiveSandbox, process_id: str) -> None:
        self._check(sandbox).pop(process_id, None)

    def connect(self, sandbox: LiveSandbox, port: int) -> Connection:
        # A test puts what answers a port in `listening` (sandbox id, port): one end of a socketpair, say.
        self._check(sandbox)
        answer = self.listening.get((sandbox.id, port))
        if answer is None:
            raise NotListening
        return answer()

    def release(self, process: LiveProcess) -> bool:
        self.released.append(process.id)
        return False

    def usage(self, process: LiveProcess, exited: Exited | None = None) -> RunUsage | None:
        # What its supervisor reported once it ended; a running one's CPU from `cpu_so_far`.
        if exited is not None:
            return usage_of(cpu_s=exited.cpu_ms / 1000 if exited.cpu_ms is not None else None,
                            maxrss_kib=exited.maxrss_kib)
        return usage_of(cpu_s=self.cpu_so_far.get(process.id))

    def stop(self, sandbox: LiveSandbox) -> None:
        self.stopped.append(sandbox.id)
        self.alive_ids.discard(sandbox.id)
        during, self.during_stop = self.during_stop, None
        if during is not None:
            during(sandbox)

    def keep_logs(self, process_id: str, logs: Logs) -> None:
        self.kept[process_id] = logs

    def kept_logs(self, process_id: str) -> Logs | None:
        return self.kept.get(process_id)

    def drop_logs(self, process_id: str) -> None:
        self.kept.pop(process_id, None)

    def net_events(self, sandbox: LiveSandbox) -> tuple[list[FakeNetEvent], int]:
        events, self.events = self.events, []
        return events, 0


class FakeFeed:
    """One feed of FakeWatcher (core.ports.ChangeFeed): changes the test makes with
    `FakeWatcher.change` before a `next` are that call's one batch, as a burst is on the host."""

    def __init__(self, watcher: FakeWatcher, root: str, limit: int) -> None:
        import threading

        self._watcher, self.root, self.limit = watcher, root, limit
        self._pending: list[tuple[str, str]] = []
        self._cond = threading.Condition()
        self.gone = False
        self.closed = False
        self.notes: list[Notice] = []

    def _push(self, kind: str, path: str) -> None:
        with self._cond:
            self._pending.append((kind, path))
            self._cond.notify_all()

    def _remove(self) -> None:
        with self._cond:
            self.gone = True
            self._cond.notify_all()

    def next(self, timeout: float | None) -> Batch | None:
        from warden.core.watching import Coalescer, batch_of, ignored

        with self._cond:
            self._cond.wait_for(lambda: self._pending or self.gone or self.closed, timeout)
            if self.closed or (self.gone and not self._pending):
                return None
            batch = Coalescer(self.limit)
            for kind, path in self._pending:
                if not ignored(path):
                    batch.add(kind, path)  # type: ignore[arg-type]
            self._pending.clear()
        return batch_of(batch, "2026-01-01T00:00:00.000Z")

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        self._watcher.feeds.discard(self)

    def __enter__(self) -> FakeFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeWatcher:
    """In-memory file watching (core.ports.FileWatcher): the test says what changed."""

    def __init__(self) -> None:
        self.feeds: set[FakeFeed] = set()
        self.missing: set[str] = set()

    def watch(self, root: str, *, debounce_s: float, max_wait_s: float, limit: int) -> FakeFeed:
        if root in self.missing:
            raise FileNotFoundError(2, "No such file or directory", root)
        feed = FakeFeed(self, root, limit)
        self.feeds.add(feed)
        return feed

    def change(self, root: str, kind: str, path: str) -> None:
        """`path` (workspace-relative) in the folder `root` was added, modified or deleted."""
        for feed in list(self.feeds):
            if feed.root == root:
                feed._push(kind, path)

    def remove(self, root: str) -> None:
        """The folder `root` itself went."""
        self.missing.add(root)
        for feed in list(self.feeds):
            if feed.root == root:
                feed._remove()
