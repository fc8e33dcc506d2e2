"""The console's row table is as wide as its cells from the moment it is filled.

DataTable measures new rows only when its message queue runs empty; a frame drawn before then
stays in its caches with the old widths, so on a busy machine a refilled path column showed
`~/da` for `~/datasets`. RowTable.fill sets the widths itself, at once.
"""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from warden.interfaces.console.widgets import RowTable


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield RowTable(("Path", "Action"), id="t")


def test_a_filled_table_is_as_wide_as_its_cells_before_any_idle() -> None:
    async def scenario() -> list[int]:
        app = _One()
        async with app.run_test():
            table = app.query_one("#t", RowTable)
            # No await between the fill and the look: no idle, no measuring pass in between.
            table.fill([("a", ["~/datasets", "allow"]), ("b", ["~/.aws", "deny"])])
            widths = [column.get_render_width(table) - 2 * table.cell_padding for column in table.ordered_columns]
            table.fill([("c", ["/srv/a-much-longer-path", "allow"])])
            widths += [table.ordered_columns[0].get_render_width(table) - 2 * table.cell_padding]
            return widths

    assert asyncio.run(scenario()) == [len("~/datasets"), len("Action"), len("/srv/a-much-longer-path")]
