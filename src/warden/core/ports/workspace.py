"""Workspace folders, env layers, installs and health checks on the host."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warden.core.layers import IndexOptions, Interpreter, Layer, NodeRuntime
    from warden.core.limits import Limits
    from warden.core.runs import RunResult

__all__ = [
    "ArchiveFiles",
    "GitDefuser",
    "LayerBuilder",
    "LayerStore",
    "NpmTarballs",
    "ResolutionCache",
    "SandboxTools",
    "WorkspaceFolders",
    "WorkspaceReads",
]


class WorkspaceFolders(Protocol):
    """Warden's own writes into workspace folders on this machine ("host workspace I/O"): a link
    a bot planted where Warden writes is replaced or refused, never followed."""

    def kind(self, path: str) -> str | None:
        """What `path` itself is (file, dir, symlink, other), links not followed; None: nothing there."""
        ...

    def changed_at(self, path: str) -> float | None:
        """When `path` itself (no link followed) last changed, as seconds since the epoch: its
        ctime, which a copy (`cp -a`) cannot set back as it can an mtime; None: nothing there."""
        ...

    def exists(self, path: str) -> bool:
        """Whether `path` names something, following links (a dangling link: False)."""
        ...

    def is_dir(self, path: str) -> bool:
        """Whether `path` is a folder, following links."""
        ...

    def is_file(self, path: str) -> bool:
        """Whether `path` is a regular file, following links."""
        ...

    def make_folder(self, path: str) -> None:
        """Make folder `path` (mode 0755; its parents as needed); FileExistsError when it is there."""
        ...

    def read_bytes(self, path: str) -> bytes | None:
        """A file of Warden's own (a layer's lock file); None when it is missing."""
        ...

    def read_small(self, root: str, rel: str, limit: int = 1 << 20) -> bytes | None:
        """A regular file beneath `root` that a bot may have written: resolved by descriptor (no
        link followed), at most `limit` bytes; None when it is missing, not a file or bigger."""
        ...

    def write_atomic(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Replace `path` with `data`: a reader sees the old or the new file, never a torn one."""
        ...

    def write_thin_venv(self, workspace: str, *, interpreter: str, version: str, layer_site: str | None,
                        scripts: Mapping[str, str]) -> None:
        """Write (or repair) `workspace/.venv` on top of a layer's site-packages; installed packages stay."""
        ...

    def link_node_modules(self, workspace: str, layer: Layer) -> None:
        """Give `workspace/node_modules` one link per package of Node layer `layer`; real entries stay."""
        ...

    def write_new_files(self, workspace: str, files: Mapping[str, str | bytes]) -> None:
        """Write project files (name -> content) beneath `workspace`; one that is already there is kept."""
        ...

    def unpack_blob(self, blob: bytes, workspace: str, *, max_bytes: int, max_files: int,
                    disk_bytes: int | None, disk_files: int | None) -> dict[str, int]:
        """Unpack a bot's project blob into folder `workspace` (no link out, no `.git`, counted as it
        is written); the files and bytes written. TooLarge past a limit, InvalidInput when damaged."""
        ...

    def trash(self, path: str, *, now: bool = False) -> None:
        """Rename `path` into the trash beside it (instant) and delete it in the background;
        `now`: delete it before returning (what it took is free once this returns)."""
        ...


class WorkspaceReads(Protocol):
    """Bounded reads of the files a bot controls (health checks): beneath the workspace, never
    following a link, never blocking on a FIFO."""

    def read_small(self, root: str, rel: str, limit: int = 1 << 20, *, head: bool = False) -> bytes | None:
        """The bytes of regular file `rel` beneath `root` (None: missing, not a regular file, over
        `limit`; with `head`, the first `limit` bytes of a larger one instead)."""
        ...

    def read_heads(self, root: str, rels: Iterable[str], limit: int) -> Iterator[bytes | None]:
        """The first `limit` bytes of each regular file `rels` beneath `root`, in order, one at a
        time (None: missing, not a regular file, reached through a link): one open of `root`."""
        ...

    def regular_dirs(self, root: str, rel: str, suffix: str) -> list[str]:
        """Names of the real folders in folder `rel` beneath `root` ending in `suffix`."""
        ...

    def links_in(self, root: str, rel: str) -> list[str]:
        """Names of the symbolic links in folder `rel` beneath `root`, reached through no link
        (none when `rel` is one, or missing)."""
        ...

    def layer_site(self, workspace: str) -> str | None:
        """The layer site-packages the workspace's thin venv names, or None."""
        ...

    def disk_usage(self, workspace: str) -> int:
        """Bytes on disk of the workspace's files (links not followed, so layers are not counted)."""
        ...


