"""The Grants tab: the registered bots, every workspace's grants, and revoking one."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Label

from warden.interfaces.console.commands import Commands
from warden.interfaces.console.widgets import Confirm, RowTable

__all__ = ["GrantsTab"]


class GrantsTab(Vertical):
    """Who may do what where, until when (never a token: those are shown once, at `warden grant`)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "revoke", "Revoke"), Binding("r", "reload", "Refresh")]

    def __init__(self, commands: Commands) -> None:
        super().__init__(id="grants-tab")
        self._commands = commands
        self._grants: dict[str, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        yield Label("Bots")
        yield RowTable(("Bot", "Id", "Registered", "By"), id="bot-table")
        yield Label("Grants")
        yield RowTable(("Workspace", "Bot", "Permissions", "Zones", "Expires (UTC)", "State", "Accessor"),
                       id="grant-table")

    def reload(self) -> None:
        """Read the bots (`warden bot list`) and each workspace's grants (`warden grants NAME`)."""
        bots = self._commands.data("bot", "list")
        self.query_one("#bot-table", RowTable).fill(
            [(b["name"], [b["name"], b["id"], str(b["created"])[:19], b["created_by"]]) for b in bots])
        self._grants = {}
        for ws in self._commands.data("list"):
            for grant in self._commands.data("grants", ws["name"]):
                self._grants[grant["accessor"]] = {**grant, "workspace": ws["name"]}
        self.query_one("#grant-table", RowTable).fill(
            [(acc, [g["workspace"], g["bot"], ",".join(g["permissions"]),
                    "*" if g["zones"] is None else (",".join(g["zones"]) or "none"),
                    str(g["expires"])[:16].replace("T", " "), g["state"], acc]) for acc, g in self._grants.items()])

    def action_reload(self) -> None:
        self.reload()

    def action_revoke(self) -> None:
        accessor = self.query_one("#grant-table", RowTable).chosen()
        grant = self._grants.get(accessor) if accessor else None
        if grant is None or accessor is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.say(self._commands.run(  # type: ignore[attr-defined]
                    "revoke", grant["workspace"], "--accessor", accessor))
                self.reload()

        self.app.push_screen(Confirm(f"Revoke {grant['bot']}'s grant {accessor} on {grant['workspace']}? "
                                     "Grants minted under it go too."), answered)
