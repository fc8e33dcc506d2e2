"""What checkpoints hold, the rollback plan and version retention (core/checkpoints.py), no disk."""

from __future__ import annotations

import pytest

from warden.core.checkpoints import (
    Current,
    Entry,
    Manifest,
    Version,
    check_id,
    excluded,
    git_heads,
    normalize_scope,
    plan_rollback,
    retain,
)
from warden.core.errors import InvalidInput

DIGEST = "a" * 64
OTHER = "b" * 64


def test_what_is_not_content() -> None:
    for path in (".venv/bin/python", "node_modules/x", "web/node_modules/y", ".warden/zones.yaml",
                 ".workspace.json", ".git/config", "sub/.GIT/HEAD", ".bashrc", "x.warden-quarantined/HEAD"):
        assert excluded(path.split("/")), path
    for path in ("src/a.py", "notes/.bashrc", "venv/x", "my.git/x"):
        assert not excluded(path.split("/")), path
    assert git_heads("repo", ["HEAD", "refs", "objects"]) == {"repo/HEAD"}
    assert git_heads("", ["HEAD", "README"]) == set()


def test_scopes_and_ids() -> None:
    assert normalize_scope(None) is None and normalize_scope("/") is None
    assert normalize_scope("/src//pkg/") == "src/pkg"
    for bad in ("../x", "/a/../../b", "/.git", "/.venv/lib"):
        with pytest.raises(InvalidInput):
            normalize_scope(bad)
    assert check_id("abcd") == "abcd"
    for bad in ("abc", "ABCD", "../x", "zzzz"):
        with pytest.raises(InvalidInput):
            check_id(bad)


def test_plan_whole_workspace() -> None:
    stamp = (1, 3, 10, 10)
    target = [Entry("a", "dir", 0o750), Entry("a/f", "file", 0o644, 3, DIGEST, stamp=stamp),
              Entry("a/same", "file", 0o644, 3, DIGEST, stamp=(2, 3, 10, 10)),
              Entry("a/mode", "file", 0o755, 3, DIGEST, stamp=(3, 3, 10, 10)),
              Entry("link", "symlink", 0o777, target="a/f"), Entry("gone", "dir", 0o755),
              Entry("was-file", "dir", 0o755)]
    current = {"a": Current("dir", 0o755), "a/f": Current("file", 0o644, (1, 4, 11, 11)),
               "a/same": Current("file", 0o644, (2, 3, 10, 10)), "a/mode": Current("file", 0o644, (3, 3, 10, 10)),
               "link": Current("symlink", 0o777, target="elsewhere"), "new": Current("dir", 0o755),
               "new/x": Current("file", 0o644), "was-file": Current("file", 0o644), "fifo": Current("other", 0)}
    plan = plan_rollback(current, target, None)
    assert set(plan.remove) == {"new", "was-file", "fifo"}  # only the top of a removed tree
    assert plan.mkdirs == ("gone", "was-file")
    assert [e.path for e in plan.writes] == ["a/f", "link"]
    assert plan.chmods == (("a/mode", 0o755),)
    assert dict(plan.dir_modes) == {"a": 0o750, "gone": 0o755, "was-file": 0o755}


def test_plan_unstable_files_are_written_unless_their_content_just_captured_is_the_same() -> None:
    target = [Entry("f", "file", 0o644, 3, DIGEST, stamp=None), Entry("g", "file", 0o600, 3, DIGEST, stamp=None)]
    current = {"f": Current("file", 0o644, (1, 3, 1, 1)), "g": Current("file", 0o644, (1, 3, 2, 2))}
    plan = plan_rollback(current, target, None)
    assert [e.path for e in plan.writes] == ["f", "g"]
    # The rollback's own capture of what is there read those bytes a moment ago: the same content
    # is not written again (its mode still put back); another content is.
    plan = plan_rollback(current, target, None, {"f": DIGEST, "g": DIGEST})
    assert plan.writes == () and plan.chmods == (("g", 0o600),)
    assert [e.path for e in plan_rollback(current, target, None, {"f": "0" * 64}).writes] == ["f", "g"]


def test_plan_with_a_scope_touches_nothing_else() -> None:
    target = [Entry("src", "dir", 0o755), Entry("src/a", "file", 0o644, 1, DIGEST),
              Entry("other", "file", 0o644, 1, DIGEST)]
    current = {"src": Current("symlink", 0o777, target="/etc"), "other": Current("file", 0o600),
               "extra": Current("file", 0o644)}
    plan = plan_rollback(current, target, "src/a")
    # The scope's parent is a link a bot planted: it is replaced by a folder, never followed.
    assert plan.mkdirs == ("src",) and [e.path for e in plan.writes] == ["src/a"]
    assert plan.remove == () and plan.chmods == ()
    assert plan_rollback({"src": Current("dir", 0o755), "src/b": Current("file", 0o644)}, target,
                         "src").remove == ("src/b",)


def test_manifest_round_trip_and_validation() -> None:
    manifest = Manifest("abcd1234", "demo", "ws_1", "2026-01-01T00:00:00+00:00", "m", "user",
                        (Entry("a", "file", 0o644, 3, DIGEST, stamp=(1, 2, 3, 4)), Entry("l", "symlink", 0o777,
                                                                                       target="a")), 3)
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.files == 1 and manifest.size == 3
    for bad in (["../x", "file", 0o644, 1, DIGEST, None], [".git/config", "file", 0o644, 1, DIGEST, None],
                ["a", "file", 0o644, 1, "nothex", None], ["a", "device", 0, 0, "", None]):
        raw = {**manifest.to_json(), "entries": [bad]}
        with pytest.raises(ValueError):
            Manifest.from_json(raw)


def version(n: int, path: str = "/a", size: int = 10, digest: str | None = None) -> Version:
    return Version(f"{n:04x}", path, f"2026-01-01T00:00:{n:02d}", "user", "write", size,
                   digest or f"{n:064x}", 0o644)


def test_retention_keeps_the_newest_per_path_then_fits_the_size() -> None:
    versions = [version(i) for i in range(5)] + [version(10 + i, "/b") for i in range(2)]
    kept, dropped = retain(versions, 3, 1000)
    assert [v.id for v in kept] == ["0002", "0003", "0004", "000a", "000b"]
    assert [v.id for v in dropped] == ["0000", "0001"]
    kept, dropped = retain(versions, 3, 25)
    assert [v.id for v in kept] == ["000a", "000b"]
    # The same content at two paths is stored once, so counted once.
    same = [version(1, "/a", 20, DIGEST), version(2, "/b", 20, DIGEST)]
    assert retain(same, 3, 20) == (same, [])
    assert retain(versions, 0, 1000)[0] == []
