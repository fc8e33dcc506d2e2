"""`warden console` driven headless with Textual's pilot, one test per tab: keys pressed as a
person would, then the widgets and the real state of the home (registry, config.toml, files)
checked. Every action must be the CLI's command, so a refusal shows the CLI's one line and
changes nothing."""

from __future__ import annotations

import asyncio
import os
import pty
import struct
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.console_home import APPROVAL_ID, REPORT, console_environ, make_home, opener
from warden.interfaces.console.app import WardenConsole

SIZE = (120, 36)


@pytest.fixture
def filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "warden-home"
    home.mkdir()
    make_home(home, monkeypatch)
    return home


def drive(home: Path, scenario: Callable[[WardenConsole, Any], Awaitable[None]]) -> None:
    """Run the console on `home` headless and play `scenario(app, pilot)` in it."""
    async def run() -> None:
        console = WardenConsole(opener(home), poll=False)
        async with console.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await scenario(console, pilot)

    asyncio.run(run())


def status(console: WardenConsole) -> str:
    return str(console.query_one("#status").render())


def cell_texts(console: WardenConsole, table_id: str) -> list[list[str]]:
    table = console.query_one(f"#{table_id}")
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]  # type: ignore[attr-defined]


def test_workspaces_lock_unlock_archive_and_destroy_after_a_confirm(filled: Path) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        rows = cell_texts(console, "workspace-table")
        assert [r[:3] for r in rows] == [["notes", "ready", "user"], ["scratch", "ready", "temporary"]]
        assert rows[0][4] == "never" and rows[1][4] == "2026-03-14 11:26"  # the temporary one's expiry
        assert rows[0][3][-1] in "BKMG" and rows[0][3][0].isdigit()  # a size, measured (80.1K)
        assert "~/warden-home/workspaces/notes" in str(console.query_one("#workspace-detail").render())

        await pilot.press("l")
        await pilot.pause()
        assert "(warden lock notes)" in status(console)
        assert cell_texts(console, "workspace-table")[0][5] == "this terminal"
        app = opener(filled)()
        try:
            assert [name for name, _ in app.locks.locks()] == ["notes"]
        finally:
            app.close()

        await pilot.press("u")
        await pilot.pause()
        assert "unlocked notes" in status(console)
        assert cell_texts(console, "workspace-table")[0][5] == "-"

        # Destroy asks first; `n` leaves everything as it was.
        await pilot.press("down", "d")
        await pilot.pause()
        assert "Destroy workspace scratch?" in str(console.screen.query_one("#question").render())
        await pilot.press("n")
        await pilot.pause()
        assert [r[0] for r in cell_texts(console, "workspace-table")] == ["notes", "scratch"]
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert "destroyed workspace scratch" in status(console)
        assert [r[0] for r in cell_texts(console, "workspace-table")] == ["notes"]

        await pilot.press("a")
        await pilot.pause()
        assert "archived notes" in status(console), status(console)
        assert cell_texts(console, "workspace-table")[0][1] == "archived"

    drive(filled, scenario)
    app = opener(filled)()
    try:
        assert [(r.name, r.status) for r in app.workspaces.list()] == [("notes", "archived")]
    finally:
        app.close()


def test_a_refused_action_shows_the_clis_line_and_changes_nothing(filled: Path) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("u")  # nothing to unlock
        await pilot.pause()
        line = status(console)
        assert line.startswith("warden: ") and "\n" not in line
        assert console.query_one("#status").has_class("refused")

    drive(filled, scenario)