class ArchiveFiles(Protocol):
    """Warden's archives folder: workspace folders packed as tar.zst, and the records beside them."""

    def pack(self, source: str, target: str, *, max_bytes: int | None, progress: bool = False) -> int:
        """Write folder `source` as tar.zst at `target` (atomically; links stored, never followed);
        its size. TooLarge, before reading anything, when its files hold over `max_bytes`.
        `progress`: a bar on stderr of the bytes packed (a person waiting on `warden archive`)."""
        ...

    def make_folder(self, path: str) -> None:
        """Make folder `path` (mode 0700) unless it is there."""
        ...

    def names(self, folder: str) -> list[str]:
        """The entries of `folder` ([] when it does not exist)."""
        ...

    def is_file(self, path: str) -> bool: ...

    def read_bytes(self, path: str) -> bytes | None: ...

    def write_atomic(self, path: str, data: bytes, *, mode: int = 0o600) -> None: ...

    def remove(self, path: str) -> None:
        """Delete file `path` (gone already: fine)."""
        ...


class GitDefuser(Protocol):
    """Folders a bot's write or blob shaped like a git repository, defused before anyone's git
    takes them for one (the GitGuard above sweeps around runs; this is the check after one write)."""

    def defuse(self, workspace: str, folders: Sequence[str] | None = None) -> tuple[str, ...]:
        """Set aside what is not the person's in `folders` of `workspace` (workspace-relative, ""
        the root; None: anywhere); the workspace paths moved."""
        ...


class LayerStore(Protocol):
    """Env layers on disk, by id: built once, sealed read-only, shared by every workspace."""

    def read(self, layer_id: str) -> Layer | None:
        """The layer, None when it is missing or broken (rebuilt on next use)."""
        ...

    def all(self) -> list[Layer]: ...

    def path(self, layer_id: str) -> str: ...

    def read_only(self, layer_id: str) -> bool:
        """Whether the layer's folder is sealed (no write bit)."""
        ...

    def tampered(self, layer_id: str) -> bool:
        """Whether the layer's files differ from what was built."""
        ...

    def remove(self, layer_id: str) -> None: ...

    def hold(self, layer_ids: Sequence[str]) -> AbstractContextManager[None]:
        """Keep `layer_ids` from `removable` (and so from a prune) while a workspace is set up on
        them and until its row names them; across processes. Several may hold one at once."""
        ...

    def removable(self, layer_id: str) -> AbstractContextManager[bool]:
        """Whether nobody holds the layer; while True, nobody can start to (no waiting)."""
        ...

    def sweep(self, *, dry_run: bool = False) -> int:
        """Remove the build and trash folders crashed processes left; how many (`dry_run`: how
        many there are, none removed)."""
        ...


class LayerBuilder(Protocol):
    """Finds the interpreters of this machine and builds layers for them (untrusted code sandboxed)."""

    @property
    def builder_version(self) -> str:
        """What a Python layer's id depends on besides its inputs: bumped when builds change."""
        ...

    @property
    def machine(self) -> str:
        """The CPU architecture (Node layers depend on it)."""
        ...

    def find_python(self, wanted: str | None, *, at_least: bool) -> Interpreter:
        """An installed interpreter of version X.Y `wanted` (or newer, `at_least`); NotFound."""
        ...

    def find_node(self, major: str | None) -> NodeRuntime:
        """`node` and `npm` on PATH, of major version `major` when given; NotFound."""
        ...

    def has_interpreter(self, executable: str) -> bool:
        """Whether the interpreter a cached resolution names is still installed."""
        ...

    def build_python(self, layer_id: str, *, dependencies: Sequence[str], interpreter: Interpreter,
                     index: IndexOptions, domains: Sequence[str], template: str, progress: bool,
                     replace: bool = False) -> Layer:
        """Build Python layer `layer_id` (found as it is when another builder finished it first);
        uv runs sandboxed, reaching `domains` only. Unavailable when the build fails. `replace` (a
        rebuild): built even when it exists, and swapped in for it in one step once built."""
        ...

    def build_node(self, layer_id: str, *, package_json: str, runtime: NodeRuntime, registry: str,
                   template: str, progress: bool, replace: bool = False) -> Layer:
        """Build Node layer `layer_id` with npm (no install scripts). Unavailable when it fails.
        `replace`: as for build_python."""
        ...


class ResolutionCache(Protocol):
    """Templates already bound to this machine, by key (creating a workspace then parses no YAML)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...

    def clear(self) -> None: ...


class NpmTarballs(Protocol):
    def package_name(self, tarball: str) -> str:
        """The package name inside npm tarball `tarball` (package/package.json); InvalidInput if it is none."""
        ...


class SandboxTools(Protocol):
    """Warden's own tools (pip, npm, uv) run in the sandbox: one folder read-write, the network
    limited to `domains` (none: no network)."""

    def available(self) -> bool:
        """Whether the sandbox (bubblewrap) is installed here."""
        ...

    def trust(self) -> tuple[dict[str, str], list[str]]:
        """The caller's TLS trust variables that name existing files, and those paths (to mount)."""
        ...

    def uv(self) -> str:
        """The uv binary (a host path, mounted read-only where it runs); Unavailable when missing."""
        ...

    def run(self, folder: str, argv: Sequence[str], *, env: Mapping[str, str], ro_paths: Sequence[str] = (),
            rw_paths: Sequence[str] = (), domains: Sequence[str] = (), limits: Limits | None = None,
            ) -> RunResult:
        """Run `argv` in `folder` (limits: the tool defaults when None)."""
        ...
