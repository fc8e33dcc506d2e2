"""Zones: named top-level directories of a workspace with a mode and approvals.

A zone has a name, a directory inside the workspace (by default `/<name>`), a mode (`ro`
or `rw`: what is physically allowed) and an approval per `write` and `delete`
(`preApproved`, `ask`, `blocked`: what needs a person's consent; `ask` when not given).
When a workspace configures no zones it gets two, `cache` and `workspace` (DEFAULT_ZONES).
`restrict(parent, declared)` gives a child (a grant, a sub-agent) exactly the zones it
declares and never more than its parent has; no declaration means no access.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from warden.core.errors import Denied, InvalidInput
from warden.core.names import is_name
from warden.core.paths import canonical, is_inside

__all__ = [
    "APPROVALS",
    "DEFAULT_ZONES",
    "MODES",
    "Approval",
    "Zone",
    "ZoneRequest",
    "parse_declaration",
    "parse_zones",
    "restrict",
    "zone_for",
]

Mode = Literal["ro", "rw"]
ApprovalKind = Literal["preApproved", "ask", "blocked"]
MODES: tuple[Mode, ...] = ("ro", "rw")
APPROVALS: tuple[ApprovalKind, ...] = ("preApproved", "ask", "blocked")
# Strictness order: a child may move right (stricter), never left.
_STRICTNESS = {"preApproved": 0, "ask": 1, "blocked": 2}


@dataclass(frozen=True)
class Approval:
    """Consent needed per operation; `ask` unless configured: a person decides by default."""

    write: ApprovalKind = "ask"
    delete: ApprovalKind = "ask"

    def for_op(self, op: str) -> ApprovalKind:
        """The approval for `write`, `mkdir` (a write) or `delete`; reads need none."""
        if op == "delete":
            return self.delete
        if op in ("write", "mkdir"):
            return self.write
        return "preApproved"


@dataclass(frozen=True)
class Zone:
    """One zone: `path` is canonical and workspace-relative (`/data`)."""

    name: str
    path: str
    mode: Mode = "rw"
    approval: Approval = Approval()

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "path": self.path, "mode": self.mode,
                "approval": {"write": self.approval.write, "delete": self.approval.delete}}


@dataclass(frozen=True)
class ZoneRequest:
    """What a child declares for one zone; None means "as the parent has it"."""

    name: str
    mode: Mode | None = None
    write: ApprovalKind | None = None
    delete: ApprovalKind | None = None


# The working areas every workspace has when it configures none: open to whoever holds the
# workspace (their purpose is a bot's downloads and drafts), where a zone one configures asks
# a person unless it says otherwise.
_OPEN = Approval("preApproved", "preApproved")
DEFAULT_ZONES: Mapping[str, Zone] = {
    "cache": Zone("cache", "/cache", "rw", _OPEN),
    "workspace": Zone("workspace", "/workspace", "rw", _OPEN),
}


def _name(value: object, where: str) -> str:
    if not is_name(value):
        raise InvalidInput(f"{where}: bad zone name {value!r}: use letters, digits, '.', '_' or '-'")
    return value


def _mode(value: object, where: str) -> Mode:
    if value not in MODES:
        raise InvalidInput(f"{where}: mode {value!r} is not ro or rw")
    return value


def _approval_kind(value: object, where: str) -> ApprovalKind:
    if value not in APPROVALS:
        raise InvalidInput(f"{where}: approval {value!r} is not one of {', '.join(APPROVALS)}")
    return value


def _approval_fields(raw: object, where: str) -> tuple[ApprovalKind | None, ApprovalKind | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where}: approval must be a mapping with write and/or delete")
    unknown = set(raw) - {"write", "delete"}
    if unknown:
        raise InvalidInput(f"{where}: unknown approval operation(s) {', '.join(sorted(map(str, unknown)))}; "
                           "use write and delete")
    write = _approval_kind(raw["write"], where) if "write" in raw else None
    delete = _approval_kind(raw["delete"], where) if "delete" in raw else None
    return write, delete


def _entries(doc: object, where: str) -> list[tuple[str, object]]:
    """Zone entries from the mapping form ({name: {...}}) or the list form ([{name: ..}])."""
    if isinstance(doc, Mapping):
        return [(_name(k, where), v) for k, v in doc.items()]
    if isinstance(doc, Sequence) and not isinstance(doc, str | bytes):
        out: list[tuple[str, object]] = []
        for item in doc:
            if isinstance(item, str):
                name, _, mode = item.partition(":")
                out.append((_name(name, where), {"mode": mode} if mode else {}))
            elif isinstance(item, Mapping) and "name" in item:
                out.append((_name(item["name"], where), {k: v for k, v in item.items() if k != "name"}))
            else:
                # The list form names each zone; a person who wrote only its path is shown the line to add.
                raise InvalidInput(f"{where}: each zone needs a name ({item!r}): add `name: NAME` (the zone's "
                                   "folder is /NAME unless path: names another), or write the zones as a mapping, "
                                   "`NAME: {mode: rw}`")
        return out
    raise InvalidInput(f"{where}: zones must be a mapping or a list")


def parse_zones(doc: object, *, where: str = "zones") -> dict[str, Zone]:
    """Zones from a zones document (`zones:` or `sandbox: {zones:}`); empty if none."""
    if doc is None:
        return {}
    if isinstance(doc, Mapping) and "sandbox" in doc and isinstance(doc["sandbox"], Mapping):
        doc = doc["sandbox"]
        if "zones" not in doc:
            return {}
    if isinstance(doc, Mapping) and "zones" in doc:
        doc = doc["zones"]
        if doc is None:
            return {}
    zones: dict[str, Zone] = {}
    for name, raw in _entries(doc, where):
        spot = f"{where}: zone {name}"
        if name in zones:
            raise InvalidInput(f"{spot} is defined twice; keep one")
        if raw is None:
            raw = {}
        if isinstance(raw, str):
            raw = {"mode": raw}
        if not isinstance(raw, Mapping):
            raise InvalidInput(f"{spot}: expected a mapping with path, mode, approval")
        unknown = set(raw) - {"path", "mode", "approval"}
        if unknown:
            # write and delete are the approval's, one level down: say where they go.
            where_to = ("; write and delete go under approval: (`approval: {write: ask, delete: blocked}`)"
                        if unknown & {"write", "delete"} else "; a zone has path, mode and approval")
            raise InvalidInput(f"{spot}: unknown field(s) {', '.join(sorted(map(str, unknown)))}{where_to}")
        raw_path = raw.get("path", name)
        if not isinstance(raw_path, str):
            raise InvalidInput(f"{spot}: path must be text")
        try:
            path = canonical(raw_path)
        except InvalidInput as exc:
            raise InvalidInput(f"{spot}: {exc.message}") from None
        if path == "/":
            raise InvalidInput(f"{spot}: a zone must be a directory inside the workspace, not its root")
        write, delete = _approval_fields(raw.get("approval"), spot)
        zone = Zone(name, path, _mode(raw.get("mode", "rw"), spot),
                    Approval(write or "ask", delete or "ask"))
        for other in zones.values():
            if is_inside(zone.path, other.path) or is_inside(other.path, zone.path):
                raise InvalidInput(f"{where}: zones {other.name} ({other.path}) and {name} ({zone.path}) "
                                   "overlap; give each its own directory")
        zones[name] = zone
    return zones


def parse_declaration(doc: object, *, where: str = "declared zones") -> list[ZoneRequest] | None:
    """A child's declaration (`["data:ro"]`, `{data: rw}`, `[{name, mode, approval}]`); None if absent."""
    if doc is None:
        return None
    requests: list[ZoneRequest] = []
    seen: set[str] = set()
    for name, raw in _entries(doc, where):
        spot = f"{where}: zone {name}"
        if name in seen:
            raise InvalidInput(f"{spot} is declared twice; keep one")
        seen.add(name)
        if raw is None:
            raw = {}
        if isinstance(raw, str):
            raw = {"mode": raw}
        if not isinstance(raw, Mapping):
            raise InvalidInput(f"{spot}: expected a mode or a mapping with mode and approval")
        mode = _mode(raw["mode"], spot) if raw.get("mode") else None
        write, delete = _approval_fields(raw.get("approval"), spot)
        requests.append(ZoneRequest(name, mode, write, delete))
    return requests


