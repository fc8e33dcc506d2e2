"""A Warden home for the console's tests, made through the real services with everything a
screenshot shows held still: the clock, the terminal, ids and accessors, the home folder's path
as shown (`~/…`). Two workspaces, a bot with a grant, a request waiting for approval."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from warden.bootstrap import App, bootstrap

NOW = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
APPROVAL_ID = "apr_0123456789abcdef"
REPORT = b"# Report\n\nfinal figures: 42\n"


def console_environ(home: Path) -> dict[str, str]:
    import os

    return {"PATH": os.environ["PATH"], "HOME": str(home.parent), "WARDEN_HOME": str(home),
            "WARDEN_DAEMON": "0", "WARDEN_TERMINAL": "console-test", "LANG": "C.UTF-8"}


def opener(home: Path) -> Callable[[], App]:
    """What `warden console` is given: a way to open the home (again after a setting changes)."""
    environ = console_environ(home)
    return lambda: bootstrap(home, environ=environ, clock=lambda: NOW)


def make_home(home: Path, monkeypatch: object) -> None:
    """Fill `home` as a person and a bot would have (`warden init`, `create`, `bot register`,
    `grant`, a write to an `ask` zone), through the real services."""
    import warden.services.approvals as approvals_module
    from warden.services.auth import Principal

    monkeypatch.setattr(approvals_module, "new_approval_id", lambda: APPROVAL_ID)  # type: ignore[attr-defined]
    counter = itertools.count(1)
    app = opener(home)()
    try:
        app.home_setup.init()
        notes = Path(app.workspaces.create("notes", template="minimal").path)
        (notes / "final").mkdir()
        (notes / ".warden").mkdir(exist_ok=True)
        (notes / ".warden" / "zones.yaml").write_text("zones:\n  final: {approval: {write: ask}}\n")
        from datetime import timedelta

        app.workspaces.create("scratch", template="minimal", kind="temporary", ttl=timedelta(hours=2))
        app.sandbox_paths.add(str(home.parent / "datasets"), level="global", workspace=None, session=None, mode="ro")
        app.sandbox_paths.remove(str(home.parent / ".aws"), level="global", workspace=None, session=None)
        app.grants._random = lambda n: bytes([next(counter)]) * n  # type: ignore[attr-defined]
        app.grants.register_bot("helper")
        issued = app.grants.grant("notes", "helper", "read,write")
        principal = Principal(bot="helper", kind="grant", chain=(issued.grant,))
        app.approvals.ask(principal, "notes", "write", "/final/report.md", zone="final",
                          rule="zone final: write needs approval", content=REPORT)
    finally:
        app.close()
