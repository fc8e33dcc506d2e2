"""core.watching: ignore rules, how a burst's raw events fold into one batch, its bound, the
zone filter and a run's summary."""

from __future__ import annotations

from warden.core.gitcontrol import QUARANTINE_SUFFIX
from warden.core.watching import (
    Batch,
    Change,
    Coalescer,
    batch_of,
    ignored,
    ignored_name,
    run_summary,
    shown_path,
)


def test_ignored_anywhere_in_the_path() -> None:
    for path in ("/.git/config", "/src/node_modules/x/index.js", "/.venv/bin/python", "/.warden/state",
                 "/a/.git", f"/repo/.git{QUARANTINE_SUFFIX}-1a2b/HEAD", f"/HEAD{QUARANTINE_SUFFIX}"):
        assert ignored(path), path
    for path in ("/src/a.py", "/.gitignore", "/node_modules_notes.txt", "/venv/x", "/.github/workflows/ci.yml"):
        assert not ignored(path), path
    assert ignored_name("node_modules") and not ignored_name("modules")


def test_a_burst_folds_into_one_change_per_path_in_first_seen_order() -> None:
    c = Coalescer()
    for kind, path in [("added", "/a"), ("modified", "/a"), ("modified", "/b"), ("added", "/tmp"),
                       ("deleted", "/tmp"), ("deleted", "/c"), ("added", "/c"), ("modified", "/b")]:
        c.add(kind, path)  # type: ignore[arg-type]
    batch = batch_of(c, "2026-01-01T00:00:00Z")
    assert batch is not None
    assert [(x.change, x.path) for x in batch.changes] == [("added", "/a"), ("modified", "/b"), ("modified", "/c")]
    assert batch.count == 3 and not batch.overflow
    assert batch.to_json() == {"changes": [{"change": "added", "path": "/a"}, {"change": "modified", "path": "/b"},
                                           {"change": "modified", "path": "/c"}],
                               "at": "2026-01-01T00:00:00Z", "count": 3}


def test_a_burst_that_cancels_out_is_no_batch() -> None:
    c = Coalescer()
    c.add("added", "/tmp.swp")
    c.add("deleted", "/tmp.swp")
    assert batch_of(c, "t") is None


def test_past_the_limit_it_only_counts() -> None:
    c = Coalescer(limit=3)
    for i in range(1_000):
        c.add("added", f"/f{i}")
    batch = batch_of(c, "t")
    assert batch is not None
    assert len(batch.changes) == 3 and batch.count == 1_000 and batch.overflow
    assert batch.to_json()["overflow"] is True
    assert batch.lines()[-1].startswith("… and more: 1000 changes")


def test_zone_filter_keeps_only_shown_paths() -> None:
    batch = Batch((Change("added", "/cache/a"), Change("added", "/secret/b")), "t", 2)
    shown = batch.visible(lambda p: p.startswith("/cache/"))
    assert shown is not None and [c.path for c in shown.changes] == ["/cache/a"] and shown.count == 1
    assert batch.visible(lambda p: False) is None
    assert batch.visible(lambda p: True) is batch


def test_run_summary_counts_and_names_the_first_paths() -> None:
    c = Coalescer()
    assert run_summary(c) is None
    for i in range(30):
        c.add("added", f"/out/{i}")
    c.add("modified", "/README.md")
    c.add("deleted", "/old")
    summary = run_summary(c, paths=5)
    assert summary == {"added": 30, "modified": 1, "deleted": 1, "paths": [f"/out/{i}" for i in range(5)]}
    c2 = Coalescer(limit=2)
    for i in range(5):
        c2.add("added", f"/{i}")
    assert run_summary(c2) == {"added": 2, "modified": 0, "deleted": 0, "paths": ["/0", "/1"], "overflow": True,
                               "more": 3}


def test_names_that_are_no_utf8_are_shown_with_a_replacement() -> None:
    raw = b"/bad\xff".decode("utf-8", "surrogateescape")
    assert shown_path(raw) == "/bad\ufffd"
    assert Change("added", raw).to_json()["path"] == "/bad\ufffd"
