"""Path containment and workspace-relative canonical paths (pure: never touches the filesystem).

Containment compares whole path segments after lexical normalisation, never string
prefixes: `/safe-evil` is not inside `/safe` (CVE-2025-53110 in the MCP filesystem server
was exactly that prefix check). Lexical answers say nothing about symbolic links; the
safe file layer (adapters/safefs) refuses links while it opens, so that the path decided
here is the path opened.
"""

from __future__ import annotations

from collections.abc import Sequence

from warden.core.errors import InvalidInput

__all__ = ["MAX_PATH", "canonical", "is_inside", "normalize", "segments", "within"]

# Linux PATH_MAX: a longer path cannot be opened, so it is refused before any work.
MAX_PATH = 4096


def normalize(path: str) -> str:
    """Lexically normalise an absolute POSIX path: `.`, `..` and repeated `/` (`/..` is `/`)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part == "" or part == ".":
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def is_inside(path: str, root: str) -> bool:
    """True when normalised `path` is `root` or below it (both already normalised)."""
    if root == "/":
        return True
    return path == root or path.startswith(root + "/")


def within(path: str, roots: Sequence[str]) -> bool:
    """True exactly when absolute `path` is at or below one of `roots`, by whole segments; False
    for an empty, relative or non-`str` path, any NUL, or no usable root (never raises)."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        return False
    # A bare string is a sequence of one-character "roots"; "/" among them would admit
    # everything, so a caller who forgot the list brackets gets a refusal, not a hole.
    if isinstance(roots, str | bytes) or not roots:
        return False
    clean: list[str] = []
    for root in roots:
        if not isinstance(root, str):
            continue
        if "\0" in root:
            return False
        if not root.startswith("/"):
            continue  # empty and relative roots are skipped
        clean.append(normalize(root))
    target = normalize(path)
    return any(is_inside(target, root) for root in clean)


def canonical(path: str) -> str:
    """A workspace-relative path as `/a/b` (`/` is the workspace root), or InvalidInput.

    Leading `/` is optional (`notes/a.txt` and `/notes/a.txt` are the same file). `.` and
    repeated `/` are dropped; `..` is resolved lexically and may not climb above the root.
    Nothing else is changed: no Unicode normalisation, no stripping of quotes or spaces,
    so `/safe ` and `/safe` stay two different names, as they are on disk.
    """
    if not isinstance(path, str):
        raise InvalidInput(f"path must be text, not {type(path).__name__}")
    if path == "":
        raise InvalidInput("empty path: give a workspace path such as / or /notes/a.txt")
    if "\0" in path:
        raise InvalidInput("path contains a NUL byte: remove it")
    if len(path) * 4 > MAX_PATH and len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise InvalidInput(f"path is longer than {MAX_PATH} bytes: use a shorter path")
    # Fast path: no empty, "." or ".." segment anywhere (no "//", no segment starting with ".").
    rooted = path if path.startswith("/") else "/" + path
    if "//" not in rooted and "/." not in rooted:
        return rooted[:-1] if len(rooted) > 1 and rooted.endswith("/") else rooted
    parts: list[str] = []
    for part in path.split("/"):
        if part == "" or part == ".":
            continue
        if part == "..":
            if not parts:
                raise InvalidInput(
                    f"path {path!r} climbs above the workspace root: use a path inside the workspace")
            parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def segments(path: str) -> tuple[str, ...]:
    """The names of a canonical path: `/a/b` → ("a", "b"), `/` → ()."""
    return tuple(p for p in path.split("/") if p)
