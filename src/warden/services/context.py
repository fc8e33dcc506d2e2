"""Terminals' working context: set, show and move through each terminal's current workspace.

The terminal is named by the caller (interfaces/cli/terminal_id.py); its context lives in the
home (adapters/terminals.py). A workspace is found by name (exact, else an unambiguous prefix or
part of it, core/context.py) or by a path (anything with a "/": the workspace whose folder
holds it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from warden.core.context import (
    MAX_SNAPSHOTS,
    StateSnapshot,
    TerminalContext,
    check_label,
    check_variables,
    export_blob,
    match_workspace,
    parse_blob,
)
from warden.core.errors import Conflict, InvalidInput, NotFound
from warden.core.ports import StateDocs, TerminalStore
from warden.core.workspaces import WorkspaceRecord
from warden.services.workspaces import WorkspaceService

__all__ = ["ContextService", "Current"]


@dataclass(frozen=True)
class Current:
    """A terminal's current workspace as shown: its name, and whether it still exists."""

    terminal: str
    name: str | None
    exists: bool

    def to_json(self) -> dict[str, object]:
        return {"terminal": self.terminal, "name": self.name, "exists": self.exists}


class ContextService:
    def __init__(self, store: TerminalStore, workspaces: WorkspaceService, terminal: str, *,
                 states: StateDocs | None = None, clock: Callable[[], datetime] | None = None,
                 git_branch: Callable[[WorkspaceRecord], str | None] | None = None,
                 secret_names: Callable[[], Collection[str]] | None = None,
                 adopt: Callable[[str], WorkspaceRecord] | None = None) -> None:
        # A folder no workspace holds becomes one in place (`ws set PATH`; WorkspaceService.adopt).
        self._adopt = adopt
        self._store = store
        self._workspaces = workspaces
        self.terminal = terminal
        self._states = states
        self._clock = clock
        self._git_branch = git_branch
        self._secret_names = secret_names

    def find(self, typed: str, *, exact_only: bool = False) -> WorkspaceRecord:
        """The workspace `typed` names (a name, part of one, or a path inside its folder)."""
        records = self._workspaces.list()
        if "/" in typed:
            # By the path as written (links not followed): a link a bot left in its workspace
            # must not carry the person into another workspace.
            path = os.path.abspath(os.path.expanduser(typed))
            for record in records:
                for root in dict.fromkeys((os.path.abspath(record.path), os.path.realpath(record.path))):
                    if path == root or path.startswith(root + os.sep):
                        return record
            if self._adopt is not None and os.path.isdir(path):
                return self._adopt(path)
            raise NotFound(f"no workspace holds {typed}, and it is no folder to adopt; `warden create NAME` "
                           "makes one")
        name = match_workspace(typed, [r.name for r in records], exact_only=exact_only)
        return next(r for r in records if r.name == name)

    def context(self) -> TerminalContext:
        return self._store.read(self.terminal)

    def current(self) -> Current:
        name = self.context().current
        exists = False
        if name is not None:
            try:
                self._workspaces.get(name)
                exists = True
            except NotFound:
                exists = False
        return Current(self.terminal, name, exists)

    def require_current(self) -> Current:
        """This terminal's current workspace, existing; NotFound saying how to set one otherwise."""
        now = self.current()
        if now.name is None:
            raise NotFound("no current workspace in this terminal: set one with `warden ws set NAME` "
                           "(or `warden @NAME`)")
        if not now.exists:
            raise NotFound(f"this terminal's current workspace {now.name} no longer exists; "
                           "set another with `warden ws set NAME`")
        return now

    def current_name(self) -> str:
        """The current workspace's name, for a command that names none; InvalidInput when none
        (the command line lacks it), NotFound when it no longer exists."""
        if self.current().name is None:
            raise InvalidInput("no workspace named and none is current in this terminal: name one, give "
                               "-w NAME, or set one with `warden ws set NAME` (or `warden @NAME`)")
        name = self.require_current().name
        assert name is not None
        return name

    def set(self, typed: str) -> WorkspaceRecord:
        record = self.find(typed)
        self._store.change(self.terminal, lambda ctx: ctx.set(record.name))
        return record

    def back(self) -> str:
        new = self._store.change(self.terminal, lambda ctx: ctx.back())
        assert new.current is not None
        return new.current

    def forward(self) -> str:
        new = self._store.change(self.terminal, lambda ctx: ctx.forward())
        assert new.current is not None
        return new.current

    # -- saved working states (`ws snapshot|restore|export|import`) --------------------------
    def _saved(self, record: WorkspaceRecord) -> list[StateSnapshot]:
        assert self._states is not None
        doc = self._states.read(record.name)
        if doc.get("workspace_id") != record.id:
            return []  # another workspace of that name once: none of its states are this one's
        found = []
        listed = doc.get("snapshots")
        for item in listed if isinstance(listed, list) else []:
            try:
                found.append(StateSnapshot.from_json(item))
            except InvalidInput:
                continue
        return found

    def git_branch(self, record: WorkspaceRecord) -> str | None:
        return self._git_branch(record) if self._git_branch else None

    def snapshots(self, name: str) -> list[StateSnapshot]:
        return self._saved(self._workspaces.get(name))

    def snapshot(self, label: str | None, *, folder: str, variables: Sequence[str],
                 environ: Mapping[str, str]) -> tuple[WorkspaceRecord, StateSnapshot]:
        """Save where this terminal is in its current workspace: the folder (`folder`, when inside
        it), the variables named (never a secret), the git branch."""
        assert self._states is not None and self._clock is not None
        record = self._workspaces.get(self.current_name())
        values = {v: environ[v] for v in variables if v in environ}
        check_variables(variables, self._secret_names() if self._secret_names else (), values)
        root = os.path.realpath(record.path)
        here = os.path.realpath(folder)
        cwd = "/" + os.path.relpath(here, root) if here == root or here.startswith(root + os.sep) else "/"
        now = self._clock()
        snap = StateSnapshot(check_label(label) if label else now.strftime("s%Y%m%d-%H%M%S"), now.isoformat(),
                             "/" if cwd == "/." else cwd, values,
                             self._git_branch(record) if self._git_branch else None)

        def keep(doc: dict[str, object]) -> dict[str, object]:
            kept = [s for s in self._saved(record) if s.label != snap.label][-(MAX_SNAPSHOTS - 1):]
            return {"workspace_id": record.id, "snapshots": [s.to_json() for s in [*kept, snap]]}

        self._states.change(record.name, keep)
        return record, snap

    def restore(self, label: str | None) -> tuple[WorkspaceRecord, StateSnapshot]:
        """A saved state of the current workspace (the latest without a label)."""
        record = self._workspaces.get(self.current_name())
        saved = self._saved(record)
        chosen = [s for s in saved if label is None or s.label == label]
        if not chosen:
            raise NotFound(f"no saved state {label!r} of {record.name}" if label else
                           f"no saved state of {record.name}; `warden ws snapshot` saves one")
        snap = chosen[-1]
        root = os.path.realpath(record.path)
        there = os.path.realpath(record.path.rstrip("/") + snap.cwd)
        if there != root and not there.startswith(root + os.sep):
            # A folder of the workspace a bot replaced with a link: the shell would follow it out.
            raise Conflict(f"the saved folder {snap.cwd} of {record.name} now leads outside it (a link); "
                           "not restored", rule="context.link")
        return record, snap

    def export(self) -> str:
        record = self._workspaces.get(self.current_name())
        python = record.meta.get("python")
        return export_blob({"name": record.name, "template": record.template, "type": record.type,
                            # X.Y, as `create --python` takes it (the other home picks its own patch)
                            "python": ".".join(python.split(".")[:2]) if isinstance(python, str) else None,
                            "snapshots": [s.to_json() for s in self._saved(record)]})

    def import_blob(self, text: str, *, name: str | None,
                    create: Callable[[str, str | None, str | None], WorkspaceRecord]) -> WorkspaceRecord:
        """A workspace from another home's export: made from the same template (unless one of that
        name exists here, whose states it then takes), its saved states with it; current here."""
        assert self._states is not None
        doc = parse_blob(text)
        wanted = name or doc.get("name")
        if not isinstance(wanted, str):
            raise InvalidInput("the export names no workspace; give --name NAME")
        template = doc.get("template")
        # A catalog name only: a path would have this home read (and echo) any file as a template,
        # or take one an attacker wrote.
        if isinstance(template, str) and ("/" in template or "." in template or "\\" in template):
            raise InvalidInput(f"the export's template {template!r} is not a template name; nothing imported")
        python = doc.get("python")
        listed = doc.get("snapshots") or []
        if not isinstance(listed, list):
            raise InvalidInput("the export's saved states are not a list")
        snaps = [StateSnapshot.from_json(s) for s in listed][-MAX_SNAPSHOTS:]
        try:
            self._workspaces.get(wanted)
        except NotFound:
            pass
        else:  # never merged silently into a workspace of this home
            raise Conflict(f"workspace {wanted} exists here; import it under another name with --name NEW")
        record = create(wanted, template if isinstance(template, str) else None,
                        python if isinstance(python, str) else None)
        if record.status != "ready":
            raise Conflict(f"workspace {wanted} is {record.status}; its states were not imported")

        def merge(current: dict[str, object]) -> dict[str, object]:
            mine = self._saved(record)
            labels = {s.label for s in snaps}
            merged = [s for s in mine if s.label not in labels] + snaps
            return {"workspace_id": record.id, "snapshots": [s.to_json() for s in merged[-MAX_SNAPSHOTS:]]}

        self._states.change(record.name, merge)
        self._store.change(self.terminal, lambda ctx: ctx.set(record.name))
        return record
