"""Path decisions (pure): protected system paths, allowed/denied lists, zones, protected files.

Every decision names the rule that made it ("deny: session denied_paths /x",
"allow: zone workspace (rw)"), so a person can see why, and the audit log can keep it.

Order of a decision, first match wins:
1. a denied path at any level (session, workspace, global): a denial always wins, so one
   level can close what another opened;
2. a protected system path (UNIX_PROTECTED, WINDOWS_PROTECTED) while
   `sandbox.block_system_paths` is on;
3. inside a workspace: its protected files (never written through Warden), then zones;
4. outside: the most specific allowed path, whose mode (ro/rw) bounds writes;
5. otherwise deny.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from warden.core.decisions import Decision
from warden.core.errors import InvalidInput
from warden.core.gitcontrol import touches_git_control
from warden.core.path_lists import LEVELS, Level, PathRule, PathRules, parse_paths_doc, with_allowed, with_denied
from warden.core.paths import is_inside, normalize
from warden.core.zones import ApprovalKind, Mode, Zone

__all__ = [
    "LEVELS",
    "OPS",
    "PROTECTED_WORKSPACE_PATHS",
    "UNIX_PROTECTED",
    "WINDOWS_PROTECTED",
    "EffectivePaths",
    "Level",
    "PathDecision",
    "PathRule",
    "PathRules",
    "WorkspacePolicy",
    "ZoneMount",
    "decide_host",
    "effective_paths",
    "parse_paths_doc",
    "prefixes",
    "state_exposure",
    "with_allowed",
    "with_denied",
]

READ_OPS = frozenset({"read", "list", "stat", "exists"})
WRITE_OPS = frozenset({"write", "mkdir", "delete"})
OPS = READ_OPS | WRITE_OPS

# System folders no path list opens while sandbox.block_system_paths is on (Windows paths
# are compared case-insensitively, with either separator).
UNIX_PROTECTED: tuple[str, ...] = ("/etc", "/sys", "/proc", "/boot", "/bin", "/sbin", "/usr/bin",
                                   "/usr/sbin", "/lib", "/lib64", "/dev")
WINDOWS_PROTECTED: tuple[str, ...] = ("C:\\Windows", "C:\\Program Files", "C:\\Program Files (x86)",
                                      "C:\\ProgramData", "C:\\Users\\All Users")

# Workspace files a bot must never change, through Warden or inside a run (the sandbox re-binds
# them read-only; this is the one list): its metadata, its policy files (.warden/ holds
# sandbox.json and zones.yaml: writing them would grant itself access), and files that run code
# outside the sandbox later: the whole of .git (config, hooks, commondir, info, worktrees: see
# core/gitcontrol; a `.git` at any depth is refused too) and every bash/zsh/sh start-up file.
PROTECTED_WORKSPACE_PATHS: tuple[str, ...] = (
    "/.warden", "/.workspace.json", "/.workspace_configured", "/.git",
    "/.bashrc", "/.bash_profile", "/.bash_login", "/.bash_logout", "/.profile",
    "/.zshrc", "/.zshenv", "/.zprofile", "/.zlogin", "/.zlogout",
)



@dataclass(frozen=True)
class PathDecision(Decision):
    """A decision on a file operation, with the consent it still needs and the zone it is in."""

    approval: ApprovalKind = "preApproved"
    zone: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"decision": self.decision, "allowed": self.allowed, "rule": self.rule,
                "approval": self.approval, "zone": self.zone}


def _windows_inside(path: str, root: str) -> bool:
    # Windows paths compare case-insensitively with either separator.
    p = path.replace("\\", "/").rstrip("/").lower()
    r = root.replace("\\", "/").rstrip("/").lower()
    return p == r or p.startswith(r + "/")


def _system_rule(path: str, windows: bool) -> str | None:
    if windows:
        for root in WINDOWS_PROTECTED:
            if _windows_inside(path, root):
                return root
        return None
    for root in UNIX_PROTECTED:
        if is_inside(path, root):
            return root
    return None


def _denied(path: str, rules: PathRules) -> PathDecision | None:
    for rule in rules.denied:
        if is_inside(path, rule.path):
            return PathDecision(False, f"deny: {rule.level} denied_paths {rule.path}")
    return None


def decide_host(path: str, op: str, rules: PathRules, *, block_system: bool = True,
                windows: bool = False) -> PathDecision:
    """Decide an absolute host path outside any workspace: lists and protected system paths."""
    if op not in OPS:
        raise InvalidInput(f"unknown operation {op!r}: use read or write")
    if windows:
        system = _system_rule(path, True) if block_system else None
        if system:
            return PathDecision(False, f"deny: system path {system} (sandbox.block_system_paths)")
        return PathDecision(False, "deny: not in any allowed path")
    if not path.startswith("/") or "\0" in path:
        raise InvalidInput(f"path {path!r} must be absolute and free of NUL bytes")
    path = normalize(path)
    denied = _denied(path, rules)
    if denied:
        return denied
    if block_system and (system := _system_rule(path, False)):
        return PathDecision(False, f"deny: system path {system} (sandbox.block_system_paths)")
    for rule in rules.allowed:
        if is_inside(path, rule.path):
            if op in WRITE_OPS and rule.mode == "ro":
                return PathDecision(False, f"deny: {rule.level} allowed_paths {rule.path} is ro")
            return PathDecision(True, f"allow: {rule.level} allowed_paths {rule.path} ({rule.mode})")
    return PathDecision(False, "deny: not in the workspace or any allowed path")


def prefixes(path: str) -> list[str]:
    """Every ancestor of canonical `path` and the path itself, shortest first: /a/b → [/a, /a/b]."""
    out: list[str] = []
    cut = path.find("/", 1)
    while cut != -1:
        out.append(path[:cut])
        cut = path.find("/", cut + 1)
    if path != "/":
        out.append(path)
    return out


class WorkspacePolicy:
    """Decides workspace-relative paths of one workspace for one actor.

    `scope` None is the workspace's owner (the local person): the whole workspace, with
    the zones' modes and approvals applying inside zone directories. A mapping is a
    restricted actor (a grant, a child): only those zones, nothing else.

    Speed: rules are turned once into dictionaries keyed by workspace-relative path, so a
    decision is a handful of lookups over the path's own ancestors, whatever the number
    of rules (bench/policy.py: well over 100,000 decisions/s).
    """

    def __init__(self, root: str, zones: Mapping[str, Zone], rules: PathRules | None = None,
                 scope: Mapping[str, Zone] | None = None, block_system: bool = True) -> None:
        self.root = normalize(root)
        self.zones = zones
        self.rules = rules or PathRules()
        self.scope = scope
        self.block_system = block_system
        base = "" if self.root == "/" else self.root
        # Denials that cover the whole workspace, and those inside it keyed by relative path.
        self._root_denial: PathDecision | None = None
        self._denied: dict[str, PathDecision] = {}
        entries: list[tuple[str, PathDecision]] = [
            (r.path, PathDecision(False, f"deny: {r.level} denied_paths {r.path}")) for r in self.rules.denied]
        if block_system:
            entries += [(p, PathDecision(False, f"deny: system path {p} (sandbox.block_system_paths)"))
                        for p in UNIX_PROTECTED]
        for host, decision in entries:
            if is_inside(self.root, host):
                self._root_denial = self._root_denial or decision
            elif host.startswith(base + "/"):
                self._denied.setdefault(host[len(base):], decision)
        self._protected = {p: PathDecision(False, f"deny: protected workspace file {p}")
                           for p in PROTECTED_WORKSPACE_PATHS}
        # Deleting a parent of a protected file deletes the file too.
        self._protected_parents: dict[str, PathDecision] = {}
        for p in PROTECTED_WORKSPACE_PATHS:
            for parent in prefixes(p):
                self._protected_parents.setdefault(parent, self._protected[p])
        active = self.zones if scope is None else scope
        self._zones = {zone.path: zone for zone in active.values()}
        # Deleting a parent of a zone deletes the zone too (zones may sit below the top level).
        self._zone_parents: dict[str, list[Zone]] = {}
        for zone in active.values():
            for parent in prefixes(zone.path)[:-1]:
                self._zone_parents.setdefault(parent, []).append(zone)
        self._cache: dict[tuple[str, str], PathDecision] = {}

    def decide(self, path: str, op: str) -> PathDecision:
        """Decide canonical workspace path `path` (`/a/b`) for `op` (read, list, stat, exists, write, mkdir, delete)."""
        if op not in OPS:
            raise InvalidInput(f"unknown operation {op!r}: use one of {', '.join(sorted(OPS))}")
        if self._root_denial is not None:
            return self._root_denial
        chain = prefixes(path)
        denied = self._denied
        for part in chain:
            if part in denied:
                return denied[part]
        writing = op in WRITE_OPS
        if writing:
            if path == "/" and op != "mkdir":
                return _ROOT_WRITE
            protected = self._protected
            for part in chain:
                if part in protected:
                    return protected[part]
            if touches_git_control(path):
                return _GIT_CONTROL
            if op == "delete" and path in self._protected_parents:
                return self._protected_parents[path]
        zone: Zone | None = None
        for part in chain:
            zone = self._zones.get(part)
            if zone is not None:
                break
        if zone is None:
            if op == "delete" and self.scope is None and path in self._zone_parents:
                return self._delete_above_zones(path)
            if self.scope is None:
                return _OWNER
            if path == "/" and not writing:
                return _GRANTED_ROOT
            granted = ", ".join(sorted(self.scope)) or "none"
            return PathDecision(False, f"deny: no granted zone holds {path} (granted: {granted})")
        key = (zone.name, op)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = _zone_decision(zone, op, writing)
        return cached

    def zones_below(self, path: str) -> list[Zone]:
        """The zones (of this actor) whose folder is `path` or lies beneath it."""
        return [zone for zone_path, zone in self._zones.items() if is_inside(zone_path, path)]

    def _delete_above_zones(self, path: str) -> PathDecision:
        # The strictest of the zones below decides: a deny first, then an `ask`.
        asked: PathDecision | None = None
        for zone in self._zone_parents[path]:
            decision = _zone_decision(zone, "delete", True)
            if not decision.allowed:
                return PathDecision(False, f"{decision.rule} (inside {path})", approval=decision.approval,
                                    zone=zone.name)
            if decision.approval == "ask" and asked is None:
                asked = decision
        if asked is not None:
            return asked
        return _OWNER


_OWNER = PathDecision(True, "allow: workspace owner (rw)")
_GIT_CONTROL = PathDecision(False, "deny: git control files are the person's (.git at any depth)")
_GRANTED_ROOT = PathDecision(True, "allow: workspace root (granted zones only)")
_ROOT_WRITE = PathDecision(False, "deny: the workspace root itself cannot be written or deleted")


def _zone_decision(zone: Zone, op: str, writing: bool) -> PathDecision:
    if writing and zone.mode == "ro":
        return PathDecision(False, f"deny: zone {zone.name} is ro", zone=zone.name)
    approval = zone.approval.for_op(op)
    if approval == "blocked":
        return PathDecision(False, f"deny: zone {zone.name} blocks {op}", approval="blocked", zone=zone.name)
    return PathDecision(True, f"allow: zone {zone.name} ({zone.mode})", approval=approval, zone=zone.name)


@dataclass(frozen=True)
class ZoneMount:
    """A zone as the sandbox builder needs it: its host directory, mode and approvals."""

    name: str
    host_path: str
    mode: Mode
    write: ApprovalKind = "preApproved"
    delete: ApprovalKind = "preApproved"

    @property
    def read_only_in_runs(self) -> bool:
        """Writes that need a person (or are blocked) go through the file API, never a run."""
        return self.mode == "ro" or self.write != "preApproved"

    @property
    def closed_to_writes(self) -> bool:
        """No write through the file API either, a person's included: the zone is ro or blocks them."""
        return self.mode == "ro" or self.write == "blocked"

    @property
    def kept_in_runs(self) -> bool:
        """Writable in runs, but removing or renaming there needs a person (or is blocked)."""
        return not self.read_only_in_runs and self.delete != "preApproved"


