"""Terminals' working context: set, show and move through each terminal's current workspace.

The terminal is named by the caller (interfaces/cli/terminal_id.py); its context lives in the
home (adapters/terminals.py). A workspace is found by name (exact, else an unambiguous prefix or
part of it, core/context.py) or by a path (anything with a "/": the workspace whose folder
holds it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from warden.core.context import TerminalContext, match_workspace
from warden.core.errors import InvalidInput, NotFound
from warden.core.ports import TerminalStore
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
    def __init__(self, store: TerminalStore, workspaces: WorkspaceService, terminal: str) -> None:
        self._store = store
        self._workspaces = workspaces
        self.terminal = terminal

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
            raise NotFound(f"no workspace holds {typed}; `warden create NAME` makes one (adopting an existing "
                           "folder in place is not supported yet)")
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
        """The current workspace's name, for a command that names none; InvalidInput when none."""
        now = self.current()
        if now.name is None:
            raise InvalidInput("no workspace named and none is current in this terminal: name one, give "
                               "-w NAME, or set one with `warden ws set NAME` (or `warden @NAME`)")
        if not now.exists:
            raise NotFound(f"this terminal's current workspace {now.name} no longer exists; "
                           "set another with `warden ws set NAME`")
        return now.name

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