def test_sandbox_settings_change_as_config_set_does_and_a_bad_value_changes_nothing(filled: Path) -> None:
    config = filled / "config.toml"

    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("2")
        await pilot.pause()
        keys = [r[0] for r in cell_texts(console, "setting-table")]
        assert "sandbox.max_file_size_mb" in keys and all(k.startswith("sandbox.") for k in keys)
        table = console.query_one("#setting-table")
        table.move_cursor(row=keys.index("sandbox.max_file_size_mb"))  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        field = console.query_one("#setting-value")
        assert field.value == "100"  # type: ignore[attr-defined]

        before = config.read_bytes()
        field.value = "lots"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        line = status(console)
        assert line.startswith("warden: ") and "sandbox.max_file_size_mb" in line
        assert config.read_bytes() == before  # refused: config.toml untouched

        field.value = "250"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert "(warden config set sandbox.max_file_size_mb 250)" in status(console)
        row = cell_texts(console, "setting-table")[keys.index("sandbox.max_file_size_mb")]
        assert row[1:] == ["250", str(config)] or row[1] == "250"

        # Paths: allow one, then deny another, each as `warden sandbox add|remove`.
        console.query_one("#path-value").value = "/srv/data"  # type: ignore[attr-defined]
        await pilot.click("#allow")
        await pilot.pause()
        console.query_one("#path-value").value = "/srv/data/secret"  # type: ignore[attr-defined]
        await pilot.click("#deny")
        await pilot.pause()
        paths = {r[0]: r[1] for r in cell_texts(console, "path-table")}
        assert paths["/srv/data"] == "allow" and paths["/srv/data/secret"] == "deny"
        console.query_one("#path-value").value = ""  # type: ignore[attr-defined]
        await pilot.click("#allow")
        await pilot.pause()
        assert status(console).startswith("warden: empty path")
        # Forget, as `warden sandbox forget`: the typed path, else the highlighted row's.
        console.query_one("#path-value").value = "/srv/data/secret"  # type: ignore[attr-defined]
        await pilot.click("#forget")
        await pilot.pause()
        assert "/srv/data/secret" not in {r[0] for r in cell_texts(console, "path-table")}
        assert "(it was denied)" in status(console)
        console.query_one("#path-value").value = ""  # type: ignore[attr-defined]
        table = console.query_one("#path-table")
        table.move_cursor(row=[r[0] for r in cell_texts(console, "path-table")].index("/srv/data"))  # type: ignore[attr-defined]
        await pilot.pause()
        await pilot.click("#forget")
        await pilot.pause()
        assert "/srv/data" not in {r[0] for r in cell_texts(console, "path-table")}, status(console)
        console.query_one("#path-value").value = "/srv/data/secret"  # type: ignore[attr-defined]
        await pilot.click("#deny")
        await pilot.pause()

    drive(filled, scenario)
    app = opener(filled)()
    try:
        assert app.settings.get("sandbox.max_file_size_mb") == 250
        decided = app.sandbox_paths.check("/srv/data/secret/key", "read", workspace=None, session=None)
        assert not decided.allowed
    finally:
        app.close()


def test_grants_lists_bots_and_grants_and_revokes_after_a_confirm(filled: Path) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("3")
        await pilot.pause()
        assert [r[0] for r in cell_texts(console, "bot-table")] == ["helper"]
        grants = cell_texts(console, "grant-table")
        assert [(g[0], g[1], g[2], g[5]) for g in grants] == [("notes", "helper", "read,write", "active")]
        await pilot.press("v")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert "revoked 1 grant(s) on notes" in status(console)
        assert cell_texts(console, "grant-table")[0][5] == "revoked"

    drive(filled, scenario)
    app = opener(filled)()
    try:
        assert [g.revoked is not None for g in app.grants.list_grants("notes")] == [True]
    finally:
        app.close()


def test_approvals_show_the_diff_and_approving_writes_exactly_the_bytes(filled: Path) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("4")
        await pilot.pause()
        assert [r[:5] for r in cell_texts(console, "approval-table")] == [
            [APPROVAL_ID, "notes", "helper", "write", "/final/report.md"]]
        preview = str(console.query_one("#approval-preview").render())
        assert "helper asks to write /final/report.md" in preview
        assert "+final figures: 42" in preview  # the diff `warden approvals --show` prints
        await pilot.press("y")
        await pilot.pause()
        assert f"approved {APPROVAL_ID}" in status(console)
        assert console.query_one("#approval-table").row_count == 0  # type: ignore[attr-defined]

    drive(filled, scenario)
    assert (filled / "workspaces" / "notes" / "final" / "report.md").read_bytes() == REPORT


