"""Pieces every tab uses: a row table of plain text, and the confirm dialog."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Label

from warden.interfaces.cli.output import printable

__all__ = ["Confirm", "RowTable", "plain"]


def plain(value: object, *, lines: bool = False) -> Text:
    """A cell or text shown exactly as written: Textual would read `[red]` in a string as markup,
    and a bot chooses names, paths and messages; control characters come out escaped (line
    breaks too, unless `lines`: a text the console itself put together, already escaped)."""
    text = "-" if value is None or value == "" else str(value)
    if lines:
        return Text("\n".join(printable(line) for line in text.split("\n")))
    return Text(printable(text), no_wrap=True)


class RowTable(DataTable[Text]):
    """A table chosen by rows, filled in one call, that keeps the chosen row across a refill."""

    def __init__(self, columns: Sequence[str], *, id: str) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._headers = tuple(columns)

    def on_mount(self) -> None:
        self.add_columns(*self._headers)

    def fill(self, rows: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Replace every row by `rows` (key, cells), keeping the cursor on the same key if it is there.

        The columns are made again as wide as their widest cell: DataTable measures new rows
        only once its message queue runs empty, and a frame drawn before that is kept in its
        caches with the old widths (on a busy machine the path column stayed 4 wide: `~/da`)."""
        chosen = self.chosen()
        cells = [(key, [plain(v) for v in values]) for key, values in rows]
        widths = [max([len(header), *(texts[i].cell_len for _, texts in cells if i < len(texts))])
                  for i, header in enumerate(self._headers)]
        self.clear(columns=True)
        for header, width in zip(self._headers, widths, strict=True):
            self.add_column(header, width=width)
        for key, texts in cells:
            self.add_row(*texts, key=key)
        keys = [key for key, _ in rows]
        if chosen in keys:
            self.move_cursor(row=keys.index(chosen))

    def chosen(self) -> str | None:
        """The key of the row under the cursor (None when the table is empty)."""
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return str(key) if key is not None else None


class Confirm(ModalScreen[bool]):
    """Asks before a destructive action; `y` or the button confirms, `n`/escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Grid { grid-size: 2; grid-gutter: 1 2; grid-rows: auto 3; padding: 1 2; width: 64; height: auto;
                     border: thick $error; background: $surface; }
    Confirm Label { column-span: 2; width: 100%; }
    Confirm Button { width: 100%; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self._question = question

    def compose(self) -> ComposeResult:
        with Grid():
            yield Label(plain(self._question, lines=True), id="question")
            yield Button("Yes (y)", variant="error", id="yes")
            yield Button("No (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
