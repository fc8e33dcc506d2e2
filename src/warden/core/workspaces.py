"""The workspace model: names, types, statuses and the lifecycle state machine (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from warden.core.errors import Conflict, InvalidInput
from warden.core.names import is_name

__all__ = ["STATUSES", "TYPES", "WorkspaceRecord", "adoption_refusal", "check_name", "check_transition"]

TYPES = ("user", "bot", "temporary")
STATUSES = ("creating", "ready", "suspended", "archived", "broken")

# Which status may follow which (the lifecycle, plus `broken` when a step crashed half-way).
_TRANSITIONS: dict[str, frozenset[str]] = {
    "creating": frozenset({"ready", "broken"}),
    "ready": frozenset({"suspended", "archived", "broken", "ready"}),
    "suspended": frozenset({"ready", "archived", "broken"}),
    "archived": frozenset({"ready", "broken"}),
    "broken": frozenset({"ready", "archived", "broken"}),
}


def check_name(name: str) -> str:
    """A valid workspace name, or InvalidInput saying what a name may hold."""
    if not is_name(name) or name.endswith((".lock", ".tmp")):
        raise InvalidInput(
            f"bad workspace name {name!r}: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit")
    return name


def check_type(kind: str) -> str:
    if kind not in TYPES:
        raise InvalidInput(f"bad workspace type {kind!r}: use one of {', '.join(TYPES)}")
    return kind


def check_transition(name: str, current: str, target: str) -> None:
    """Conflict when `current` → `target` is not a lifecycle step."""
    if target not in _TRANSITIONS.get(current, frozenset()):
        raise Conflict(f"workspace {name!r} is {current}; it cannot become {target}")


@dataclass(frozen=True)
class WorkspaceRecord:
    """A registry row: what Warden knows about one workspace."""

    id: str
    name: str
    path: str
    type: str
    status: str
    created_at: str
    last_accessed: str
    template: str | None = None
    layer_id: str | None = None
    expires_at: str | None = None
    created_by: str | None = None
    meta: Mapping[str, object] = field(default_factory=dict)
    node: str | None = None  # the Warden node whose folder it is (core/nodes.py)

    def to_json(self) -> dict[str, object]:
        # meta's "node" is the Node.js version of its template: shown as node_version, since
        # `node` names the Warden node (INTERFACES.md).
        return {
            "id": self.id, "name": self.name, "path": self.path, "type": self.type,
            "status": self.status, "template": self.template, "layer_id": self.layer_id,
            "created": self.created_at, "last_accessed": self.last_accessed,
            "expires": self.expires_at, "created_by": self.created_by,
            "python_venv": self.meta.get("python_venv"), **{
                ("node_version" if k == "node" else k): v for k, v in self.meta.items() if k not in {"python_venv"}},
            "node": self.node,
        }


# Folders whose adoption would hand a bot far more than a project: the system's, and the
# top-level folders every machine shares (a workspace is a project folder, never a whole tree).
_NEVER_ADOPTED = ("/", "/usr", "/var", "/opt", "/srv", "/home", "/root", "/tmp", "/mnt", "/media", "/run")  # noqa: S108 (refused, not used)


def adoption_refusal(path: str, *, warden_home: str, workspaces_root: str, others: Sequence[str],
                     user_home: str | None) -> str | None:
    """Why folder `path` (real, absolute) cannot become a workspace in place, or None."""
    from warden.core.paths import is_inside
    from warden.core.policy import UNIX_PROTECTED

    if path in _NEVER_ADOPTED or any(is_inside(path, root) for root in UNIX_PROTECTED):
        return f"{path} is a system folder"
    if user_home and path == user_home.rstrip("/"):
        return f"{path} is your home folder (it holds your keys and settings); adopt a project folder in it"
    for held, what in ((warden_home, "Warden's home"), (workspaces_root, "Warden's workspaces")):
        if is_inside(path, held) or is_inside(held, path):
            return f"{path} holds or lies inside {what} ({held})"
    for other in others:
        if is_inside(path, other) or is_inside(other, path):
            return f"{path} holds or lies inside another workspace ({other})"
    return None
