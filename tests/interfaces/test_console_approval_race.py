"""Finding: a request answered elsewhere (or expired) while a person reads it in the Approvals tab
left the cursor on the next request after the poll's refill, so a `y` meant for the one that went
approved another — one a bot may have timed to take its place. The console now says so instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import warden.services.approvals as approvals_module
from tests.interfaces.test_console import cell_texts, drive, status
from tests.support.console_home import APPROVAL_ID, make_home, opener
from warden.interfaces.console.app import WardenConsole
from warden.interfaces.console.approvals import ApprovalsTab
from warden.services.auth import Principal

SECOND = "apr_" + "7" * 16


@pytest.fixture
def filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "warden-home"
    home.mkdir()
    make_home(home, monkeypatch)
    return home


def _swap(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first request denied elsewhere, and a bot's other request waiting in its place."""
    monkeypatch.setattr(approvals_module, "new_approval_id", lambda: SECOND)
    app = opener(home)()
    try:
        grant = app.grants.list_grants("notes")[0]
        principal = Principal(bot="helper", kind="grant", chain=(grant,))
        app.approvals.ask(principal, "notes", "write", "/final/other.md", zone="final",
                          rule="zone final: write needs approval", content=b"not what was read\n")
        app.approvals.answer(APPROVAL_ID, approve=False, actor="user")
    finally:
        app.close()


def test_y_is_not_taken_for_the_request_that_slipped_under_the_cursor(filled: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("4")
        await pilot.pause()
        assert [r[0] for r in cell_texts(console, "approval-table")] == [APPROVAL_ID]
        _swap(filled, monkeypatch)
        console.query_one(ApprovalsTab).reload(quiet=True)  # what the poll does
        await pilot.pause()
        assert [r[0] for r in cell_texts(console, "approval-table")] == [SECOND]
        await pilot.press("y")  # meant for the first one
        await pilot.pause()
        assert "is gone" in status(console) and SECOND in status(console)
        await pilot.press("y")  # told, and pressed again: now it is this one
        await pilot.pause()
        assert f"approved {SECOND}" in status(console)

    drive(filled, scenario)
    assert (filled / "workspaces" / "notes" / "final" / "other.md").read_bytes() == b"not what was read\n"
