"""The policy files on disk: the allowed/denied path lists and a workspace's zones.yaml.

Lists live in three JSON files (global `$WARDEN_HOME/sandbox_paths.json`, workspace
`<ws>/.warden/sandbox.json`, session `<ws>/.warden/sessions/<id>/sandbox.json`). A change is
a read-modify-write under an exclusive `flock` on a side lock file, written with
`write_atomic`, so two writers never lose each other's entries and a reader never sees a
torn file (a plain `json.load` + `write_text` would lose both).
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from warden.adapters.atomic import exclusive, write_atomic
from warden.core.errors import Denied, InvalidInput

__all__ = ["HostPolicyFiles", "read_doc", "read_zones_doc", "stamp", "update_doc"]

# How long after its last change a policy file's identity is trusted to show its next change.
_SETTLE_NS = 1_000_000_000
_fresh = itertools.count(1)


def _read(path: Path, shown: str | None = None) -> bytes | None:
    """The bytes of a policy file, None when absent; a link in its place is refused, not followed.
    `shown`: how messages name the file (a bot must not learn where Warden keeps it), else its path."""
    name = shown or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Denied(f"{name} is a symbolic link; replace it with a real file",
                         rule="deny: policy file is a link") from None
        raise
    # Judged before `fdopen`, which raises IsADirectoryError (an internal error) for a folder.
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidInput(f"{name} is not a regular file; replace it with one")
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def read_doc(path: Path, shown: str | None = None) -> dict[str, object]:
    """The JSON object in `path`; empty when the file does not exist. `shown` as in `_read`."""
    name = shown or str(path)
    raw = _read(path, shown)
    if raw is None:
        return {}
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{name} is not valid JSON ({exc}); fix or remove the file") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{name} must hold a JSON object with allowed_paths and denied_paths")
    return doc


def update_doc(path: Path, change: Callable[[dict[str, object]], Mapping[str, object]]) -> dict[str, object]:
    """Apply `change` to the document in `path` under an exclusive lock; returns the new document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path.with_name(path.name + ".lock"), mode=0o644):
        new = dict(change(read_doc(path)))
        write_atomic(path, (json.dumps(new, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        return new


def read_zones_doc(path: Path, shown: str | None = None) -> object:
    """The YAML document of a workspace's zones file, or None when there is none; `shown` as in `_read`."""
    name = shown or str(path)
    data = _read(path, shown)
    if data is None:
        return None
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} is not UTF-8 text; fix the file") from None
    import yaml  # only workspaces that configure zones pay for the YAML parser

    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{name} is not valid YAML: {str(exc).splitlines()[0]}; fix the file") from None


def stamp(paths: Iterable[Path]) -> tuple[tuple[int, int, int], ...]:
    """A cheap fingerprint of files (inode, size, mtime): changes when any of them changes."""
    out: list[tuple[int, int, int]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            out.append((0, 0, 0))
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class HostPolicyFiles:
    """The PolicyFiles port: the path-policy documents (allowed/denied paths, zones) on disk."""

    def read_doc(self, path: str, shown: str | None = None) -> dict[str, object]:
        return read_doc(Path(path), shown)

    def update_doc(self, path: str, change: Callable[[dict[str, object]], Mapping[str, object]],
                   ) -> dict[str, object]:
        return update_doc(Path(path), change)

    def read_zones_doc(self, path: str, shown: str | None = None) -> object:
        return read_zones_doc(Path(path), shown)

    def stamp(self, paths: Sequence[str]) -> tuple[tuple[int, int, int], ...]:
        return stamp(Path(p) for p in paths)

    def identity(self, paths: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        out: list[tuple[int, ...]] = []
        settled = time.time_ns() - _SETTLE_NS
        for path in paths:
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                out.append((0, 0, 0, 0, 0, 0, 0))
            else:
                # Changed a moment ago: a second write in the same tick of the kernel's coarse
                # clock (no fine-grained stamps before Linux 6.13), of the same size, would leave
                # all the rest as it is, after a reader read the first. Such a file is like no
                # earlier one of itself until it has settled.
                fresh = next(_fresh) if st.st_ctime_ns > settled else 0
                out.append((st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, fresh))
        return tuple(out)

    def is_link(self, path: str) -> bool:
        return os.path.islink(path)

    def make_folder(self, path: str) -> None:
        Path(path).mkdir(mode=0o755, exist_ok=True)
