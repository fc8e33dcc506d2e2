"""The Sandbox tab (seed 000's): the `sandbox.*` settings and the allowed and denied host paths.

A value is changed as `warden config set KEY VALUE` changes it, through that command: the same
validation, and a refused value leaves config.toml as it was, with the one-line error shown."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Input, Label, Static

from warden.core.settings import format_value
from warden.interfaces.console.commands import Commands, Done, as_words, home_relative
from warden.interfaces.console.widgets import RowTable, plain

__all__ = ["SandboxTab"]

_PREFIX = "sandbox."


class SandboxTab(Vertical):
    """The sandbox's settings, editable, and its path lists."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Refresh")]

    def __init__(self, commands: Commands) -> None:
        super().__init__(id="sandbox-tab")
        self._commands = commands
        self._settings: dict[str, dict[str, Any]] = {}
        self.editing: str | None = None

    def compose(self) -> ComposeResult:
        yield RowTable(("Setting", "Value", "Source"), id="setting-table")
        yield Static(id="setting-help", markup=False)
        with Horizontal(classes="editor"):
            yield Label("Enter on a setting edits it", id="setting-key")
            yield Input(placeholder="new value (lists: a,b,c)", id="setting-value")
        yield RowTable(("Path", "Action", "Mode", "Level"), id="path-table")
        with Horizontal(classes="editor"):
            yield Input(placeholder="host path, e.g. /srv/data", id="path-value")
            yield Button("Allow", id="allow", variant="success")
            yield Button("Deny", id="deny", variant="error")
            yield Button("Forget", id="forget")

    def reload(self) -> None:
        """Read the settings (`warden config show`) and paths (`warden sandbox list`) again."""
        shown = self._commands.data("config", "show")
        self._settings = {row["key"]: row for row in shown if row["key"].startswith(_PREFIX)}
        self.query_one("#setting-table", RowTable).fill(
            [(key, [key, format_value(row["value"]), row["source"]]) for key, row in self._settings.items()])
        environ = self._commands.environ
        rules = self._commands.data("sandbox", "list")
        self.query_one("#path-table", RowTable).fill(
            [(f"{r['path']}|{r['source']}", [home_relative(r["path"], environ), r["action"], r["mode"] or "-",
                                              r["source"]]) for r in rules])
        self._show_help()

    def _show_help(self) -> None:
        key = self.query_one("#setting-table", RowTable).chosen()
        row = self._settings.get(key) if key else None
        self.query_one("#setting-help", Static).update(
            plain(f"{key}: {row['description']}") if row else "")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "setting-table":
            self._show_help()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a setting: edit it, starting from the value `config get` prints."""
        if event.data_table.id != "setting-table":
            return
        key = self.query_one("#setting-table", RowTable).chosen()
        if key is None:
            return
        self.editing = key
        self.query_one("#setting-key", Label).update(plain(key))
        field = self.query_one("#setting-value", Input)
        field.value = format_value(self._settings[key]["value"])
        field.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "setting-value" and self.editing is not None:
            done = self._act("config", "set", self.editing, *as_words(event.value))
            if done.ok:
                self.query_one("#setting-table", RowTable).focus()
        elif event.input.id == "path-value":
            self._path("add")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self._path({"allow": "add", "deny": "remove"}.get(event.button.id or "", "forget"))

    def _path(self, op: str) -> None:
        field = self.query_one("#path-value", Input)
        value = field.value
        chosen = self.query_one("#path-table", RowTable).chosen()
        if op == "forget" and not value.strip() and chosen is not None:
            value = chosen.rsplit("|", 1)[0]  # the highlighted row's path (its key: path|level)
        done = self._act("sandbox", op, *as_words(value))
        if done.ok:
            field.value = ""

    def _act(self, *words: str) -> Done:
        done = self._commands.run(*words)
        self.app.say(done)  # type: ignore[attr-defined]
        if done.ok:
            self.reload()
        return done

    def action_reload(self) -> None:
        self.reload()