def _stricter(parent: ApprovalKind, child: ApprovalKind | None) -> ApprovalKind:
    if child is None:
        return parent
    return child if _STRICTNESS[child] >= _STRICTNESS[parent] else parent


def restrict(parent: Mapping[str, Zone] | None,
             declared: Sequence[ZoneRequest] | None) -> dict[str, Zone]:
    """The child's zones: only those declared, each no wider than the parent's; Denied naming the zone otherwise."""
    if not declared:
        return {}  # secure by default: no declaration, no file access
    parent = parent or {}
    child: dict[str, Zone] = {}
    for request in declared:
        if request.name in child:
            raise InvalidInput(f"zone {request.name} is declared twice; keep one")
        have = parent.get(request.name)
        if have is None:
            raise Denied(f"child requests zone {request.name} but parent has no such zone; "
                         f"available: {', '.join(sorted(parent)) or 'none'}",
                         rule=f"deny: zone {request.name} not in parent")
        mode = request.mode or have.mode
        if mode == "rw" and have.mode == "ro":
            raise Denied(f"child requests rw on {request.name} but parent only has ro",
                         rule=f"deny: zone {request.name} is ro in parent")
        child[request.name] = Zone(request.name, have.path, mode, Approval(
            _stricter(have.approval.write, request.write),
            _stricter(have.approval.delete, request.delete)))
    return child


def zone_for(zones: Mapping[str, Zone], path: str) -> Zone | None:
    """The zone whose directory holds canonical `path` (zones never overlap), or None."""
    for zone in zones.values():
        if path == zone.path or path.startswith(zone.path + "/"):
            return zone
    return None
