"""The Approvals tab: bots' requests waiting for a person, each with the change it would make
(the text of `warden approvals --show ID`: the diff of a write, a proposal's message and diff)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from warden.core.approvals import where
from warden.interfaces.cli.output import printable
from warden.interfaces.console.commands import Commands, Done
from warden.interfaces.console.widgets import RowTable, plain

__all__ = ["ApprovalsTab"]


class ApprovalsTab(Vertical):
    """The queue; `y` approves the chosen request (Warden carries it out as asked), `n` denies it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('approve')", "Approve"), Binding("n", "answer('deny')", "Deny"),
        Binding("r", "reload", "Refresh")]

    def __init__(self, commands: Commands) -> None:
        super().__init__(id="approvals-tab")
        self._commands = commands
        self._ids: tuple[str, ...] = ()
        self._shown: str | None = None
        # The request a refill put under the cursor in place of one that went (answered elsewhere,
        # expired): a `y` pressed a moment later was meant for the one that went, so it is not
        # taken for this one until the person has been told (or moved the cursor themselves).
        self._slipped: str | None = None

    def compose(self) -> ComposeResult:
        yield RowTable(("Id", "Workspace", "Bot", "Operation", "Path", "Size", "Asked (UTC)"), id="approval-table")
        with VerticalScroll(id="approval-preview-box"):
            yield Static(id="approval-preview", markup=False)

    def reload(self, *, quiet: bool = False) -> None:
        """Read the queue (`warden approvals`); `quiet` (the poll) redraws only when it changed."""
        rows = self._commands.data("approvals")
        ids = tuple(r["id"] for r in rows)
        if quiet and ids == self._ids:
            return
        self._ids = ids
        table = self.query_one(RowTable)
        before = table.chosen()
        table.fill(
            [(r["id"], [r["id"], r["workspace"], r["bot"], r["operation"],
                        where(r["path"], r.get("destination")),  # a move's destination too
                        "" if r["size"] is None else r["size"], r["created"][:19].replace("T", " ")]) for r in rows])
        after = table.chosen()
        if before is not None and before not in ids and after is not None:
            self._slipped = after
        self._preview(force=True)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.query_one(RowTable).chosen() != self._slipped:
            self._slipped = None
        self._preview()

    def _preview(self, *, force: bool = False) -> None:
        chosen = self.query_one(RowTable).chosen()
        if chosen == self._shown and not force:
            return
        self._shown = chosen
        preview = self.query_one("#approval-preview", Static)
        if chosen is None:
            preview.update("no requests waiting for approval")
            return
        done = self._commands.run("approvals", "--show", chosen)
        # The CLI's text is escaped already, line by line: shown as it stands, markup never read.
        preview.update(plain(done.text, lines=True))

    def action_answer(self, verb: str) -> None:
        chosen = self.query_one(RowTable).chosen()
        if chosen is None:
            return
        if chosen == self._slipped:
            self._slipped = None
            self.app.say(Done(("approvals", "--show", chosen), False, None,  # type: ignore[attr-defined]
                              f"the request you were reading is gone; {printable(chosen)} is chosen now: "
                              f"read it, then press {'y' if verb == 'approve' else 'n'} again", "conflict"))
            return
        self.app.say(self._commands.run(verb, chosen))  # type: ignore[attr-defined]
        self.reload()

    def action_reload(self) -> None:
        self.reload()