@dataclass(frozen=True)
class EffectivePaths:
    """Everything the sandbox builder needs about paths for one workspace (and session)."""

    workspace: str
    zones: tuple[ZoneMount, ...]
    allowed: tuple[tuple[str, Mode], ...]
    denied: tuple[str, ...]
    readonly: tuple[str, ...]
    system_blocked: tuple[str, ...]
    # (path, level) of each deny: which file a hint's `sandbox forget` must name.
    denied_levels: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"workspace": self.workspace,
                "zones": [{"name": z.name, "host_path": z.host_path, "mode": z.mode} for z in self.zones],
                "allowed": [{"path": p, "mode": m} for p, m in self.allowed],
                "denied": list(self.denied), "readonly": list(self.readonly),
                "system_blocked": list(self.system_blocked)}


def effective_paths(root: str, zones: Mapping[str, Zone], rules: PathRules, *,
                    block_system: bool) -> EffectivePaths:
    """Turn a workspace's zones and merged lists into host paths for mounts (pure)."""
    root = normalize(root)
    allowed: list[tuple[str, Mode]] = []
    seen: set[str] = set()
    for rule in sorted(rules.allowed, key=lambda r: r.path):
        if rule.path not in seen and _denied(rule.path, rules) is None:
            seen.add(rule.path)
            allowed.append((rule.path, rule.mode))
    return EffectivePaths(
        workspace=root,
        zones=tuple(ZoneMount(z.name, root + z.path, z.mode, z.approval.write, z.approval.delete)
                    for z in zones.values()),
        allowed=tuple(allowed),
        denied=tuple(sorted({r.path for r in rules.denied})),
        denied_levels=tuple(sorted({(r.path, r.level) for r in rules.denied})),
        readonly=tuple(root + p for p in PROTECTED_WORKSPACE_PATHS),
        system_blocked=UNIX_PROTECTED if block_system else (),
    )



def state_exposure(path: str, *, home: str, workspaces_root: str, shared: Sequence[str] = ()) -> str | None:
    """Why mounting `path` into a sandbox would show it Warden's own state, or None.

    Warden's home holds the keys, the registry and every workspace; an allowed path that
    contains it (say `/`), or lies in it outside the workspaces (keys/, layers/, the
    database), would hand all of that to every bot. Another workspace's folder is fine:
    sharing one is the user's call. `shared`: Warden's folders outside the home (the layer cache,
    whose layers other homes copy: a bot writing there would reach their bots). All paths
    normalised and absolute (pure).
    """
    for folder in shared:
        if is_inside(folder, path) or is_inside(path, folder):
            return f"it overlaps Warden's layer cache {folder}, which other homes' layers are copied from"
    if is_inside(home, path):
        return f"it contains Warden's home {home} (keys, registry and every workspace)"
    if is_inside(workspaces_root, path):
        return f"it contains every workspace ({workspaces_root})"
    if is_inside(path, home) and not is_inside(path, workspaces_root):
        return f"it is part of Warden's own state in {home}"
    return None
