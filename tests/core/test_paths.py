"""`within()` exactly as INTERFACES.md says, and workspace-relative canonical paths."""

from __future__ import annotations

import posixpath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.errors import InvalidInput
from warden.core.paths import canonical, normalize, within

# -- within: the contract -------------------------------------------------------------------


@pytest.mark.parametrize(("path", "roots", "expected"), [
    ("/safe", ["/safe"], True),
    ("/safe/a/b", ["/safe"], True),
    ("/safe/", ["/safe"], True),
    ("/safe-evil", ["/safe"], False),          # CVE-2025-53110: a prefix is not a parent
    ("/safe-evil/x", ["/safe"], False),
    ("/safe ", ["/safe"], False),              # whitespace sibling: no stripping
    ("/safe'", ["/safe"], False),              # quote sibling
    ("/safe\"/x", ["/safe"], False),
    ("/safe/../etc/passwd", ["/safe"], False),
    ("/safe/a/../b", ["/safe"], True),
    ("/safe/./a", ["/safe"], True),
    ("//safe//a", ["/safe"], True),
    ("/a/../../safe/x", ["/safe"], True),      # `..` above / stays at /
    ("/safe/%2e%2e/etc", ["/safe"], True),     # no percent-decoding: "%2e%2e" is a name
    ("/safe%2F..%2Fetc", ["/safe"], False),    # one name beside /safe, not below it
    ("/Safe/x", ["/safe"], False),             # case matters on POSIX
    ("/caf\u00e9/x", ["/cafe\u0301"], False),  # NFC vs NFD: no Unicode normalisation
    ("/cafe\u0301/x", ["/cafe\u0301"], True),
    ("/anything", ["/"], True),
    ("/x", ["/other", "/x/"], True),
    ("/x", ["/other/../x"], True),
    ("/etc", ["/safe/.."], True),              # the root normalises to /
])
def test_within_cases(path: str, roots: list[str], expected: bool) -> None:
    assert within(path, roots) is expected


@pytest.mark.parametrize(("path", "roots"), [
    ("", ["/"]),
    ("relative/x", ["/"]),
    ("./x", ["/"]),
    (None, ["/"]),
    (b"/safe", ["/safe"]),
    (42, ["/"]),
    ("/safe\0/x", ["/safe"]),
    ("/safe/x", ["/safe\0"]),
    ("/safe/x", ["/other", "/safe\0"]),       # a NUL root refuses, it is not merely skipped
    ("/safe/x", []),
    ("/safe/x", ()),
    ("/safe/x", "/safe"),                      # a bare string is not a list of roots
    ("/safe/x", ["", "safe", "relative/x"]),   # empty and relative roots are skipped
])
def test_within_refuses(path: Any, roots: Any) -> None:
    assert within(path, roots) is False


def test_within_skips_empty_and_relative_roots_but_uses_the_others() -> None:
    assert within("/safe/x", ["", "safe", "/safe"])
    assert within("/safe/x", [None, "/safe"])  # type: ignore[list-item]


# -- properties -----------------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "safe", "safe-evil", "..", ".", "", "x y", "é", "e\u0301", "'", "%2e"])
_paths = st.lists(_names, max_size=8).map(lambda parts: "/" + "/".join(parts))


@given(_paths)
def test_normalize_is_idempotent(path: str) -> None:
    once = normalize(path)
    assert normalize(once) == once
    assert once.startswith("/") and "//" not in once and "/./" not in once + "/" and "/../" not in once + "/"


@given(_paths)
def test_normalize_agrees_with_posixpath_after_collapsing_leading_slashes(path: str) -> None:
    # posixpath keeps a leading "//" (POSIX leaves it implementation-defined); Linux does not.
    expected = posixpath.normpath("/" + path.lstrip("/"))
    assert normalize(path) == expected


@given(_paths, _paths)
def test_inside_stays_inside_after_normalisation(root: str, path: str) -> None:
    assert within(path, [root]) == within(normalize(path), [normalize(root)])
    if within(path, [root]):
        # Whole segments: the normalised path is the root or continues with a separator.
        n, r = normalize(path), normalize(root)
        assert n == r or r == "/" or n.startswith(r + "/")


@given(_paths, st.lists(_names.filter(lambda n: n not in ("..", ".", "")), min_size=1, max_size=4))
def test_a_path_built_below_a_root_is_within_it(root: str, tail: list[str]) -> None:
    assert within(normalize(root) + "/" + "/".join(tail), [root])


@given(_paths)
def test_canonical_is_idempotent_and_never_climbs(path: str) -> None:
    try:
        once = canonical(path)
    except InvalidInput:
        return
    assert canonical(once) == once
    assert within(once, ["/"])
    assert ".." not in once.split("/")


# -- canonical -------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("/", "/"), ("notes/a.txt", "/notes/a.txt"), ("/notes/a.txt", "/notes/a.txt"),
    ("./notes//a.txt/", "/notes/a.txt"), ("a/b/../c", "/a/c"), ("a/..", "/"),
    ("/safe ", "/safe "), ("/'q'", "/'q'"), ("/caf\u00e9", "/caf\u00e9"), ("/cafe\u0301", "/cafe\u0301"),
])
def test_canonical(raw: str, expected: str) -> None:
    assert canonical(raw) == expected


@pytest.mark.parametrize(("raw", "words"), [
    ("", "empty path"), ("a\0b", "NUL"), ("..", "climbs above"), ("/a/../../etc", "climbs above"),
    ("x" * 5000, "longer than"), (b"/a", "must be text"),
])
def test_canonical_refuses_with_one_line_that_says_what_to_do(raw: Any, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        canonical(raw)
    assert words in info.value.message and "\n" not in info.value.message


@given(st.lists(_names, max_size=8).map("/".join), st.booleans())
def test_canonical_fast_path_agrees_with_lexical_normalisation(path: str, rooted: bool) -> None:
    raw = ("/" + path) if rooted else path
    if raw == "":
        return
    try:
        result = canonical(raw)
    except InvalidInput:
        # Only a climb above the root is refused for these names.
        assert ".." in raw.split("/")
        return
    assert result == normalize("/" + raw)
