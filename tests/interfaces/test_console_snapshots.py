"""Screenshots of `warden console`, one per tab, compared with the SVGs kept in
tests/interfaces/__snapshots__/ (pytest-textual-snapshot): a change of layout fails here and is
seen in review. To accept a change on purpose: `pytest tests/interfaces/test_console_snapshots.py
--snapshot-update`, then look at the SVGs (docs/console/ holds the same files, for the docs).

Held still for them: the clock, ids, the terminal's name and size, the home shown as `~/…`, and
each workspace's size (it counts `.workspace.json`, which names the test's own folder)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.console_home import make_home, opener
from warden.interfaces.console.app import WardenConsole
from warden.interfaces.console.workspaces import WorkspacesTab

SIZE = (120, 36)
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_console_snapshots"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
# tab → the key that opens it and what is done there before the screenshot
TABS = {"workspaces": ("1",), "sandbox": ("2",), "grants": ("3",), "approvals": ("4",), "audit": ("5",)}


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WardenConsole:
    home = tmp_path / "warden-home"
    home.mkdir()
    make_home(home, monkeypatch)
    monkeypatch.setattr(WorkspacesTab, "_measured", lambda self, ws: "-" if ws["status"] == "archived" else "84.0K")
    return WardenConsole(opener(home), poll=False)


@pytest.mark.parametrize("tab", list(TABS))
def test_each_tab_looks_as_kept(tab: str, console: WardenConsole, snap_compare: Callable[..., bool]) -> None:
    assert snap_compare(console, press=TABS[tab], terminal_size=SIZE)


def test_a_refusal_on_the_sandbox_tab_looks_as_kept(console: WardenConsole,
                                                    snap_compare: Callable[..., bool]) -> None:
    async def bad_value(pilot: Any) -> None:
        await pilot.press("2", "down", "down", "down", "enter")
        pilot.app.query_one("#setting-value").value = "lots"
        await pilot.press("enter")
        # The refusal re-reads the tab: wait until the status line says it and both tables hold
        # their rows, then let them lay out again (under load a fixed pause caught the path table
        # with the widths of its first, empty layout).
        app = pilot.app
        for _ in range(200):
            said = "is not true or false" in str(app.query_one("#status").render())
            if said and app.query_one("#path-table").row_count == 2 and app.query_one("#setting-table").row_count:
                break
            await pilot.pause(0.05)
        # The value field keeps the focus: its cursor blinks, and a slow run caught it off. Held on
        # (as kept) the picture no longer depends on when it is taken.
        app.query_one("#setting-value").cursor_blink = False
        for _ in range(3):
            await pilot.wait_for_scheduled_animations()
            await pilot.pause(0.05)

    assert snap_compare(console, run_before=bad_value, terminal_size=SIZE)


@pytest.mark.parametrize("tab", list(TABS))
def test_the_docs_show_the_kept_screenshots(tab: str) -> None:
    kept = SNAPSHOTS / f"test_each_tab_looks_as_kept[{tab}].svg"
    assert (DOCS / f"{tab}.svg").read_text() == kept.read_text(), (
        f"docs/console/{tab}.svg differs from {kept.name}: copy it over")
