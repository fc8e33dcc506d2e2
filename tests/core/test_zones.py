"""Zones (seed 003): configuration, defaults, and `restrict` never widening access."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.errors import Denied, InvalidInput
from warden.core.zones import (
    APPROVALS,
    DEFAULT_ZONES,
    Approval,
    Zone,
    ZoneRequest,
    parse_declaration,
    parse_zones,
    restrict,
    zone_for,
)

SEED_PROJECT = {
    "sandbox": {
        "mode": "sandboxed", "root": ".sandbox",
        "zones": {"cache": {"path": "./cache", "mode": "rw"},
                  "workspace": {"path": "./workspace", "mode": "rw"},
                  "data": {"path": "./data", "mode": "ro"}},
    },
}


def test_parses_the_seed_project_configuration() -> None:
    zones = parse_zones(SEED_PROJECT)
    assert zones["data"] == Zone("data", "/data", "ro", Approval("ask", "ask"))
    assert zones["cache"].path == "/cache" and zones["cache"].mode == "rw"


def test_parses_the_seed_worker_list_form_with_approvals() -> None:
    zones = parse_zones({"zones": [
        {"name": "input", "mode": "ro"},
        {"name": "drafts", "mode": "rw", "approval": {"write": "preApproved", "delete": "preApproved"}},
        {"name": "final", "mode": "rw", "approval": {"write": "ask", "delete": "blocked"}},
    ]})
    assert zones["input"].approval == Approval("ask", "ask")  # seed: ask is the default
    assert zones["drafts"].approval == Approval("preApproved", "preApproved")
    assert zones["final"].approval == Approval("ask", "blocked")
    assert zones["final"].approval.for_op("read") == "preApproved"


def test_no_configuration_means_no_configured_zones_and_defaults_are_the_seeds() -> None:
    assert parse_zones(None) == {}
    assert parse_zones({"sandbox": {"mode": "sandboxed"}}) == {}
    assert set(DEFAULT_ZONES) == {"cache", "workspace"}
    assert all(z.mode == "rw" and z.path == f"/{z.name}" for z in DEFAULT_ZONES.values())


@pytest.mark.parametrize(("doc", "words"), [
    ({"zones": {"data": {"mode": "rwx"}}}, "not ro or rw"),
    ({"zones": {"data": {"approval": {"write": "sure"}}}}, "approval 'sure'"),
    ({"zones": {"data": {"approval": {"read": "ask"}}}}, "unknown approval operation"),
    ({"zones": {"data": {"path": "../outside"}}}, "climbs above"),
    ({"zones": {"data": {"path": "/"}}}, "not its root"),
    ({"zones": {"a": {"path": "x"}, "b": {"path": "x/y"}}}, "overlap"),
    ({"zones": {"../x": {}}}, "bad zone name"),
    ({"zones": [{"mode": "ro"}]}, "needs a name"),
    ({"zones": {"data": {"colour": "red"}}}, "unknown field"),
    ({"zones": 5}, "mapping or a list"),
])
def test_bad_zone_configuration_says_what_is_wrong(doc: object, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_zones(doc, where="zones.yaml")
    assert words in info.value.message and info.value.message.startswith("zones.yaml")


def test_a_zone_written_the_way_a_newcomer_guesses_is_told_the_line_to_write() -> None:
    """A list item with only a path, and write/delete beside mode rather than under approval:
    the message names the fix, not only the fault."""
    with pytest.raises(InvalidInput) as info:
        parse_zones({"zones": [{"path": "drafts", "mode": "rw"}]}, where="zones.yaml")
    assert "add `name: NAME`" in info.value.message and "`NAME: {mode: rw}`" in info.value.message
    with pytest.raises(InvalidInput) as info:
        parse_zones({"zones": {"drafts": {"mode": "rw", "write": "ask"}}}, where="zones.yaml")
    assert info.value.message == ("zones.yaml: zone drafts: unknown field(s) write; write and delete go under "
                                  "approval: (`approval: {write: ask, delete: blocked}`)")
    # The form it points to parses.
    assert parse_zones({"zones": {"drafts": {"mode": "rw", "approval": {"write": "ask", "delete": "blocked"}}}}
                       )["drafts"].approval == Approval("ask", "blocked")


def test_zone_for_uses_whole_segments() -> None:
    zones = parse_zones({"zones": {"data": {}, "cache": {}}})
    assert zone_for(zones, "/data/x").name == "data"  # type: ignore[union-attr]
    assert zone_for(zones, "/data").name == "data"  # type: ignore[union-attr]
    assert zone_for(zones, "/data-evil/x") is None
    assert zone_for(zones, "/") is None


# -- restrict: the seed's three runtime examples ----------------------------------------------

PARENT = {"data": Zone("data", "/data", "rw"), "workspace": Zone("workspace", "/workspace", "rw"),
          "cache": Zone("cache", "/cache", "rw")}


def test_child_gets_only_what_it_declares() -> None:
    assert restrict(PARENT, [ZoneRequest("data", "rw")]) == {"data": Zone("data", "/data", "rw")}


def test_child_asking_rw_on_a_read_only_parent_zone_is_denied_naming_the_zone() -> None:
    with pytest.raises(Denied) as info:
        restrict({"data": Zone("data", "/data", "ro")}, [ZoneRequest("data", "rw")])
    assert info.value.message == "child requests rw on data but parent only has ro"


def test_no_declaration_means_no_access() -> None:
    assert restrict(PARENT, None) == {}
    assert restrict(PARENT, []) == {}


def test_unknown_zone_is_denied_and_duplicates_are_invalid() -> None:
    with pytest.raises(Denied, match="no such zone"):
        restrict(PARENT, [ZoneRequest("secrets")])
    with pytest.raises(InvalidInput, match="twice"):
        restrict(PARENT, [ZoneRequest("data"), ZoneRequest("data")])


def test_declarations_in_every_seed_form() -> None:
    assert parse_declaration(["data:ro", "cache"]) == [ZoneRequest("data", "ro"), ZoneRequest("cache")]
    assert parse_declaration({"data": "rw"}) == [ZoneRequest("data", "rw")]
    assert parse_declaration([{"name": "final", "mode": "rw", "approval": {"delete": "blocked"}}]) == [
        ZoneRequest("final", "rw", None, "blocked")]
    assert parse_declaration(None) is None


def test_child_approval_can_tighten_but_not_loosen() -> None:
    parent = {"final": Zone("final", "/final", "rw", Approval("ask", "blocked"))}
    child = restrict(parent, [ZoneRequest("final", "rw", "preApproved", "preApproved")])
    assert child["final"].approval == Approval("ask", "blocked")
    stricter = restrict(parent, [ZoneRequest("final", None, "blocked", None)])
    assert stricter["final"].approval == Approval("blocked", "blocked")


_modes = st.sampled_from(["ro", "rw"])
_approvals = st.sampled_from(APPROVALS)
_zone_names = st.sampled_from(["a", "b", "c", "d"])
_parents = st.dictionaries(_zone_names, st.tuples(_modes, _approvals, _approvals), max_size=4).map(
    lambda d: {n: Zone(n, f"/{n}", m, Approval(w, x)) for n, (m, w, x) in d.items()})
_requests = st.lists(st.builds(ZoneRequest, _zone_names, st.none() | _modes, st.none() | _approvals,
                               st.none() | _approvals), max_size=5)
_RANK = {"preApproved": 0, "ask": 1, "blocked": 2}


@given(_parents, _requests)
def test_restrict_never_widens_access(parent: dict[str, Zone], declared: list[ZoneRequest]) -> None:
    try:
        child = restrict(parent, declared)
    except (Denied, InvalidInput):
        return
    assert set(child) <= set(parent)
    assert set(child) == {r.name for r in declared}
    for name, zone in child.items():
        have = parent[name]
        assert zone.path == have.path
        assert not (zone.mode == "rw" and have.mode == "ro")
        assert _RANK[zone.approval.write] >= _RANK[have.approval.write]
        assert _RANK[zone.approval.delete] >= _RANK[have.approval.delete]


@given(_parents, _requests, _requests)
def test_restrict_twice_is_never_wider_than_once(parent: dict[str, Zone], first: list[ZoneRequest],
                                                 second: list[ZoneRequest]) -> None:
    try:
        child = restrict(parent, first)
        grandchild = restrict(child, second)
    except (Denied, InvalidInput):
        return
    assert set(grandchild) <= set(child) <= set(parent)
    for name, zone in grandchild.items():
        assert not (zone.mode == "rw" and parent[name].mode == "ro")


def test_the_zones_file_docs_files_md_shows_parses_as_it_says() -> None:
    from pathlib import Path

    import yaml

    text = (Path(__file__).parents[2] / "docs" / "files.md").read_text()
    example = text.split("```yaml\nzones:", 1)[1].split("```", 1)[0]
    zones = parse_zones(yaml.safe_load("zones:" + example), where="docs/files.md")
    assert zones == {"input": Zone("input", "/input", "ro", Approval("ask", "ask")),
                     "drafts": Zone("drafts", "/drafts", "rw", Approval("ask", "blocked"))}
