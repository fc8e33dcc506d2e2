"""The Audit tab: the newest events, followed as they come (polled, as `warden audit` reads them),
narrowed by a filter, and the hash chain verified on request (`warden audit verify`)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Input, Static

from warden.interfaces.console.commands import Commands, home_relative
from warden.interfaces.console.widgets import RowTable, plain

__all__ = ["AuditTab"]

SHOWN = 500  # the newest events read each time (the log itself keeps every one)
_FIELDS = ("actor", "action", "target", "decision", "rule", "result")


class AuditTab(Vertical):
    """The log, newest first."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "verify", "Verify chain"), Binding("slash", "filter", "Filter"),
        Binding("r", "reload", "Refresh")]

    def __init__(self, commands: Commands) -> None:
        super().__init__(id="audit-tab")
        self._commands = commands
        self._head: int | None = None
        self._events: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: words every shown event holds (actor, action, target, result…)",
                    id="audit-filter")
        yield RowTable(("Seq", "Time (UTC)", "Actor", "Action", "Target", "Decision", "Result"), id="audit-table")
        yield Static(id="audit-verdict", markup=False)

    def reload(self, *, quiet: bool = False) -> None:
        """Read the newest events (`warden audit --limit N`); `quiet` (the poll) redraws only on news."""
        events = self._commands.data("audit", "--limit", str(SHOWN))
        head = events[-1]["seq"] if events else None
        if quiet and head == self._head:
            return
        self._head = head
        self._events = events
        self._fill()

    def _fill(self) -> None:
        words = self.query_one("#audit-filter", Input).value.lower().split()
        environ = self._commands.environ
        rows = []
        for e in reversed(self._events):
            if words and not all(any(w in str(e[f]).lower() for f in _FIELDS) for w in words):
                continue
            rows.append((str(e["seq"]), [e["seq"], e["at"][:19].replace("T", " "), e["actor"], e["action"],
                                         home_relative(e["target"], environ), e["decision"], e["result"]]))
        self.query_one(RowTable).fill(rows)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "audit-filter":
            self._fill()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "audit-filter":
            self.query_one(RowTable).focus()

    def action_filter(self) -> None:
        self.query_one("#audit-filter", Input).focus()

    def action_verify(self) -> None:
        done = self._commands.run("audit", "verify")
        self.app.say(done)  # type: ignore[attr-defined]
        self.query_one("#audit-verdict", Static).update(plain(done.line))

    def action_reload(self) -> None:
        self.reload()
