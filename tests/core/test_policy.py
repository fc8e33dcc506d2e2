"""Path decisions: any deny wins, system paths, zones, protected files; each names its rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.errors import InvalidInput
from warden.core.path_lists import without_path
from warden.core.policy import (
    UNIX_PROTECTED,
    WINDOWS_PROTECTED,
    PathRule,
    PathRules,
    WorkspacePolicy,
    decide_host,
    effective_paths,
    parse_paths_doc,
    with_allowed,
    with_denied,
)
from warden.core.zones import DEFAULT_ZONES, Approval, Zone, parse_zones

SEED_DOC = {
    "allowed_paths": ["/path/to/allow", {"path": "/another/path", "added_at": "2024-01-15T10:30:00Z"}],
    "denied_paths": ["/path/to/deny"],
}


def rules(**levels: dict[str, object]) -> PathRules:
    every: list[PathRule] = []
    for level, doc in levels.items():
        every += parse_paths_doc(doc, level, where=level)  # type: ignore[arg-type]
    return PathRules.merge(every)


def test_parses_seed_004_file_format() -> None:
    parsed = parse_paths_doc(SEED_DOC, "global", where="g.json")
    assert [(r.path, r.action, r.added_at) for r in parsed] == [
        ("/path/to/allow", "allow", None), ("/another/path", "allow", "2024-01-15T10:30:00Z"),
        ("/path/to/deny", "deny", None)]
    assert parse_paths_doc({}, "global", where="g") == [] and parse_paths_doc(None, "global", where="g") == []


@pytest.mark.parametrize(("doc", "words"), [
    ({"allowed_paths": ["relative/x"]}, "not absolute"),
    ({"allowed_paths": [{"path": "/x", "mode": "wo"}]}, "not ro or rw"),
    ({"allowed_paths": [{"added_at": "x"}]}, "has no path"),
    ({"denied_paths": "/x"}, "must be a list"),
    ({"denied_paths": ["/x\0y"]}, "NUL"),
    ([1, 2], "expected a JSON object"),
])
def test_bad_files_are_refused_naming_the_file(doc: object, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_paths_doc(doc, "workspace", where="/ws/.warden/sandbox.json")
    assert words in info.value.message and "/ws/.warden/sandbox.json" in info.value.message


def test_tilde_expands_to_the_given_home() -> None:
    parsed = parse_paths_doc({"allowed_paths": ["~/tools"]}, "global", where="g", home="/home/me")
    assert parsed[0].path == "/home/me/tools"


def test_any_deny_at_any_level_wins_over_every_allow() -> None:
    merged = rules(**{"global": {"denied_paths": ["/data/secret"]},
                      "workspace": {"allowed_paths": ["/data"]},
                      "session": {"allowed_paths": ["/data/secret/x"]}})
    decision = decide_host("/data/secret/x/file", "read", merged)
    assert not decision.allowed and decision.rule == "deny: global denied_paths /data/secret"
    assert decide_host("/data/other", "write", merged).rule == "allow: workspace allowed_paths /data (rw)"


def test_session_denial_overrides_workspace_and_global_allows() -> None:
    merged = rules(**{"global": {"allowed_paths": ["/opt/company_tools"]},
                      "session": {"denied_paths": ["/opt/company_tools"]}})
    assert decide_host("/opt/company_tools/bin", "read", merged).rule == "deny: session denied_paths /opt/company_tools"


def test_read_only_allowance_bounds_writes_and_the_narrowest_allowance_decides() -> None:
    merged = rules(**{"global": {"allowed_paths": [{"path": "/opt", "mode": "ro"}]},
                      "workspace": {"allowed_paths": [{"path": "/opt/scratch", "mode": "rw"}]}})
    assert decide_host("/opt/tool", "write", merged).rule == "deny: global allowed_paths /opt is ro"
    assert decide_host("/opt/tool", "read", merged).allowed
    assert decide_host("/opt/scratch/x", "write", merged).rule == "allow: workspace allowed_paths /opt/scratch (rw)"


def test_prefix_siblings_do_not_match_rules() -> None:
    merged = rules(**{"global": {"allowed_paths": ["/safe"], "denied_paths": ["/safe/secret"]}})
    assert not decide_host("/safe-evil/x", "read", merged).allowed
    assert decide_host("/safe/secret-not/x", "read", merged).allowed
    assert decide_host("/safe/secret/../ok", "read", merged).allowed  # lexical: /safe/ok


@pytest.mark.parametrize("protected", UNIX_PROTECTED)
def test_system_paths_are_protected_even_when_allowed(protected: str) -> None:
    merged = rules(**{"global": {"allowed_paths": [protected]}})
    decision = decide_host(protected + "/x", "read", merged)
    assert not decision.allowed and decision.rule == f"deny: system path {protected} (sandbox.block_system_paths)"
    assert decide_host(protected + "/x", "read", merged, block_system=False).allowed


def test_windows_protected_paths_compare_case_insensitively() -> None:
    assert "C:\\Windows" in WINDOWS_PROTECTED
    decision = decide_host("c:/windows/System32", "read", PathRules(), windows=True)
    assert decision.rule == "deny: system path C:\\Windows (sandbox.block_system_paths)"
    assert "deny: system path C:\\Program Files " in decide_host("C:\\Program Files\\x", "read", PathRules(),
                                                                 windows=True).rule + " "


def test_nothing_allowed_means_deny_with_a_rule() -> None:
    assert decide_host("/srv/x", "read", PathRules()).rule == "deny: not in the workspace or any allowed path"


def test_seed_add_and_remove_semantics_on_the_document() -> None:
    doc = with_allowed({"denied_paths": ["/x", "/y"], "other": 1}, "/x/", mode="ro", added_at="T")
    assert doc == {"denied_paths": ["/y"], "other": 1,
                   "allowed_paths": [{"path": "/x", "added_at": "T", "mode": "ro"}]}
    doc = with_denied(doc, "/x", added_at="U")
    assert doc["allowed_paths"] == [] and doc["denied_paths"] == ["/y", {"path": "/x", "added_at": "U"}]
    again = with_allowed(with_allowed({}, "/z", mode="ro", added_at="1"), "/z", mode="rw", added_at="2")
    assert again["allowed_paths"] == [{"path": "/z", "added_at": "2", "mode": "rw"}]


def test_forget_drops_the_path_from_both_lists_and_leaves_the_rest() -> None:
    doc = {"allowed_paths": ["~/data", {"path": "/x/"}, "relative", 7], "denied_paths": ["/x", "/x/below"], "v": 1}
    new, dropped = without_path(doc, "/x")
    assert dropped == ("allow", "deny")
    assert new == {"allowed_paths": ["~/data", "relative", 7], "denied_paths": ["/x/below"], "v": 1}
    assert doc["denied_paths"] == ["/x", "/x/below"]  # the given document is not changed
    assert without_path(doc, "/home/me/data", home="/home/me")[1] == ("allow",)  # as parse_paths_doc reads ~
    assert without_path(doc, "/home/me/data") == (doc, ())  # no home: ~ stands for nothing
    assert without_path({}, "/x") == ({}, ())


# -- workspace decisions -----------------------------------------------------------------------

ZONES = parse_zones({"zones": {"data": {"mode": "ro"}, "drafts": {"approval": {"write": "preApproved"}},
                               "final": {"approval": {"write": "ask", "delete": "blocked"}}}})


def policy(**kw: object) -> WorkspacePolicy:
    return WorkspacePolicy(root="/w/ws", zones=kw.pop("zones", ZONES), **kw)  # type: ignore[arg-type]


def test_owner_decisions_name_the_zone_and_mode() -> None:
    p = policy()
    assert p.decide("/drafts/a", "write").rule == "allow: zone drafts (rw)"
    assert p.decide("/drafts/a", "write").approval == "preApproved"
    assert p.decide("/final/a", "write").approval == "ask"
    assert p.decide("/final/a", "delete").rule == "deny: zone final blocks delete"
    assert p.decide("/data/a", "read").rule == "allow: zone data (ro)"
    assert p.decide("/data/a", "write").rule == "deny: zone data is ro"
    assert p.decide("/notes/a", "write").rule == "allow: workspace owner (rw)"


@pytest.mark.parametrize("path", ["/.warden/sandbox.json", "/.warden", "/.workspace.json", "/.git/hooks/pre-commit",
                                  "/.git/config", "/.bashrc"])
def test_protected_workspace_files_are_never_written(path: str) -> None:
    p = policy()
    decision = p.decide(path, "write")
    assert not decision.allowed and decision.rule.startswith("deny: protected workspace file")
    assert p.decide(path, "read").allowed


def test_deleting_a_parent_of_a_protected_file_or_the_root_is_denied() -> None:
    p = policy()
    assert p.decide("/.git", "delete").rule == "deny: protected workspace file /.git"
    assert p.decide("/", "delete").rule == "deny: the workspace root itself cannot be written or deleted"
    assert not p.decide("/.git/objects", "delete").allowed  # all of .git is the person's
    assert p.decide("/.warden-evil", "write").allowed  # a sibling by prefix is not protected


def test_lists_apply_to_workspace_host_paths() -> None:
    p = policy(rules=rules(**{"workspace": {"denied_paths": ["/w/ws/drafts/secret"]}}))
    assert p.decide("/drafts/secret/x", "read").rule == "deny: workspace denied_paths /w/ws/drafts/secret"
    assert p.decide("/drafts/secret-ok", "read").allowed


def test_a_restricted_actor_sees_only_its_zones() -> None:
    p = policy(scope={"drafts": ZONES["drafts"]})
    assert p.decide("/drafts/x", "write").allowed
    assert p.decide("/data/x", "read").rule == "deny: no granted zone holds /data/x (granted: drafts)"
    assert p.decide("/notes", "read").rule.startswith("deny: no granted zone")
    assert p.decide("/", "list").rule == "allow: workspace root (granted zones only)"
    assert not p.decide("/", "write").allowed
    nothing = policy(scope={})
    assert nothing.decide("/drafts/x", "read").rule == "deny: no granted zone holds /drafts/x (granted: none)"


def test_unknown_operation_is_invalid() -> None:
    with pytest.raises(InvalidInput):
        policy().decide("/x", "chmod")


def test_effective_paths_for_the_sandbox_builder() -> None:
    merged = rules(**{"global": {"allowed_paths": [{"path": "/opt/tools", "mode": "ro"}, "/srv/shared"],
                                 "denied_paths": ["/srv/shared"]}})
    eff = effective_paths("/w/ws/", DEFAULT_ZONES, merged, block_system=True)
    assert eff.workspace == "/w/ws"
    assert {(z.name, z.host_path, z.mode) for z in eff.zones} == {("cache", "/w/ws/cache", "rw"),
                                                                 ("workspace", "/w/ws/workspace", "rw")}
    assert eff.allowed == (("/opt/tools", "ro"),)  # the denied one is not offered for mounting
    assert eff.denied == ("/srv/shared",)
    assert "/w/ws/.warden" in eff.readonly and "/etc" in eff.system_blocked
    assert eff.to_json()["allowed"] == [{"path": "/opt/tools", "mode": "ro"}]


_segment = st.sampled_from(["data", "drafts", "final", "notes", ".warden", ".git", "hooks", "x", "data-evil"])
_wspaths = st.lists(_segment, max_size=4).map(lambda s: "/" + "/".join(s))
_ops = st.sampled_from(["read", "list", "stat", "exists", "write", "mkdir", "delete"])


@given(_wspaths, _ops)
def test_a_restricted_actor_never_gets_more_than_the_owner(path: str, op: str) -> None:
    owner = policy()
    child = policy(scope={"drafts": Zone("drafts", "/drafts", "rw", Approval("ask", "ask"))})
    if child.decide(path, op).allowed:
        assert owner.decide(path, op).allowed


@given(_wspaths, _ops)
def test_a_deny_entry_always_wins(path: str, op: str) -> None:
    denied = policy(rules=rules(**{"session": {"denied_paths": ["/w/ws" + path]}}))
    assert not denied.decide(path, op).allowed


def test_deleting_a_parent_of_a_nested_zone_takes_the_zones_rules() -> None:
    zones = parse_zones({"zones": {"data": {"path": "inputs/data", "mode": "ro"},
                                   "logs": {"path": "inputs/logs", "approval": {"delete": "ask"}},
                                   "tmp": {"path": "scratch/tmp", "approval": {"delete": "preApproved"}}}})
    p = WorkspacePolicy(root="/w/ws", zones=zones)
    assert p.decide("/inputs", "delete").rule == "deny: zone data is ro (inside /inputs)"
    assert p.decide("/inputs/data/x", "read").rule == "allow: zone data (ro)"
    assert p.decide("/scratch", "delete").allowed and p.decide("/scratch", "delete").approval == "preApproved"
    only_logs = WorkspacePolicy(root="/w/ws", zones=zones, scope={"logs": zones["logs"]})
    assert not only_logs.decide("/inputs", "delete").allowed
