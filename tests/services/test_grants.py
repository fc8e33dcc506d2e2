"""Bots and grants on a real registry: issue, list, clamp, revoke trees, resolve tokens."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from warden.bootstrap import App, bootstrap
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound
from warden.core.tokens import looks_like_token


@pytest.fixture(scope="module")
def kapp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """One home with workspaces `demo` and `other` (building a layer costs ~1 s, so once per module)."""
    home = tmp_path_factory.mktemp("grants") / "home"
    application = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home)})
    application.workspaces.create("demo")
    application.workspaces.create("other")
    for bot in ("beta", "gamma", "delta", "eps", "zeta", "theta", "iota", "kappa"):
        application.grants.register_bot(bot)  # a grant is only for a registered bot
    yield application
    application.close()


def _dump(app: App) -> bytes:
    """Every byte of the registry (and its WAL), to look for tokens in it."""
    data = b""
    for path in Path(app.home.root).glob("warden.db*"):
        data += path.read_bytes()
    return data


def test_register_bot_returns_a_token_stored_only_as_a_hash(kapp: App) -> None:
    issued = kapp.grants.register_bot("alpha")
    assert looks_like_token(issued.token)
    assert [b.name for b in kapp.grants.list_bots()].count("alpha") == 1
    assert issued.token.encode() not in _dump(kapp)
    assert issued.token[4:].encode() not in _dump(kapp)
    bot, chain = kapp.grants.resolve(issued.token)
    assert bot is not None and bot.name == "alpha" and chain == []


def test_registering_twice_is_a_conflict(kapp: App) -> None:
    kapp.grants.register_bot("twice")
    with pytest.raises(Conflict, match="bot rm"):
        kapp.grants.register_bot("twice")


def test_grant_issues_a_token_and_an_accessor(kapp: App) -> None:
    issued = kapp.grants.grant("demo", "beta", "read,write", ttl=timedelta(hours=1))
    grant = issued.grant
    assert grant.accessor.startswith("acc_") and grant.accessor not in issued.token
    assert grant.permissions == {"read", "write"}
    assert issued.to_json()["token"] == issued.token
    assert issued.token.encode() not in _dump(kapp)
    _, chain = kapp.grants.resolve(issued.token)
    assert [g.accessor for g in chain] == [grant.accessor]
    listed = {g.accessor: g for g in kapp.grants.list_grants("demo")}
    assert grant.accessor in listed
    rows = sqlite3.connect(kapp.home.root / "warden.db").execute(
        "SELECT token_hash FROM grants WHERE accessor = ?", (grant.accessor,)).fetchall()
    assert len(rows[0][0]) == 64 and rows[0][0] != issued.token


def test_grant_on_a_missing_workspace_or_secret(kapp: App) -> None:
    with pytest.raises(NotFound):
        kapp.grants.grant("nope", "beta", "read")
    with pytest.raises(NotFound, match="secret set NOPE"):
        kapp.grants.grant("demo", "beta", "read,secrets", secrets=["NOPE"])
    with pytest.raises(InvalidInput):
        kapp.grants.grant("demo", "bad name", "read")


def test_unknown_and_malformed_tokens_resolve_to_nothing(kapp: App) -> None:
    assert kapp.grants.resolve("wdn_" + "A" * 43) == (None, [])
    assert kapp.grants.resolve("nonsense") == (None, [])
    assert kapp.grants.resolve("") == (None, [])


def test_children_are_clamped_and_revoked_with_their_parent(kapp: App) -> None:
    root = kapp.grants.grant("demo", "gamma", "read,write,execute,admin", ttl=timedelta(hours=2))
    root_chain = kapp.grants.chain(root.grant.accessor)
    child = kapp.grants.grant("demo", "delta", "read,admin", ttl=timedelta(days=5), parent=root_chain)
    assert child.grant.parent == root.grant.accessor
    assert child.grant.expires == root.grant.expires  # clamped, silently, to the parent
    with pytest.raises(Denied):
        kapp.grants.grant("demo", "delta", "secrets", parent=root_chain)
    grandchild = kapp.grants.grant("demo", "eps", "read", parent=kapp.grants.chain(child.grant.accessor))
    assert [g.accessor for g in kapp.grants.chain(grandchild.grant.accessor)] == [
        grandchild.grant.accessor, child.grant.accessor, root.grant.accessor]

    revoked = kapp.grants.revoke("demo", accessor=root.grant.accessor)
    assert set(revoked) == {root.grant.accessor, child.grant.accessor, grandchild.grant.accessor}
    for issued in (root, child, grandchild):
        assert kapp.grants.get(issued.grant.accessor).revoked is not None


def test_only_a_child_grant_may_name_an_unregistered_bot(kapp: App) -> None:
    # The person (no parent) is told: it owns the registry, and a typo should not mint a token.
    with pytest.raises(NotFound, match="no bot named 'ghost' is registered"):
        kapp.grants.grant("demo", "ghost", "read")
    # A grant holder is not: its answer for an unregistered name is that for a registered one.
    root = kapp.grants.grant("demo", "kappa", "read,execute,admin")
    chain = kapp.grants.chain(root.grant.accessor)
    ghost = kapp.grants.grant("demo", "ghost", "read", parent=chain)
    real = kapp.grants.grant("demo", "iota", "read", parent=chain)
    assert type(ghost) is type(real) and ghost.grant.parent == real.grant.parent == root.grant.accessor
    refusals = []
    for bot in ("ghost", "iota"):
        with pytest.raises(Denied) as refused:
            kapp.grants.grant("demo", bot, "secrets", parent=chain)
        refusals.append(str(refused.value))
    assert refusals[0] == refusals[1]
    assert kapp.grants.chain(ghost.grant.accessor)[-1].bot == "kappa"  # whose it really is
    assert ghost.grant.accessor in kapp.grants.revoke("demo", accessor=root.grant.accessor)


def test_revoke_by_bot_takes_every_grant_it_holds_there(kapp: App) -> None:
    a = kapp.grants.grant("demo", "zeta", "read")
    b = kapp.grants.grant("demo", "zeta", "write")
    elsewhere = kapp.grants.grant("other", "zeta", "read")
    assert set(kapp.grants.revoke("demo", bot="zeta")) == {a.grant.accessor, b.grant.accessor}
    assert kapp.grants.get(elsewhere.grant.accessor).revoked is None
    with pytest.raises(NotFound):
        kapp.grants.revoke("demo", bot="zeta")  # nothing live left
    with pytest.raises(InvalidInput):
        kapp.grants.revoke("demo")
    with pytest.raises(NotFound):
        kapp.grants.revoke("other", accessor=a.grant.accessor)  # the accessor is of another workspace


def test_bot_rm_revokes_everything_the_bot_holds(kapp: App) -> None:
    identity = kapp.grants.register_bot("eta")
    held = [kapp.grants.grant("demo", "eta", "read,admin"), kapp.grants.grant("other", "eta", "read")]
    minted = kapp.grants.grant("demo", "theta", "read", parent=kapp.grants.chain(held[0].grant.accessor))
    revoked = kapp.grants.remove_bot("eta")
    assert set(revoked) == {held[0].grant.accessor, held[1].grant.accessor, minted.grant.accessor}
    assert kapp.grants.resolve(identity.token) == (None, [])
    assert "eta" not in [b.name for b in kapp.grants.list_bots()]
    with pytest.raises(NotFound):
        kapp.grants.remove_bot("eta")


def test_revoke_workspace(kapp: App) -> None:
    kapp.workspaces.create("gone")
    g = kapp.grants.grant("gone", "iota", "read")
    assert kapp.grants.revoke_workspace("gone") == [g.grant.accessor]
    assert kapp.grants.revoke_workspace("gone") == []


def test_every_change_is_audited_without_tokens(kapp: App) -> None:
    issued = kapp.grants.grant("demo", "kappa", "read")
    kapp.grants.revoke("demo", accessor=issued.grant.accessor)
    events = kapp.audit.list(limit=500)
    actions = [e.action for e in events]
    assert "grant.create" in actions and "grant.revoke" in actions and "bot.register" in actions
    text = repr(events)
    assert issued.token not in text
    assert issued.grant.accessor in text


def test_grants_of_bot_are_only_the_usable_ones(tmp_path: Path) -> None:
    """What a bot is shown (its workspace listing) ends when its grant does, on the service clock."""
    from datetime import UTC, datetime

    now = [datetime.now(UTC)]
    home = tmp_path / "home"
    app = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home)},
                    clock=lambda: now[0])
    try:
        app.workspaces.create("demo")
        app.grants.register_bot("brief")
        short = app.grants.grant("demo", "brief", "read,admin", ttl=timedelta(seconds=30))
        child = app.grants.grant("demo", "brief", "read", parent=app.grants.chain(short.grant.accessor))
        long = app.grants.grant("demo", "brief", "read", ttl=timedelta(hours=1))
        revoked = app.grants.grant("demo", "brief", "read", ttl=timedelta(hours=1))
        app.grants.revoke("demo", accessor=revoked.grant.accessor)
        listed = {g.accessor for g in app.grants.grants_of_bot("brief")}  # made at one instant: no order
        assert listed == {short.grant.accessor, child.grant.accessor, long.grant.accessor}
        now[0] += timedelta(seconds=30)  # the end is exclusive, as for the token itself
        assert [g.accessor for g in app.grants.grants_of_bot("brief", workspace="demo")] == [long.grant.accessor]
        now[0] += timedelta(hours=1)
        assert app.grants.grants_of_bot("brief") == []
        # Revoking by bot still reaches the expired grants (and their children).
        assert set(app.grants.revoke("demo", bot="brief")) >= {short.grant.accessor, child.grant.accessor}
    finally:
        app.close()
