"""Grant rules (pure): permissions, zones, secrets, expiry, clamping to a parent, decisions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.errors import Denied, InvalidInput
from warden.core.grants import (
    PERMISSIONS,
    Grant,
    alive,
    check_bot_name,
    check_secret_name,
    decide,
    effective,
    parse_permissions,
    plan_grant,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def grant(accessor: str = "acc_a", *, permissions: str = "read,write,execute,admin",
          zones: tuple[str, ...] | None = None, secrets: tuple[str, ...] = (), expires: timedelta = 7 * DAY,
          max_expires: timedelta = 30 * DAY,
          parent: str | None = None, revoked: bool = False, workspace_id: str = "ws_1") -> Grant:
    return Grant(accessor=accessor, workspace="demo", workspace_id=workspace_id, bot="bot",
                 permissions=parse_permissions(permissions), zones=zones, secrets=secrets, created=NOW,
                 expires=NOW + expires, max_expires=NOW + max_expires, parent=parent,
                 revoked=NOW if revoked else None)


def plan(permissions: str = "read", **kwargs: object):  # type: ignore[no-untyped-def]
    options: dict[str, object] = {"ttl": None, "max_ttl": None, "default_ttl": 7 * DAY, "ceiling": 30 * DAY}
    options.update(kwargs)
    return plan_grant(NOW, parse_permissions(permissions), **options)  # type: ignore[arg-type]


# -- parsing -----------------------------------------------------------------------------------
def test_permissions_parse_from_text_and_lists() -> None:
    assert parse_permissions("read, write,execute") == {"read", "write", "execute"}
    assert parse_permissions(["admin", "secrets"]) == {"admin", "secrets"}
    assert parse_permissions("READ") == {"read"}


@pytest.mark.parametrize("bad", ["", " , ", "read,root", "sudo", [1], []])
def test_bad_permissions_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInput):
        parse_permissions(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "A", "_X1"])
def test_secret_names_are_env_names(name: str) -> None:
    assert check_secret_name(name) == name


@pytest.mark.parametrize("name", ["lower", "1ABC", "A-B", "", "PATH", "LD_PRELOAD", "WARDEN_HOME",
                                  "PYTHONPATH", "A" * 200, "HOME",
                                  # loader variables travel in bwrap's --setenv; shell start-up ones run code
                                  "RES_OPTIONS", "GCONV_PATH", "MALLOC_ARENA_MAX", "LOCALDOMAIN",
                                  "GLIBC_TUNABLES", "BASH_ENV", "PS4", "PROMPT_COMMAND", "SHELLOPTS",
                                  "BASH_FUNC_X%%"])
def test_bad_or_reserved_secret_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput):
        check_secret_name(name)


def test_bot_names() -> None:
    assert check_bot_name("code-bot.v1") == "code-bot.v1"
    for bad in ["", "-x", "a/b", "a b", "x" * 64]:
        with pytest.raises(InvalidInput):
            check_bot_name(bad)


# -- planning a root grant ---------------------------------------------------------------------
def test_default_ttl_and_max() -> None:
    p = plan()
    assert p.expires == NOW + 7 * DAY
    assert p.max_expires == NOW + 30 * DAY


def test_ttl_longer_than_max_is_refused_with_the_fix() -> None:
    # Worded for the CLI and the HTTP API alike: the grant's fields, no CLI flag syntax.
    with pytest.raises(InvalidInput, match=r"ttl \(40d\) is longer than .*grants\.max_ttl \(30d\); "
                                           r"ask for a shorter ttl") as exc:
        plan(ttl=40 * DAY)
    assert "--" not in exc.value.message
    with pytest.raises(InvalidInput, match=r"longer than its max_ttl \(1d\); .*a longer max_ttl") as exc:
        plan(ttl=2 * DAY, max_ttl=DAY)
    assert "--" not in exc.value.message


def test_max_ttl_over_the_ceiling_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"grants\.max_ttl"):
        plan(max_ttl=60 * DAY)


def test_default_ttl_never_exceeds_an_explicit_max() -> None:
    p = plan(max_ttl=DAY)
    assert p.expires == NOW + DAY == p.max_expires


@pytest.mark.parametrize("field", ["ttl", "max_ttl"])
def test_zero_durations_are_refused(field: str) -> None:
    with pytest.raises(InvalidInput):
        plan(**{field: timedelta(0)})


def test_secrets_need_the_secrets_permission() -> None:
    with pytest.raises(InvalidInput, match="secrets"):
        plan("read,execute", secrets=["API_KEY"])
    assert plan("read,secrets", secrets=["API_KEY", "API_KEY"]).secrets == ("API_KEY",)


def test_zone_names_are_checked() -> None:
    with pytest.raises(InvalidInput):
        plan(zones=["../etc"])
    assert plan(zones=["src", "data"]).zones == ("data", "src")


# -- children ----------------------------------------------------------------------------------
def test_child_wider_in_permissions_is_denied() -> None:
    parent = grant(permissions="read,admin")
    with pytest.raises(Denied, match="write") as info:
        plan("read,write", parent=[parent])
    assert info.value.rule == "grant.clamp"


def test_child_of_zoned_parent_gets_its_zones_and_no_more() -> None:
    parent = grant(zones=("src",))
    assert plan("read", zones=["*"], parent=[parent]).zones == ("src",)
    assert plan("read", zones=["src"], parent=[parent]).zones == ("src",)
    with pytest.raises(Denied, match="data"):
        plan("read", zones=["src", "data"], parent=[parent])


def test_a_child_that_declares_no_zones_gets_none_and_a_person_s_grant_the_whole_workspace() -> None:
    assert plan("read").zones is None  # a person's grant without --zones: `*`
    assert plan("read", zones=["*"]).zones is None
    assert plan("read", parent=[grant()]).zones == ()  # a worker that declares nothing gets nothing
    assert plan("read", zones=["*"], parent=[grant()]).zones is None
    with pytest.raises(InvalidInput, match="stands alone"):
        plan("read", zones=["*", "src"])


def test_per_zone_modes_never_widen_the_parent() -> None:
    assert plan("read,write", zones=["drafts:rw", "input:ro"]).zones == ("drafts:rw", "input:ro")
    parent = grant(permissions="read,write,admin", zones=("drafts:rw", "input:ro"))
    assert plan("read,write", zones=["input"], parent=[parent]).zones == ("input",)
    assert effective([grant(zones=("input",)), parent]).zones == ("input:ro",)  # the stricter mode stays
    with pytest.raises(Denied, match="read-only"):
        plan("read,write", zones=["input:rw"], parent=[parent])
    for bad in ("input:rx", "a b", ":ro", "../x"):
        with pytest.raises(InvalidInput, match="bad zone"):
            plan("read", zones=[bad])


def test_child_secrets_must_be_named_by_parent() -> None:
    parent = grant(permissions="read,secrets,admin", secrets=("A",))
    assert plan("read,secrets", secrets=["A"], parent=[parent]).secrets == ("A",)
    with pytest.raises(Denied, match="B"):
        plan("read,secrets", secrets=["B"], parent=[parent])


def test_child_times_are_clamped_to_the_parent() -> None:
    parent = grant(expires=DAY, max_expires=2 * DAY)
    p = plan(ttl=5 * DAY, max_ttl=20 * DAY, parent=[parent])
    assert p.expires == NOW + DAY
    assert p.max_expires == NOW + 2 * DAY


def test_the_whole_chain_clamps_not_just_the_parent() -> None:
    root = grant("acc_root", permissions="read,admin", expires=DAY)
    middle = grant("acc_mid", permissions="read,write,admin", parent="acc_root")  # stored wider by mistake
    with pytest.raises(Denied):
        plan("write", parent=[middle, root])
    assert plan("read", ttl=3 * DAY, parent=[middle, root]).expires == NOW + DAY


@given(parent_perms=st.sets(st.sampled_from(PERMISSIONS), min_size=1),
       child_perms=st.sets(st.sampled_from(PERMISSIONS), min_size=1),
       parent_zones=st.none() | st.sets(st.sampled_from(["a", "b", "c"])),
       child_zones=st.none() | st.sets(st.sampled_from(["a", "b", "c"])),
       parent_ttl=st.integers(1, 100), child_ttl=st.integers(1, 100))
def test_a_child_is_never_wider_than_its_parent(parent_perms: set[str], child_perms: set[str],
                                                parent_zones: set[str] | None, child_zones: set[str] | None,
                                                parent_ttl: int, child_ttl: int) -> None:
    parent = grant(permissions=",".join(parent_perms),
                   zones=tuple(sorted(parent_zones)) if parent_zones is not None else None,
                   expires=timedelta(hours=parent_ttl))
    try:
        p = plan(",".join(child_perms), zones=sorted(child_zones) if child_zones is not None else None,
                 ttl=timedelta(hours=child_ttl), parent=[parent])
    except Denied:
        assert not child_perms <= parent_perms or "approve" in child_perms or (
            parent_zones is not None and child_zones is not None and not child_zones <= parent_zones)
        return
    assert p.permissions <= parent.permissions
    if parent.zones is not None:
        assert p.zones is not None and set(p.zones) <= set(parent.zones)
    assert p.expires <= parent.expires
    assert p.max_expires <= parent.max_expires


# -- effective scope and decisions -------------------------------------------------------------
def test_effective_is_the_intersection_over_the_chain() -> None:
    root = grant("acc_root", permissions="read,write,secrets,admin", zones=("a", "b"), secrets=("X", "Y"),
                 expires=DAY)
    child = grant("acc_child", permissions="read,write,secrets,execute", zones=("b", "c"), secrets=("Y", "Z"),
                  parent="acc_root")
    scope = effective([child, root])
    assert scope.permissions == {"read", "write", "secrets"}
    assert scope.zones == ("b",)
    assert scope.secrets == ("Y",)
    assert scope.expires == NOW + DAY


def test_secrets_are_dropped_without_the_permission() -> None:
    g = grant(permissions="read", secrets=("X",))
    assert effective([g]).secrets == ()


def test_decide_allows_and_names_the_rule() -> None:
    d = decide([grant()], NOW, workspace_id="ws_1", permission="write")
    assert d.allowed and d.rule == "grant.allow"


@pytest.mark.parametrize(("chain", "kwargs", "rule"), [
    ([], {}, "token.unknown"),
    ([grant(revoked=True)], {}, "grant.revoked"),
    ([grant("acc_c", parent="acc_p"), grant("acc_p", revoked=True)], {}, "grant.parent_revoked"),
    ([grant(expires=timedelta(seconds=-1))], {}, "grant.expired"),
    ([grant("acc_c", parent="acc_p"), grant("acc_p", expires=timedelta(seconds=-1))], {}, "grant.expired"),
    ([grant(workspace_id="ws_other")], {}, "grant.workspace"),
    ([grant(permissions="read")], {"permission": "write"}, "grant.permission"),
    ([grant(permissions="read")], {"permission": "sudo"}, "grant.permission"),
    ([grant(zones=("src",))], {"zone": "data"}, "grant.zone"),
    ([grant(zones=("src",))], {"permission": "execute", "whole_workspace": True}, "grant.zone"),
])
def test_decide_denies_with_the_rule(chain: list[Grant], kwargs: dict[str, object], rule: str) -> None:
    options: dict[str, object] = {"workspace_id": "ws_1", "permission": "read"}
    options.update(kwargs)
    d = decide(chain, NOW, **options)  # type: ignore[arg-type]
    assert not d.allowed
    assert d.rule == rule


def test_expiry_is_exact_at_the_instant() -> None:
    g = grant(expires=DAY)
    assert alive([g], NOW + DAY - timedelta(microseconds=1)).allowed
    assert not alive([g], NOW + DAY).allowed


def test_max_expiry_bounds_a_stored_longer_expiry() -> None:
    g = replace(grant(expires=DAY, max_expires=2 * DAY), expires=NOW + 10 * DAY)
    assert not alive([g], NOW + 3 * DAY).allowed


def test_to_json_never_has_a_token() -> None:
    data = grant().to_json()
    assert "token" not in data and "token_hash" not in data
    assert data["permissions"] == ["read", "write", "execute", "admin"]


# -- domains -------------------------------------------------------------------------------------
def test_a_grant_s_domains_are_parsed_and_written_one_way() -> None:
    assert plan(domains=["PyPI.org", "pypi.org", "*.Example.com:443"]).domains == ("pypi.org", "*.example.com:443")
    assert plan().domains == ()
    with pytest.raises(InvalidInput, match="bad network entry"):
        plan(domains=["pypi.org/simple"])


def test_a_child_grant_never_reaches_more_than_its_parent() -> None:
    parent = replace(grant(), domains=("*.example.com", "pypi.org:443"))
    assert plan(domains=["a.example.com:443", "pypi.org:443"], parent=[parent]).domains == \
        ("a.example.com:443", "pypi.org:443")
    for wider in (["example.com"], ["pypi.org"], ["pypi.org:80"], ["files.pythonhosted.org"]):
        with pytest.raises(Denied, match="does not reach") as caught:
            plan(domains=wider, parent=[parent])
        assert caught.value.rule == "grant.clamp"
    assert plan(parent=[parent]).domains == ()  # a child names its domains; none by default


def test_effective_domains_are_those_every_ancestor_covers() -> None:
    root = replace(grant("acc_root"), domains=("*.example.com",))
    # A stored child wider than its parent (written before a clamp, or by hand) is cut at use.
    child = replace(grant("acc_child", parent="acc_root"), domains=("a.example.com", "evil.test"))
    assert effective([child, root]).domains == ("a.example.com",)
    assert effective([root]).domains == ("*.example.com",)
    assert "domains" in child.to_json() and child.to_json()["domains"] == ["a.example.com", "evil.test"]


def test_grants_that_share_a_workspace_with_a_writer_and_secrets_are_named() -> None:
    from warden.core.grants import shared_with_writers

    now = datetime(2026, 1, 1, tzinfo=UTC)
    holder = replace(grant("acc_h", permissions="execute,secrets"), bot="h", secrets=("K",))
    writer = replace(grant("acc_w", permissions="read,write"), bot="w")
    reader = replace(grant("acc_r", permissions="read"), bot="r")
    runner = replace(grant("acc_x", permissions="read,execute"), bot="x")  # its commands write the workspace
    assert shared_with_writers(holder, [writer, reader, runner], now) == ("w", "x")
    assert shared_with_writers(writer, [holder, reader], now) == ("h",)
    assert shared_with_writers(reader, [holder, writer], now) == ()
    assert shared_with_writers(holder, [replace(writer, bot="h")], now) == ()  # its own
    gone = replace(writer, revoked=now)
    assert shared_with_writers(holder, [gone], now) == ()
    assert shared_with_writers(holder, [replace(writer, expires=now)], now) == ()


def test_secrets_without_the_permission_is_said_in_words_the_http_api_reads_too() -> None:
    """Found as a newcomer: a bot minting a child grant over HTTP with "secrets" and no `secrets`
    permission was told "add it to --permissions", a flag of the CLI it does not use."""
    with pytest.raises(InvalidInput) as refused:
        plan("read", secrets=["API_KEY"])
    assert "add it to the grant's permissions" in str(refused.value), refused.value
    assert 'over HTTP, "permissions"' in str(refused.value) and "--permissions" in str(refused.value)
