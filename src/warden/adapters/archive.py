"""Archives: a workspace as tar.zst, and safe unpacking of project blobs.

Blobs come from bots (`warden create --blob`, the bot protocol's `project_blob`): tar.gz,
zip, plain tar or tar.zst, or any of those base64-encoded, or a JSON document whose `files`
map (or `content.files`) holds path: text. Unpacking never trusts the archive: names must be
relative with no `..`, no device files, hard links refused, symlinks only to places inside
the workspace (checked on the real tree after everything is written, since links can chain),
and the sizes and file count are counted while writing, not taken from headers (zip bombs).
Regular files are written first with O_NOFOLLOW relative to held folders and links made
last, so no write goes through a link the archive planted.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import json
import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from warden.adapters.atomic import naming
from warden.adapters.safefs.fdtree import DirHandle, open_tree
from warden.adapters.safefs.trees import walk_tree
from warden.core.errors import InvalidInput, TooLarge
from warden.core.gitcontrol import is_git_name
from warden.core.policy import PROTECTED_WORKSPACE_PATHS
from warden.core.quota import file_charge

__all__ = ["BlobLimits", "pack_tree", "tree_size", "unpack_blob", "unpack_tree"]

_CHUNK = 1 << 16


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size = size / 1024  # type: ignore[assignment]
    return f"{size} B"


@dataclass(frozen=True)
class BlobLimits:
    max_bytes: int = 200 << 20
    max_files: int = 20000
    # Our own archives (unarchive) may restore links that point outside (the venv's python).
    allow_links_out: bool = False
    # ...and Warden's own workspace files (.warden/, .workspace.json); a bot's blob never may.
    allow_protected: bool = False
    # What the workspace's disk quota leaves (workspace.max_disk, max_files): None, no quota.
    disk_bytes: int | None = None
    disk_files: int | None = None


@dataclass
class _Entry:
    name: str
    kind: str  # "file", "dir", "symlink"
    mode: int
    target: str = ""
    reader: Any = None  # a callable returning a binary stream for files


class _Writer:
    """Writes entries below `root` safely, counting bytes and files."""

    def __init__(self, root: Path, limits: BlobLimits) -> None:
        self.root = root
        self.limits = limits
        self.bytes = 0
        self.files = 0
        self.disk = 0  # whole blocks, as the disk quota counts them (core/quota.py)
        self.links: list[tuple[str, str]] = []

    def clean_name(self, raw: str) -> list[str]:
        name = raw.replace("\\", "/") if "\\" in raw and "/" not in raw else raw
        if not name or name.startswith("/") or "\x00" in name:
            raise InvalidInput(f"blob entry {raw!r} has an absolute or empty path; only relative paths are allowed")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if any(p == ".." for p in parts):
            raise InvalidInput(f"blob entry {raw!r} climbs out with '..'; rebuild the archive without it")
        rel = "/" + "/".join(parts)
        if not self.limits.allow_protected and any(is_git_name(p) for p in parts):
            # A repository's control files make the person's git run programs they name.
            raise InvalidInput(f"blob entry {raw!r} is git control data (.git); leave .git out of "
                               "the archive (Warden keeps git files the person's)")
        if not self.limits.allow_protected and any(
                rel == p or rel.startswith(p + "/") for p in PROTECTED_WORKSPACE_PATHS):
            # Warden's own metadata (.warden/ holds the workspace's path lists and zones) and
            # files that run code on the host later (git hooks and config, shell rc files): a
            # blob that carried them would grant itself access or plant code outside the sandbox.
            raise InvalidInput(f"blob entry {raw!r} is a file Warden protects in every workspace; "
                               "leave it out of the archive")
        return parts

    def _count(self) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise TooLarge(f"the blob holds more than {self.limits.max_files} files and folders; "
                           "raise workspace.blob_max_files or send a smaller project")
        if self.limits.disk_files is not None and self.files > self.limits.disk_files:
            raise TooLarge(f"the blob holds more files and folders than the workspace may "
                           f"({self.limits.disk_files:,} left under workspace.max_files); raise it or "
                           "send a smaller project", rule="workspace.max_files")

    def _charge(self, size: int) -> None:
        self.disk += file_charge(size)
        if self.limits.disk_bytes is not None and self.disk > self.limits.disk_bytes:
            raise TooLarge(f"the blob takes more disk than the workspace may ({_human(max(self.limits.disk_bytes, 0))} "
                           "left under workspace.max_disk); raise it or send a smaller project",
                           rule="workspace.max_disk")

    def _parent(self, tree: DirHandle, parts: list[str]) -> DirHandle:
        return tree.path(*parts[:-1]) if len(parts) > 1 else DirHandle(os.dup(tree.fd))

    def add(self, tree: DirHandle, entry: _Entry) -> None:
        parts = self.clean_name(entry.name)
        if not parts:
            return
        self._count()
        if entry.kind == "dir":
            self._charge(1)  # a folder takes a block
            tree.path(*parts).close()
            return
        if entry.kind == "symlink":
            self._check_link(parts, entry.target)
            self.links.append(("/".join(parts), entry.target))
            return
        with self._parent(tree, parts) as parent:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=parent.fd)
            try:
                with entry.reader() as source:
                    size = 0
                    while chunk := source.read(_CHUNK):
                        self.disk -= file_charge(size)
                        size += len(chunk)
                        self._charge(size)
                        self.bytes += len(chunk)
                        if self.bytes > self.limits.max_bytes:
                            raise TooLarge(f"the blob unpacks to more than {_human(self.limits.max_bytes)}; "
                                           "raise workspace.blob_max_size or send a smaller project")
                        os.write(fd, chunk)
                os.fchmod(fd, 0o755 if entry.mode & 0o111 else 0o644)
            finally:
                os.close(fd)

    def _check_link(self, parts: list[str], target: str) -> None:
        if self.limits.allow_links_out:
            return
        if not target or target.startswith("/") or "\x00" in target:
            raise InvalidInput(f"blob link {'/'.join(parts)!r} points to {target!r}, outside the project")
        resolved = posixpath.normpath(posixpath.join(*parts[:-1], target) if len(parts) > 1 else target)
        if resolved == ".." or resolved.startswith("../"):
            raise InvalidInput(f"blob link {'/'.join(parts)!r} points to {target!r}, outside the project")

    def finish(self, tree: DirHandle) -> None:
        """Make the links, then prove each resolves inside the root on the real tree."""
        for name, target in self.links:
            parts = name.split("/")
            with self._parent(tree, parts) as parent:
                try:
                    os.symlink(target, parts[-1], dir_fd=parent.fd)
                except FileExistsError:
                    raise InvalidInput(f"blob entry {name!r} appears twice") from None
        if self.limits.allow_links_out:
            return
        root = os.path.realpath(self.root)
        for name, target in self.links:
            real = os.path.realpath(os.path.join(self.root, name))
            if real != root and not real.startswith(root + os.sep):
                raise InvalidInput(f"blob link {name!r} -> {target!r} leads outside the project")


def _tar_entries(stream: IO[bytes], mode: str) -> Iterator[_Entry]:
    with tarfile.open(fileobj=stream, mode=mode) as tar:  # type: ignore[call-overload]
        for member in tar:
            if member.isdir():
                yield _Entry(member.name, "dir", member.mode)
            elif member.issym():
                yield _Entry(member.name, "symlink", member.mode, member.linkname)
            elif member.islnk():
                raise InvalidInput(f"blob entry {member.name!r} is a hard link; archive the file itself")
            elif member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                yield _Entry(member.name, "file", member.mode, reader=lambda d=data: contextlib.nullcontext(d))
            else:
                raise InvalidInput(f"blob entry {member.name!r} is a device, fifo or other special file")


def _zip_entries(stream: IO[bytes]) -> Iterator[_Entry]:
    with zipfile.ZipFile(stream) as zf:
        for info in zf.infolist():
            mode = (info.external_attr >> 16) & 0xFFFF
            if info.is_dir():
                yield _Entry(info.filename, "dir", mode)
            elif stat.S_ISLNK(mode):
                if info.file_size > 4096:
                    raise InvalidInput(f"blob link {info.filename!r} is malformed")
                yield _Entry(info.filename, "symlink", mode, zf.read(info).decode("utf-8", "replace"))
            else:
                yield _Entry(info.filename, "file", mode, reader=lambda i=info: zf.open(i))


def _json_entries(data: Any) -> Iterator[_Entry]:
    files = data.get("files") if isinstance(data, dict) else None
    if files is None and isinstance(data, dict) and isinstance(data.get("content"), dict):
        files = data["content"].get("files")
    if not isinstance(files, dict):
        raise InvalidInput("the JSON blob has no \"files\" map of path: text")
    for name, text in files.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise InvalidInput("the JSON blob's \"files\" must map paths to text")
        payload = text.encode("utf-8")
        yield _Entry(name, "file", 0o644, reader=lambda p=payload: io.BytesIO(p))


def _entries(data: bytes, depth: int = 0) -> Iterator[_Entry]:
    if data[:2] == b"\x1f\x8b":
        yield from _tar_entries(io.BytesIO(data), "r:gz")
    elif data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        yield from _zip_entries(io.BytesIO(data))
    elif data[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
        yield from _tar_entries(reader, "r|")
    elif len(data) > 262 and data[257:262] == b"ustar":
        yield from _tar_entries(io.BytesIO(data), "r:")
    elif data.lstrip()[:1] == b"{":
        try:
            document = json.loads(data)
        except ValueError:
            raise InvalidInput("the blob looks like JSON but does not parse") from None
        yield from _json_entries(document)
    elif depth == 0:
        try:
            decoded = base64.b64decode(b"".join(data.split()), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("the blob is not a tar.gz, zip, tar, tar.zst, JSON files map or base64 "
                               "of one of them") from None
        yield from _entries(decoded, depth + 1)
    else:
        raise InvalidInput("the base64 blob does not hold a tar.gz, zip, tar, tar.zst or JSON files map")


def unpack_blob(data: bytes, root: Path, limits: BlobLimits) -> dict[str, int]:
    """Unpack a project blob into the existing folder `root`; returns files and bytes written."""
    if len(data) > limits.max_bytes:
        raise TooLarge(f"the blob is larger than {_human(limits.max_bytes)}; raise workspace.blob_max_size "
                       "or send a smaller project")
    writer = _Writer(root, limits)
    try:
        with open_tree(root) as tree:
            for entry in _entries(data):
                writer.add(tree, entry)
            writer.finish(tree)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise InvalidInput(f"the blob is a damaged archive: {exc}") from None
    except FileExistsError as exc:
        raise InvalidInput(f"blob entry {exc.filename!r} appears twice or clashes with a folder") from None
    return {"files": writer.files, "bytes": writer.bytes}


def unpack_tree(archive: Path, root: Path, limits: BlobLimits) -> dict[str, int]:
    """Unpack one of Warden's own `.tar.zst` archives into the existing folder `root`."""
    import zstandard

    writer = _Writer(root, limits)
    with open(archive, "rb") as raw, open_tree(root) as tree:
        reader = zstandard.ZstdDecompressor().stream_reader(raw)
        for entry in _tar_entries(reader, "r|"):
            writer.add(tree, entry)
        writer.finish(tree)
    return {"files": writer.files, "bytes": writer.bytes}


