"""Sandbox path lists at three levels and a workspace's zones: the merged view, changes, checks.

Where things live (path lists as JSON, zones as YAML):

    global     $WARDEN_HOME/sandbox_paths.json
    workspace  <ws>/.warden/sandbox.json
    session    <ws>/.warden/sessions/<id>/sandbox.json
    zones      <ws>/.warden/zones.yaml   (absent: the default zones cache + workspace)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from warden.core.errors import Denied, InvalidInput, NotFound
from warden.core.names import is_name
from warden.core.path_lists import without_path
from warden.core.paths import is_inside, normalize
from warden.core.policy import (
    LEVELS,
    EffectivePaths,
    Level,
    PathDecision,
    PathRule,
    PathRules,
    WorkspacePolicy,
    decide_host,
    effective_paths,
    parse_paths_doc,
    state_exposure,
    with_allowed,
    with_denied,
)
from warden.core.ports import MountJudge, PolicyFiles
from warden.core.workspaces import WorkspaceRecord
from warden.core.zones import DEFAULT_ZONES, Mode, Zone, parse_zones
from warden.services.audit import AuditLog

__all__ = ["SandboxPaths"]

POLICY_DIR = ".warden"
_KEPT_EFFECTIVE = 256  # workspaces (and sessions) whose `effective` answer is kept
ZONES_FILE = "zones.yaml"


def check_session(session: str) -> str:
    """A valid session id (it becomes a folder name), or InvalidInput."""
    if not is_name(session, 64):
        raise InvalidInput(f"bad session id {session!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return session


@dataclass(frozen=True)
class Target:
    """Which file a level means, and the workspace it belongs to."""

    level: Level
    file: Path
    workspace: WorkspaceRecord | None
    session: str | None


class SandboxPaths:
    """The three path lists and the zones of workspaces: read, merge, change, decide."""

    def __init__(self, global_file: Path, audit: AuditLog, clock: Callable[[], datetime], *,
                 files: PolicyFiles, mounts: MountJudge, block_system: bool, user_home: str | None,
                 warden_home: str | None = None, workspaces_root: str | None = None,
                 shared_state: Sequence[str] = ()) -> None:
        self.global_file = global_file
        self._files = files
        self._mounts = mounts
        self._audit = audit
        self._clock = clock
        self.block_system = block_system
        self._user_home = user_home
        self._warden_home = normalize(warden_home) if warden_home else None
        self._workspaces_root = normalize(workspaces_root) if workspaces_root else self._warden_home
        self._shared_state = tuple(normalize(p) for p in shared_state)  # the layer cache
        # `effective` per (workspace folder, session), with the identity of the policy folder and
        # files it was read from: kept while they are the same files, unchanged (PolicyFiles.identity).
        self._effective: dict[tuple[str, str | None],
                              tuple[tuple[str, ...], tuple[tuple[int, ...], ...], EffectivePaths]] = {}

    def exposure(self, path: str) -> str | None:
        """Why allowing `path` would show sandboxes Warden's own state (keys, registry), or None."""
        if self._warden_home is None or self._workspaces_root is None:
            return None
        return state_exposure(normalize(path), home=self._warden_home, workspaces_root=self._workspaces_root,
                              shared=self._shared_state)

    # -- files -----------------------------------------------------------------------------
    def policy_dir(self, record: WorkspaceRecord) -> Path:
        """`<ws>/.warden`, refused when it is a link (a bot could point it at its own files)."""
        folder = Path(record.path) / POLICY_DIR
        if self._files.is_link(str(folder)):
            raise Denied(f"{POLICY_DIR} in workspace {record.name} is a symbolic link; remove it (Warden keeps "
                         "the workspace policy there)",
                         rule="deny: policy folder is a link")
        return folder

    def files_for(self, record: WorkspaceRecord | None, session: str | None, *,
                  folder: Path | None = None) -> dict[Level, Path]:
        """The path-list file of each level; `folder`: `record`'s policy folder, just checked."""
        files: dict[Level, Path] = {"global": self.global_file}
        if record is not None:
            folder = self.policy_dir(record) if folder is None else folder
            files["workspace"] = folder / "sandbox.json"
            if session is not None:
                files["session"] = folder / "sessions" / check_session(session) / "sandbox.json"
        elif session is not None:
            raise InvalidInput("--session needs --workspace: a session belongs to one workspace")
        return files

    def shown(self, file: Path, record: WorkspaceRecord | None) -> str:
        """How a message names policy file `file`: by its place in `record` (`.warden/zones.yaml in
        workspace W`), never by its host path. Bots read these messages, and the host path tells
        them Warden's home, the person's home and username; the person knows both names."""
        if record is not None:
            root = normalize(record.path)
            path = normalize(str(file))
            if is_inside(path, root) and path != root:
                return f"{path[len(root):].lstrip('/')} in workspace {record.name}"
        if file == self.global_file:
            return f"Warden's global {file.name}"
        return file.name

    def zones_file(self, record: WorkspaceRecord) -> Path:
        return self.policy_dir(record) / ZONES_FILE

    def watched(self, record: WorkspaceRecord, session: str | None) -> list[Path]:
        """Every file whose change alters a decision for `record` (for cache checks)."""
        return [*self.files_for(record, session).values(), self.zones_file(record)]

    def fingerprint(self, record: WorkspaceRecord, session: str | None) -> tuple[tuple[int, int, int], ...]:
        return self._files.stamp([str(file) for file in self.watched(record, session)])

    # -- reading ---------------------------------------------------------------------------
    def rules(self, record: WorkspaceRecord | None = None, session: str | None = None, *,
              folder: Path | None = None) -> PathRules:
        """The merged lists of every level that applies; `folder` as in `files_for`."""
        every: list[PathRule] = []
        for level, file in self.files_for(record, session, folder=folder).items():
            shown = self.shown(file, record)
            every += parse_paths_doc(self._files.read_doc(str(file), shown), level, where=shown, home=self._user_home)
        return PathRules.merge(every)

    def zones(self, record: WorkspaceRecord, *, folder: Path | None = None) -> dict[str, Zone]:
        """The workspace's configured zones, or the defaults (cache, workspace) when none are;
        `folder` as in `files_for`."""
        file = (self.policy_dir(record) if folder is None else folder) / ZONES_FILE
        shown = self.shown(file, record)
        configured = parse_zones(self._files.read_zones_doc(str(file), shown), where=shown)
        return configured or dict(DEFAULT_ZONES)

    def workspace_policy(self, record: WorkspaceRecord, session: str | None = None,
                         scope: Mapping[str, Zone] | None = None) -> WorkspacePolicy:
        """The decider for paths of `record`, for the owner (scope None) or a restricted actor."""
        return WorkspacePolicy(root=normalize(record.path), zones=self.zones(record),
                               rules=self.rules(record, session), scope=scope,
                               block_system=self.block_system)

    # -- changes ---------------------------------------------------------------------------
    def target(self, level: str | None, record: WorkspaceRecord | None, session: str | None) -> Target:
        """The file a change goes to; the level defaults to the narrowest one given."""
        chosen = level or ("session" if session is not None else "workspace" if record else "global")
        if chosen not in LEVELS:
            raise InvalidInput(f"bad level {chosen!r}: use global, workspace or session")
        if chosen in ("workspace", "session") and record is None:
            raise InvalidInput(f"level {chosen} needs --workspace NAME")
        if chosen == "session" and session is None:
            raise InvalidInput("level session needs --session ID")
        if session is not None:
            check_session(session)
        files = self.files_for(record, session if chosen == "session" else None)
        lvl: Level = "session" if chosen == "session" else "workspace" if chosen == "workspace" else "global"
        return Target(lvl, files[lvl], record, session if lvl == "session" else None)

    def _clean(self, path: str) -> str:
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise InvalidInput(f"path {path!r} must be absolute (/full/path) and free of NUL bytes")
        return normalize(path)

    def add(self, path: str, *, level: str | None = None, workspace: WorkspaceRecord | None = None,
            session: str | None = None, mode: Mode = "rw", actor: str = "user") -> PathRule:
        """`warden sandbox add`: allow `path` at the level and drop it from that level's denied list."""
        if mode not in ("ro", "rw"):
            raise InvalidInput(f"bad mode {mode!r}: use ro or rw")
        clean = self._clean(path)
        why = self.exposure(clean)
        if why is None:
            # By inode too: a link (or a bind-mount alias) to the home has a harmless name.
            home = self._warden_home or "/nonexistent"
            why = self._mounts.judge(clean, home=home, workspaces_root=self._workspaces_root or home,
                                     own_workspace=workspace.path if workspace else None)
        if why is not None:
            raise InvalidInput(f"cannot allow {clean}: {why}; allow a folder that does not contain it")
        target = self.target(level, workspace, session)
        added_at = self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        self._files.update_doc(str(target.file), lambda doc: with_allowed(doc, clean, mode=mode, added_at=added_at))
        self._record(actor, "sandbox.add", target, clean, {"mode": mode})
        return PathRule(clean, "allow", target.level, mode, added_at)

    def overruled(self, path: str, *, workspace: WorkspaceRecord | None = None,
                  session: str | None = None) -> str | None:
        """The deny that still wins over an allow of `path` (a protected system path, a denied
        path of another level), or None when runs get it; not audited: `add` asks it of itself."""
        decision = decide_host(self._clean(path), "read", self.rules(workspace, session),
                               block_system=self.block_system, windows=os.name == "nt")
        return None if decision.allowed else decision.rule

    def remove(self, path: str, *, level: str | None = None, workspace: WorkspaceRecord | None = None,
               session: str | None = None, actor: str = "user") -> PathRule:
        """`warden sandbox remove`: deny `path` at the level and drop it from that level's allowed list."""
        clean = self._clean(path)
        target = self.target(level, workspace, session)
        added_at = self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        self._files.update_doc(str(target.file), lambda doc: with_denied(doc, clean, added_at=added_at))
        self._record(actor, "sandbox.remove", target, clean, {})
        return PathRule(clean, "deny", target.level, "rw", added_at)

    def forget(self, path: str, *, level: str | None = None, workspace: WorkspaceRecord | None = None,
               session: str | None = None, actor: str = "user") -> tuple[PathRule, ...]:
        """`warden sandbox forget`: drop `path` from both lists of the level, so the other levels
        (and the defaults) decide it again: the undo of an `add` or a `remove`, which only turn an
        allow into a deny and back. NotFound, the file unchanged, when the level lists it nowhere."""
        clean = self._clean(path)
        target = self.target(level, workspace, session)
        dropped: list[PathRule] = []
        shown = self.shown(target.file, workspace)

        def change(doc: dict[str, object]) -> dict[str, object]:
            new, actions = without_path(doc, clean, home=self._user_home)
            if not actions:
                # Raised before any write (under the file's lock when updating): nothing changes.
                raise NotFound(f"{clean} is not in the {target.level} level's lists"
                               f"{self._where(target)}; `warden sandbox list` shows each path's level")
            try:
                listed = {(r.path, r.action): r for r in parse_paths_doc(doc, target.level, where=shown,
                                                                          home=self._user_home)}
            except InvalidInput:  # another entry is broken: this one still goes
                listed = {}
            dropped[:] = [listed.get((clean, action)) or PathRule(clean, action, target.level)
                          for action in actions]
            return new

        # Looked up first without the lock, so a path listed nowhere makes no file or folder.
        change(self._files.read_doc(str(target.file), shown))
        self._files.update_doc(str(target.file), change)
        self._record(actor, "sandbox.forget", target, clean, {"was": [rule.action for rule in dropped]})
        return tuple(dropped)

    @staticmethod
    def _where(target: Target) -> str:
        """Whose lists the level's are, for a message: the session's, the workspace's, or none (global)."""
        if target.level == "session" and target.workspace is not None:
            return f" of session {target.session} in workspace {target.workspace.name}"
        if target.level == "workspace" and target.workspace is not None:
            return f" of workspace {target.workspace.name}"
        return ""

    def _record(self, actor: str, action: str, target: Target, path: str, extra: dict[str, object]) -> None:
        name = target.workspace.name if target.workspace else "global"
        lists = {"sandbox.add": "allowed_paths", "sandbox.remove": "denied_paths"}.get(action, "path lists")
        self._audit.record_made(actor=actor, action=action, target=name, decision="allow",
                                rule=f"{target.level} {lists}",
                                detail={"path": path, "level": target.level, "session": target.session, **extra})

    # -- decisions -------------------------------------------------------------------------
    def check(self, path: str, op: str, *, workspace: WorkspaceRecord | None = None,
              session: str | None = None, actor: str = "user") -> PathDecision:
        """Decide host path `path` for `op` the way Warden would, naming the rule; audited."""
        clean = self._clean(path)
        decision = self.decide(clean, op, workspace=workspace, session=session)
        self._audit.record(actor=actor, action="sandbox.check",
                           target=workspace.name if workspace else "global", decision=decision.decision,
                           rule=decision.rule, detail={"path": clean, "op": op, "session": session})
        return decision

    def decide(self, path: str, op: str, *, workspace: WorkspaceRecord | None = None,
               session: str | None = None) -> PathDecision:
        """`check`'s decision, not audited (`forget` says with it what decides a path now)."""
        clean = self._clean(path)
        if op not in ("read", "write", "delete", "list", "stat", "mkdir", "exists"):
            raise InvalidInput(f"bad operation {op!r}: use read or write")
        if workspace is not None and is_inside(clean, normalize(workspace.path)):
            root = normalize(workspace.path)
            rel = "/" if clean == root else clean[len(root):]
            return self.workspace_policy(workspace, session).decide(rel, op)
        return decide_host(clean, op, self.rules(workspace, session), block_system=self.block_system,
                           windows=os.name == "nt")

    def effective(self, record: WorkspaceRecord, session: str | None = None) -> EffectivePaths:
        """What the sandbox builder mounts for `record` (and `session`).

        Returns `EffectivePaths` (core/policy.py): `workspace` (host path), `zones` as
        (name, host_path, mode) — bind the `ro` ones read-only —, `allowed` extra host paths
        with their mode (already without those a deny covers), `denied` host paths (never
        bind them; hide them if they lie inside a bound path), `readonly` protected workspace
        files (.warden/, .workspace.json, .git/hooks, ...) to re-bind read-only, and
        `system_blocked` (the protected system paths while sandbox.block_system_paths
        is on). Creates `<ws>/.warden/` so it can be bound read-only.
        """
        key = (record.path, session)
        kept = self._effective.get(key)
        if kept is not None:
            watched = kept[0]
        else:  # the policy folder, then the files read from it (their names made once)
            folder = Path(record.path) / POLICY_DIR
            watched = (str(folder), *(str(file) for file in self.files_for(record, session, folder=folder).values()),
                       str(folder / ZONES_FILE))
        # Every run asks this: the answer read last time is given again while the policy folder
        # and every file it came from are the very same ones, unchanged. Their identity is taken
        # before they are read, so a change made while they are read is seen at the next run.
        seen = self._files.identity(watched)
        if kept is not None and kept[1] == seen and stat.S_ISDIR(seen[0][2]):
            return kept[2]
        folder = self.policy_dir(record)  # refused when a link
        # The sandbox binds .warden/ read-only; it must exist first, or a bot could create it.
        self._files.make_folder(str(folder))
        # The folder checked once (not a link) for the three files read in it, a moment later.
        made = effective_paths(record.path, self.zones(record, folder=folder),
                               self.rules(record, session, folder=folder), block_system=self.block_system)
        if len(self._effective) >= _KEPT_EFFECTIVE:
            self._effective.clear()
        self._effective[key] = (watched, seen, made)
        return made
