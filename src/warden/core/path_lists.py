"""Allowed and denied path lists at three levels (the `warden sandbox` command's files), pure.

Each level (global, workspace, session) is one JSON document:
`{"allowed_paths": [...], "denied_paths": [...]}` whose entries are strings or objects
`{"path", "added_at"[, "mode"]}`. `mode` (ro/rw, default rw) is Warden's addition for
`sandbox add --mode`. Parsing, merging, and the `add`/`remove`/`forget` edits live here;
deciding with them lives in core/policy.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, cast

from warden.core.errors import InvalidInput
from warden.core.paths import normalize
from warden.core.zones import Mode

__all__ = ["LEVELS", "Level", "PathRule", "PathRules", "parse_paths_doc", "with_allowed", "with_denied",
           "without_path"]

Level = Literal["global", "workspace", "session"]
LEVELS: tuple[Level, ...] = ("global", "workspace", "session")
# Reported in this order when several denials match: the narrowest scope first.
_DENY_ORDER: tuple[Level, ...] = ("session", "workspace", "global")

@dataclass(frozen=True)
class PathRule:
    """One entry of an allowed_paths / denied_paths list at one level."""

    path: str
    action: Literal["allow", "deny"]
    level: Level
    mode: Mode = "rw"
    added_at: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "action": self.action, "source": self.level,
                "mode": self.mode if self.action == "allow" else None, "added_at": self.added_at}


@dataclass(frozen=True)
class PathRules:
    """The merged lists of all levels, split for fast lookup."""

    allowed: tuple[PathRule, ...] = ()
    denied: tuple[PathRule, ...] = ()

    @classmethod
    def merge(cls, rules: Iterable[PathRule]) -> PathRules:
        every = list(rules)
        allowed = [r for r in every if r.action == "allow"]
        denied = sorted((r for r in every if r.action == "deny"), key=lambda r: _DENY_ORDER.index(r.level))
        # Most specific allowance first, so the first covering one is the one that decides.
        allowed.sort(key=lambda r: (-len(r.path), _DENY_ORDER.index(r.level)))
        return cls(tuple(allowed), tuple(denied))

    def all(self) -> list[PathRule]:
        order = {lvl: i for i, lvl in enumerate(LEVELS)}
        return sorted(self.allowed + self.denied, key=lambda r: (order[r.level], r.action, r.path))


def _entry_path(entry: object, where: str, home: str | None) -> tuple[str, Mode, str | None]:
    mode: object = "rw"
    added_at: object = None
    if isinstance(entry, Mapping):
        raw = entry.get("path")
        mode = entry.get("mode") or "rw"
        added_at = entry.get("added_at")
    else:
        raw = entry
    if not isinstance(raw, str) or not raw:
        raise InvalidInput(f"{where}: entry {entry!r} has no path; use a string or {{\"path\": ...}}")
    if "\0" in raw:
        raise InvalidInput(f"{where}: path {raw!r} contains a NUL byte; remove the entry")
    if home and (raw == "~" or raw.startswith("~/")):
        raw = home.rstrip("/") + raw[1:]
    if not raw.startswith("/"):
        raise InvalidInput(f"{where}: path {raw!r} is not absolute; write it as /full/path")
    if mode not in ("ro", "rw"):
        raise InvalidInput(f"{where}: mode {mode!r} of {raw} is not ro or rw")
    return normalize(raw), mode, added_at if isinstance(added_at, str) else None


def parse_paths_doc(doc: object, level: Level, *, where: str, home: str | None = None) -> list[PathRule]:
    """One level's document → rules; entries are strings or {path, added_at[, mode]}."""
    if doc is None:
        return []
    if not isinstance(doc, Mapping):
        raise InvalidInput(f"{where}: expected a JSON object with allowed_paths and denied_paths")
    rules: list[PathRule] = []
    for key, action in (("allowed_paths", "allow"), ("denied_paths", "deny")):
        entries = doc.get(key) or []
        if not isinstance(entries, list):
            raise InvalidInput(f"{where}: {key} must be a list")
        for entry in entries:
            path, mode, added_at = _entry_path(entry, where, home)
            rules.append(PathRule(path, cast(Literal["allow", "deny"], action), level, mode, added_at))
    return rules


def _without(entries: object, path: str, home: str | None = None) -> list[object]:
    kept: list[object] = []
    for entry in entries if isinstance(entries, list) else []:
        raw = entry.get("path") if isinstance(entry, Mapping) else entry
        if isinstance(raw, str) and home and (raw == "~" or raw.startswith("~/")):
            raw = home.rstrip("/") + raw[1:]  # as parse_paths_doc reads it
        if isinstance(raw, str) and raw.startswith("/") and "\0" not in raw and normalize(raw) == path:
            continue
        kept.append(entry)
    return kept


def with_allowed(doc: Mapping[str, object], path: str, *, mode: Mode, added_at: str) -> dict[str, object]:
    """`sandbox add`: the path joins allowed_paths (replacing an older entry) and leaves denied_paths."""
    path = normalize(path)
    out = dict(doc)
    out["allowed_paths"] = [*_without(doc.get("allowed_paths"), path),
                            {"path": path, "added_at": added_at, "mode": mode}]
    out["denied_paths"] = _without(doc.get("denied_paths"), path)
    return out


def with_denied(doc: Mapping[str, object], path: str, *, added_at: str) -> dict[str, object]:
    """`sandbox remove`: the path joins denied_paths and leaves allowed_paths."""
    path = normalize(path)
    out = dict(doc)
    out["denied_paths"] = [*_without(doc.get("denied_paths"), path), {"path": path, "added_at": added_at}]
    out["allowed_paths"] = _without(doc.get("allowed_paths"), path)
    return out


def without_path(doc: Mapping[str, object], path: str, *,
                 home: str | None = None) -> tuple[dict[str, object], tuple[Literal["allow", "deny"], ...]]:
    """`sandbox forget`: the path leaves both lists of this level, so the other levels decide it
    again; returns the new document and which lists held it (none: the document unchanged).
    Entries written `~/...` by hand match by the path they stand for, as `parse_paths_doc` reads them."""
    path = normalize(path)
    out = dict(doc)
    dropped: list[Literal["allow", "deny"]] = []
    for key, action in (("allowed_paths", "allow"), ("denied_paths", "deny")):
        entries = doc.get(key)
        kept = _without(entries, path, home)
        if isinstance(entries, list) and len(kept) != len(entries):
            out[key] = kept
            dropped.append(cast(Literal["allow", "deny"], action))
    return (out if dropped else dict(doc)), tuple(dropped)
