"""Authentication and authorization: one uniform refusal, the real rule kept for the audit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.clock import Clock
from warden.bootstrap import App, bootstrap
from warden.core.errors import Denied, InvalidInput
from warden.core.zones import Zone
from warden.services.auth import DENIED


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def kapp(tmp_path_factory: pytest.TempPathFactory, clock: Clock) -> Iterator[App]:
    home = tmp_path_factory.mktemp("auth") / "home"
    application = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home)},
                            clock=clock)
    application.workspaces.create("demo")
    application.workspaces.create("other")
    for bot in ("reader", "shortlived", "kid", "old", "zoned", "whole", "lost"):
        application.grants.register_bot(bot)  # a grant is only for a registered bot
    yield application
    application.close()


def _refused(fn: object, *args: object, **kwargs: object) -> str:
    """The rule of a refusal, which says nothing about other tokens: the uniform message, or (a
    live grant of this workspace short of the call) that and what the caller's own grant lacks."""
    with pytest.raises(Denied) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    if info.value.rule in ("grant.permission", "grant.zone"):
        assert info.value.message.startswith(f"{DENIED}: this token's grant on workspace "), info.value.message
    else:
        assert info.value.message == DENIED
    return str(info.value.rule)


def test_identity_tokens_name_the_bot_and_open_no_workspace(kapp: App) -> None:
    token = kapp.grants.register_bot("auth-bot").token
    principal = kapp.auth.authenticate(token)
    assert principal.kind == "bot" and principal.bot == "auth-bot" and principal.actor == "bot:auth-bot"
    assert _refused(kapp.auth.authorize, principal, "demo", "read") == "token.identity"


def test_every_bad_token_gets_the_same_answer(kapp: App) -> None:
    rules = {_refused(kapp.auth.authenticate, t) for t in (None, "", "junk", "wdn_" + "B" * 43)}
    assert rules == {"token.missing", "token.unknown"}


def test_grant_principal_and_decisions(kapp: App) -> None:
    issued = kapp.grants.grant("demo", "reader", "read")
    principal = kapp.auth.authenticate(issued.token)
    assert principal.actor == f"bot:reader@{issued.grant.accessor}"
    assert issued.token not in principal.actor
    assert kapp.auth.authorize(principal, "demo", "read").name == "demo"
    assert _refused(kapp.auth.authorize, principal, "demo", "write") == "grant.permission"
    with pytest.raises(Denied, match=r"does not include `write`; a person widens it with `warden grant demo "):
        kapp.auth.authorize(principal, "demo", "write")
    assert _refused(kapp.auth.authorize, principal, "other", "read") == "grant.workspace"


def test_expiry_and_revocation_are_checked_at_every_use(kapp: App, clock: Clock) -> None:
    issued = kapp.grants.grant("demo", "shortlived", "read,admin", ttl=timedelta(seconds=30))
    child = kapp.grants.grant("demo", "kid", "read", parent=kapp.grants.chain(issued.grant.accessor))
    principal = kapp.auth.authenticate(child.token)
    clock.now += timedelta(seconds=31)
    try:
        assert _refused(kapp.auth.authenticate, issued.token) == "grant.expired"
        assert _refused(kapp.auth.authenticate, child.token) == "grant.expired"
        # A principal authenticated before the expiry is still checked when it acts.
        assert _refused(kapp.auth.authorize, principal, "demo", "read") == "grant.expired"
    finally:
        clock.now -= timedelta(seconds=31)
    kapp.grants.revoke("demo", accessor=issued.grant.accessor)
    assert _refused(kapp.auth.authenticate, child.token) == "grant.revoked"


def test_a_destroyed_and_recreated_workspace_does_not_honour_old_grants(kapp: App) -> None:
    kapp.workspaces.create("phoenix")
    issued = kapp.grants.grant("phoenix", "old", "read")
    kapp.workspaces.destroy("phoenix")
    kapp.workspaces.create("phoenix")
    # Destroying the workspace revoked the grant in the same transaction.
    assert _refused(kapp.auth.authenticate, issued.token) == "grant.revoked"


def test_an_old_grant_never_opens_a_new_workspace_of_the_same_name(kapp: App) -> None:
    """Even a grant left live (e.g. a row restored from a backup) is bound to the workspace id."""
    record = kapp.workspaces.create("phoenix2")
    issued = kapp.grants.grant("phoenix2", "old", "read")
    with kapp.registry.db.transaction() as tx:
        tx.execute("DELETE FROM workspaces WHERE name = :n", {"n": record.name})
    Path(record.path).rename(Path(record.path).with_name("phoenix2-old"))
    kapp.workspaces.create("phoenix2")
    principal = kapp.auth.authenticate(issued.token)
    assert _refused(kapp.auth.authorize, principal, "phoenix2", "read") == "grant.workspace"


def test_zone_scope_and_secret_names(kapp: App) -> None:
    kapp.secrets.set("SCOPE_KEY", "v")
    zoned = kapp.auth.authenticate(
        kapp.grants.grant("demo", "zoned", "read,secrets", zones=["cache"], secrets=["SCOPE_KEY"]).token)
    zones = {"cache": Zone("cache", "/cache", "rw"), "workspace": Zone("workspace", "/workspace", "rw")}
    scope = kapp.auth.zone_scope(zoned, zones)
    assert scope is not None and set(scope) == {"cache"}
    assert kapp.auth.secret_names(zoned) == ("SCOPE_KEY",)
    whole = kapp.auth.authenticate(kapp.grants.grant("demo", "whole", "read").token)
    assert kapp.auth.zone_scope(whole, zones) is None
    assert kapp.auth.secret_names(whole) == ()
    with pytest.raises(InvalidInput, match="no zone nozone"):
        kapp.grants.grant("demo", "lost", "read", zones=["nozone"])
    # A zone removed from the workspace after the grant was made: the grant reaches nothing.
    assert _refused(kapp.auth.zone_scope, zoned, {"workspace": zones["workspace"]}).startswith("deny")
    assert _refused(kapp.auth.authorize, zoned, "demo", "execute", whole_workspace=True) in {
        "grant.permission", "grant.zone"}


def test_the_minter_is_the_bot_holding_the_root_of_the_chain(kapp: App) -> None:
    root = kapp.grants.grant("demo", "kid", "read,execute,admin")
    child = kapp.grants.grant("demo", "old", "read,execute,admin", parent=kapp.grants.chain(root.grant.accessor))
    grandchild = kapp.grants.grant("demo", "lost", "read,execute", parent=kapp.grants.chain(child.grant.accessor))
    minters = {kapp.auth.authenticate(issued.token).bot: kapp.auth.authenticate(issued.token).minter
               for issued in (root, child, grandchild)}
    assert minters == {"kid": "kid", "old": "kid", "lost": "kid"}
    identity = kapp.grants.register_bot("minter-self").token
    assert kapp.auth.authenticate(identity).minter == "minter-self"