def tree_size(root: Path) -> int:
    """The bytes an archive of `root` would read: regular files' lengths (links not followed).

    The length, not the blocks on disk: a sparse file of 99 MB costs 4 KB of disk and 99 MB
    of reading, which is what packing it would do.
    """
    total = 0
    with _held(root) as root_fd:
        for _rel, _folders, others, fd in walk_tree(root_fd):
            for name in others:
                with contextlib.suppress(OSError):
                    st = os.lstat(name, dir_fd=fd)
                    if stat.S_ISREG(st.st_mode):
                        total += st.st_size
    return total


@contextlib.contextmanager
def _held(root: Path) -> Iterator[int]:
    """`root` open as a folder, for walk_tree. Walked by descriptor, without recursion: os.walk
    recurses (Python 3.11), and a bot's folders nested 1,500 deep made `warden archive` (and the
    janitor's archiving of an idle workspace) an internal error, RecursionError; and names are
    looked up beneath their folder's descriptor, so a path past PATH_MAX is packed too."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def pack_tree(root: Path, target: Path, *, max_bytes: int | None = None, progress: bool = False) -> int:
    """Write `root` as tar.zst at `target` (atomically); symlinks are stored, never followed.
    TooLarge, before reading anything, when its files hold more than `max_bytes`. `progress`:
    a bar on stderr of the bytes packed against the folder's size (none under a mebibyte: it
    would show "0.0 MiB" and be gone before anyone reads it)."""
    import zstandard

    size = tree_size(root) if max_bytes is not None or progress else 0
    if max_bytes is not None and size > max_bytes:
        # The workspace by its folder's name: a bot that deletes a workspace it made reads this,
        # and the host path would tell it Warden's home and the person's.
        raise TooLarge(f"workspace {root.name} holds {size:,} bytes of files, over the archive limit of {max_bytes:,} "
                       "(workspace.archive_max_size): delete what it need not keep, raise the setting, "
                       "or destroy it with --no-archive")

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with naming(target.parent), open(tmp, "wb") as raw:
            compressor = zstandard.ZstdCompressor(level=3)
            with compressor.stream_writer(raw, closefd=False) as zst, \
                    tarfile.open(fileobj=zst, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                _add_tree(tar, root, _packing(root, size) if progress and size >= 1 << 20 else None)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return target.stat().st_size


def _packing(root: Path, size: int) -> Callable[[int], None]:
    """What `_add_tree` calls with each piece it packs: a bar of the bytes packed (adapters/envs/progress.py)."""
    from warden.adapters.envs.progress import Progress

    bar = Progress(f"archiving {root.name}", 1)
    bar.step(f"packing {size / 1048576:.1f} MiB")
    packed = [0]

    def add(n: int) -> None:
        packed[0] += n
        bar.update(min(packed[0], size), max(size, 1), "of the bytes packed", final=packed[0] >= size)

    return add


def _add_tree(tar: tarfile.TarFile, root: Path, on_read: Callable[[int], None] | None = None) -> None:
    """Folders, regular files and symlinks below `root`; hard links stored as plain files,
    sockets, fifos and devices a bot might leave skipped, files opened with O_NOFOLLOW
    (`on_read`: told the length of each piece of a file as it is packed)."""
    with _held(root) as root_fd:
        for rel_dir, folders, others, fd in walk_tree(root_fd):  # never enters a link
            for name in folders + others:
                _add_entry(tar, fd, name, f"{rel_dir}/{name}" if rel_dir else name, on_read)


def _add_entry(tar: tarfile.TarFile, fd: int, name: str, arcname: str,
               on_read: Callable[[int], None] | None) -> None:
    """Entry `name` of the folder open as `fd`, as `arcname`."""
    try:
        st = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return
    info = tarfile.TarInfo(arcname)
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(name, dir_fd=fd)
        tar.addfile(info)
    elif stat.S_ISREG(st.st_mode):
        try:
            file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return
        with os.fdopen(file_fd, "rb") as handle:
            fst = os.fstat(handle.fileno())
            if not stat.S_ISREG(fst.st_mode):
                return
            info.size = fst.st_size
            tar.addfile(info, _Exactly(handle, fst.st_size, on_read))


class _Exactly(io.RawIOBase):
    """A file cut or padded to the size recorded in its header (it may change while packed)."""

    def __init__(self, handle: IO[bytes], size: int, on_read: Callable[[int], None] | None = None) -> None:
        self._handle = handle
        self._left = size
        self._on_read = on_read  # told each piece's length as tarfile copies it (the progress bar)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n < 0 else min(n, self._left)
        data = self._handle.read(n) or b""
        if len(data) < n:
            data += b"\0" * (n - len(data))
        self._left -= len(data)
        if self._on_read is not None:
            self._on_read(len(data))
        return data
