"""The Workspaces tab: every workspace with its status, size, expiry, lock and processes;
archive, destroy (after a confirm), lock and unlock, each as the `warden` command it is."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from warden.interfaces.cli.output import human_size
from warden.interfaces.console.commands import Commands, Done, home_relative
from warden.interfaces.console.widgets import Confirm, RowTable, plain

__all__ = ["WorkspacesTab"]

COLUMNS = ("Name", "Status", "Type", "Size", "Expires (UTC)", "Lock", "Processes")


class WorkspacesTab(Vertical):
    """Workspaces at a glance, and what a person does to one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "archive", "Archive"), Binding("d", "destroy", "Destroy"),
        Binding("l", "lock", "Lock"), Binding("u", "unlock", "Unlock"),
        Binding("r", "reload", "Refresh")]

    def __init__(self, commands: Commands) -> None:
        super().__init__(id="workspaces-tab")
        self._commands = commands
        self._rows: dict[str, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        yield RowTable(COLUMNS, id="workspace-table")
        yield Static(id="workspace-detail", markup=False)

    def reload(self) -> None:
        """Read the workspaces again (`warden list`, `warden locks`, `warden ps NAME`)."""
        commands = self._commands
        listed = commands.data("list")
        locks = {row["workspace"]: row for row in commands.data("locks")}
        self._rows = {}
        for ws in listed:
            name = ws["name"]
            processes = commands.run("ps", name)
            running = [p for p in processes.data or () if p.get("status") in ("starting", "running")]
            self._rows[name] = {**ws, "lock": locks.get(name), "processes": running, "size": self._measured(ws)}
        self.query_one(RowTable).fill([(name, self._cells(row)) for name, row in self._rows.items()])
        self._show_detail()

    def _measured(self, ws: dict[str, Any]) -> str:
        if ws["status"] == "archived":
            return "-"
        try:
            return human_size(self._commands.app.quota.usage(ws["path"]).bytes)
        except OSError:  # gone under us (destroyed meanwhile): shown as unknown
            return "?"

    @staticmethod
    def _cells(row: dict[str, Any]) -> list[object]:
        lock = row["lock"]
        held = "-" if lock is None else ("this terminal" if lock["this_terminal"] else str(lock["terminal"]))
        expires = str(row["expires"])[:16].replace("T", " ") if row["expires"] else "never"
        return [row["name"], row["status"], row["type"], row["size"], expires, held, len(row["processes"])]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        name = self.query_one(RowTable).chosen()
        row = self._rows.get(name) if name else None
        detail = self.query_one("#workspace-detail", Static)
        if row is None:
            detail.update("no workspaces: `warden create NAME` makes one")
            return
        environ = self._commands.environ
        lines = [f"{row['name']}: {home_relative(row['path'], environ)}",
                 f"template {row['template'] or '-'} · created {str(row['created'])[:19]} · "
                 f"last used {str(row['last_accessed'])[:19]}"]
        lock = row["lock"]
        if lock is not None:
            lines.append(f"locked by terminal {lock['terminal']} until {str(lock['expires'])[:19]}"
                         + (f": {lock['reason']}" if lock["reason"] else ""))
        lines += [f"process {p['id']}: {p['status']} {' '.join(p.get('cmd') or [])}" for p in row["processes"]]
        detail.update(plain("\n".join(lines), lines=True))

    # -- actions: each one a `warden` command ---------------------------------------------
    def _chosen(self) -> str | None:
        return self.query_one(RowTable).chosen()

    def _act(self, *words: str) -> Done:
        done = self._commands.run(*words)
        self.app.say(done)  # type: ignore[attr-defined]
        self.reload()
        return done

    def action_reload(self) -> None:
        self.reload()

    def action_archive(self) -> None:
        if (name := self._chosen()) is not None:
            self._act("archive", name)

    def action_lock(self) -> None:
        if (name := self._chosen()) is not None:
            self._act("lock", name)

    def action_unlock(self) -> None:
        if (name := self._chosen()) is not None:
            self._act("unlock", name)

    def action_destroy(self) -> None:
        name = self._chosen()
        if name is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._act("destroy", name, "--yes")

        self.app.push_screen(Confirm(f"Destroy workspace {name}? Its folder is packed into an archive "
                                     f"first; `warden unarchive {name}` brings it back."), answered)
