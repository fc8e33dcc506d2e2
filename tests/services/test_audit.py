"""The audit log's hash chain finds edited and deleted rows and names the first broken one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import Cli
from warden.bootstrap import App
from warden.core.audit import AuditEvent, event_hash, verify_chain


def _fill(app: App, n: int) -> None:
    for i in range(n):
        app.audit.record(actor="user", action="test.op", target=f"t{i}", detail={"i": i})


def test_intact_chain_verifies(app: App) -> None:
    _fill(app, 5)
    assert app.audit.verify() == (5, None)


def test_edited_row_is_named(app: App, home: Path) -> None:
    _fill(app, 5)
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("UPDATE audit_events SET result = 'forged' WHERE seq = 3")
    _count, broken = app.audit.verify()
    assert broken is not None and broken.seq == 3 and "edited" in broken.reason


def test_deleted_row_is_named(app: App, home: Path) -> None:
    _fill(app, 5)
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("DELETE FROM audit_events WHERE seq = 2")
    _count, broken = app.audit.verify()
    assert broken is not None and broken.seq == 2


def test_deleted_first_row_is_named(app: App, home: Path) -> None:
    _fill(app, 3)
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("DELETE FROM audit_events WHERE seq = 1")
    _count, broken = app.audit.verify()
    assert broken is not None and broken.seq == 1


def test_rehashed_forgery_still_breaks_the_next_link(app: App, home: Path) -> None:
    """Editing a row and recomputing its own hash breaks the link of the row after it."""
    _fill(app, 4)
    with sqlite3.connect(home / "warden.db") as conn:
        row = conn.execute("SELECT * FROM audit_events WHERE seq = 2").fetchone()
        cols = [d[0] for d in conn.execute("SELECT * FROM audit_events").description]
        data = dict(zip(cols, row, strict=True))
        forged = AuditEvent(at=data["at"], actor="mallory", action=data["action"], target=data["target"],
                            decision=data["decision"], rule=data["rule"], result=data["result"],
                            detail={"i": 1})
        conn.execute("UPDATE audit_events SET actor = 'mallory', hash = ? WHERE seq = 2",
                     (event_hash(forged, 2, data["prev_hash"]),))
    _count, broken = app.audit.verify()
    assert broken is not None and broken.seq == 3


def test_secrets_are_scrubbed_from_detail(app: App) -> None:
    event = app.audit.record(actor="bot:a", action="x", target="y",
                             detail={"token": "wdn_abc", "nested": {"secret_value": "s3"}, "ok": 1})
    assert event.detail == {"token": "[redacted]", "nested": {"secret_value": "[redacted]"}, "ok": 1}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(max_size=8), min_size=1, max_size=6), st.data())
def test_any_single_edit_is_detected(targets: list[str], data: st.DataObject) -> None:
    events: list[AuditEvent] = []
    prev = "0" * 64
    for seq, target in enumerate(targets, start=1):
        base = AuditEvent(at="t", actor="a", action="x", target=target, decision="none", rule="", result="ok")
        digest = event_hash(base, seq, prev)
        events.append(AuditEvent(**{**base.__dict__, "seq": seq, "prev_hash": prev, "hash": digest}))
        prev = digest
    assert verify_chain(events) is None
    index = data.draw(st.integers(min_value=0, max_value=len(events) - 1))
    victim = events[index]
    events[index] = AuditEvent(**{**victim.__dict__, "target": victim.target + "!"})
    broken = verify_chain(events)
    assert broken is not None and broken.seq == index + 1


def test_deleting_the_newest_rows_is_caught_by_a_recorded_anchor(app: App, home: Path) -> None:
    """The chain alone cannot see a truncated tail; a head kept elsewhere can."""
    _fill(app, 5)
    head = app.audit.head()
    assert head is not None and head[0] == 5
    assert app.audit.verify(head) == (5, None)
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("DELETE FROM audit_events WHERE seq >= 4")
    assert app.audit.verify() == (3, None)  # what a hash chain cannot tell
    _count, broken = app.audit.verify(head)
    assert broken is not None and broken.seq == 5 and "deleted" in broken.reason


def test_an_anchor_with_another_hash_is_caught(app: App) -> None:
    _fill(app, 3)
    head = app.audit.head()
    assert head is not None
    _count, broken = app.audit.verify((head[0], "0" * 64))
    assert broken is not None and "differs" in broken.reason


@pytest.mark.initialised_home
def test_cli_prints_the_head_and_checks_an_anchor(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    assert cli("create", "w1").code == 0
    first = cli("audit", "verify", "--json")
    head = first.json["data"]["head"]
    assert first.code == 0 and head and head.count(":") == 1
    assert cli("audit", "verify", "--anchor", head).code == 0
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("DELETE FROM audit_events WHERE seq = (SELECT MAX(seq) FROM audit_events)")
    assert cli("audit", "verify").code == 0
    broken = cli("audit", "verify", "--anchor", head, "--json")
    assert broken.code == 1 and "deleted" in broken.json["error"]["message"]
    bad = cli("audit", "verify", "--anchor", "12:xyz")
    assert bad.code == 2 and bad.stderr.count("\n") == 1


def _insert_chain(home: Path, n: int, detail: str = '{"argv": ["true"], "i": 0, "pad": "%s"}' % ("x" * 200)) -> None:
    """`n` valid rows written straight into the table (one transaction): a long log, fast."""
    import json

    rows, prev = [], "0" * 64
    parsed = json.loads(detail)
    for seq in range(1, n + 1):
        event = AuditEvent(at="2024-01-01T00:00:00", actor="user", action="run", target=f"w{seq % 7}",
                           decision="allow", rule="sandbox", result="0", detail=parsed)
        digest = event_hash(event, seq, prev)
        rows.append((seq, event.at, event.actor, event.action, event.target, event.decision, event.rule,
                     event.result, detail, prev, digest))
        prev = digest
    with sqlite3.connect(home / "warden.db") as conn:
        conn.executemany("INSERT INTO audit_events VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)


def test_verify_streams_rows_in_constant_memory(app: App, home: Path) -> None:
    """Peak memory of `verify` does not grow with the log (it once read every row at once)."""
    import tracemalloc

    app.audit.head()  # the schema exists
    _insert_chain(home, 20_000)
    tracemalloc.start()
    try:
        assert app.audit.verify() == (20_000, None)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"verify peaked at {peak / 1e6:.1f} MB for 20k rows"


def test_a_duplicate_key_in_stored_json_breaks_verification(app: App, home: Path) -> None:
    """`{"i": 1, "i": 1}` parses (and hashes) like `{"i": 1}`; a row stored that way is not Warden's."""
    _fill(app, 3)
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("""UPDATE audit_events SET detail = '{"i": 1, "i": 1}' WHERE seq = 2""")
    count, broken = app.audit.verify()
    assert broken is not None and broken.seq == 2 and "twice" in broken.reason
    assert count == 2


@pytest.mark.initialised_home
def test_detail_that_is_not_json_breaks_verification_not_the_cli(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    assert cli("create", "w1").code == 0
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("UPDATE audit_events SET detail = '{not json' WHERE seq = 1")
    result = cli("audit", "verify", "--json")
    assert result.code == 1 and "row 1" in result.json["error"]["message"]