def test_denying_a_request_writes_nothing(filled: Path) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("4")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert f"denied {APPROVAL_ID}" in status(console)

    drive(filled, scenario)
    assert not (filled / "workspaces" / "notes" / "final" / "report.md").exists()


def test_audit_follows_new_events_filters_and_verifies_the_chain(filled: Path) -> None:
    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("5")
        await pilot.pause()
        rows = cell_texts(console, "audit-table")
        assert rows[0][3] == "approval.request" and rows[-1][3] == "init"  # newest first
        # An event written by another process meanwhile shows on the next poll.
        other = opener(filled)()
        try:
            other.audit.record(actor="user", action="config.set", target="sandbox.timeout")
        finally:
            other.close()
        console.query_one("#audit-tab").reload(quiet=True)  # type: ignore[attr-defined]
        await pilot.pause()
        assert cell_texts(console, "audit-table")[0][3] == "config.set"

        await pilot.press("slash")
        await pilot.press(*"grant")
        await pilot.pause()
        assert {r[3] for r in cell_texts(console, "audit-table")} == {"grant.create"}

        await pilot.press("enter", "v")
        await pilot.pause()
        verdict = str(console.query_one("#audit-verdict").render())
        assert verdict.startswith("audit log intact:") and "hash chain verified" in verdict

    drive(filled, scenario)


def test_a_broken_chain_is_said_in_one_line(filled: Path) -> None:
    import sqlite3

    with sqlite3.connect(filled / "warden.db") as db:
        db.execute("UPDATE audit_events SET result = 'forged' WHERE seq = 2")

    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("5", "v")
        await pilot.pause()
        assert status(console).startswith("warden: audit log broken at row 2")

    drive(filled, scenario)


def test_a_bots_markup_and_escapes_are_shown_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bot chooses paths: `[red]` must not turn into colour, an escape byte must not reach the terminal."""
    home = tmp_path / "warden-home"
    home.mkdir()
    make_home(home, monkeypatch)
    app = opener(home)()
    try:
        app.audit.record(actor="bot:helper", action="file.write", target="notes:/[reverse]x\x1b[2J")
    finally:
        app.close()

    async def scenario(console: WardenConsole, pilot: Any) -> None:
        await pilot.press("5")
        await pilot.pause()
        assert cell_texts(console, "audit-table")[0][4] == "notes:/[reverse]x\\x1b[2J"

    drive(home, scenario)


def _console_in_pty(environ: dict[str, str], columns: int, lines: int) -> tuple[int, str]:
    import fcntl
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "warden", "console"], stdin=follower, stdout=follower,
                            stderr=subprocess.PIPE, env=environ)
    os.close(follower)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(leader)
    return proc.returncode, err.decode()


def test_not_on_a_terminal_or_too_small_is_one_line_and_status_1(filled: Path) -> None:
    environ = console_environ(filled)
    piped = subprocess.run([sys.executable, "-m", "warden", "console"], env=environ, capture_output=True,
                           text=True, timeout=60, check=False)
    assert piped.returncode == 1
    assert piped.stderr.startswith("warden: warden console needs a terminal") and piped.stderr.count("\n") == 1
    assert piped.stdout == ""
    code, err = _console_in_pty(environ, 60, 20)
    assert code == 1 and "terminal is 60x20; warden console needs at least 80x24" in err, err
    assert err.count("\n") == 1


def test_help_does_not_import_textual(filled: Path) -> None:
    probe = ("import sys\nfrom warden.interfaces.cli.main import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "assert 'textual' not in sys.modules, 'textual imported'\n")
    proc = subprocess.run([sys.executable, "-c", probe], env=console_environ(filled), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "console" in proc.stdout
