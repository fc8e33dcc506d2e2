"""BotRequestService.acting_on: whom a bot's identity token acts as on a workspace (the MCP
server's way of using a bot's grants), read again at every call."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.bootstrap import App, bootstrap
from warden.core.errors import Denied
from warden.services.auth import DENIED


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    home = tmp_path / "home"
    application = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home),
                                           "HOME": str(tmp_path)})
    application.workspaces.create("demo", template="minimal")
    application.workspaces.create("other", template="minimal")
    yield application
    application.close()


def test_a_grant_token_acts_as_itself(app: App) -> None:
    app.grants.register_bot("ann")
    principal = app.auth.authenticate(app.grants.grant("demo", "ann", ["read"]).token)
    assert app.bot_requests.acting_on(principal, "demo") is principal
    assert app.bot_requests.acting_on(principal, "other") is principal  # authorize refuses it later


def test_an_identity_token_acts_through_its_widest_live_grant(app: App) -> None:
    identity = app.auth.authenticate(app.grants.register_bot("ann").token)
    narrow = app.grants.grant("demo", "ann", ["read"])
    wide = app.grants.grant("demo", "ann", ["read", "write", "execute"])
    acting = app.bot_requests.acting_on(identity, "demo")
    assert acting.kind == "grant" and acting.accessor == wide.grant.accessor and acting.bot == "ann"
    app.auth.authorize(acting, "demo", "execute", whole_workspace=True)  # what the grant allows
    app.grants.revoke("demo", accessor=wide.grant.accessor)
    assert app.bot_requests.acting_on(identity, "demo").accessor == narrow.grant.accessor


def test_without_a_live_grant_there_the_uniform_refusal(app: App) -> None:
    identity = app.auth.authenticate(app.grants.register_bot("ann").token)
    app.grants.register_bot("bob")
    app.grants.grant("other", "bob", ["read"])  # someone else's grant there is not ann's
    with pytest.raises(Denied) as refused:
        app.bot_requests.acting_on(identity, "other")
    assert refused.value.message == DENIED and refused.value.rule == "grant.none"


def test_a_child_grant_another_bot_minted_is_never_adopted(app: App) -> None:
    """The minter holds a child grant's token: adopting it would let that bot read the victim's
    processes, act in its name, or shut it out (zones: none)."""
    identity = app.auth.authenticate(app.grants.register_bot("victim").token)
    own = app.grants.grant("demo", "victim", ["read", "write", "execute"])
    app.grants.register_bot("evil")
    evil = app.grants.grant("demo", "evil", ["read", "write", "execute", "admin"])
    for zones in ([], ["*"]):
        app.grants.grant("demo", "victim", ["read", "write", "execute", "admin"], zones=zones,
                         parent=app.grants.chain(evil.grant.accessor))
        assert app.bot_requests.acting_on(identity, "demo").accessor == own.grant.accessor


def test_several_grants_none_covering_the_others_are_refused(app: App) -> None:
    identity = app.auth.authenticate(app.grants.register_bot("ann").token)
    app.grants.grant("demo", "ann", ["read", "write"])
    app.grants.grant("demo", "ann", ["read", "execute"])
    with pytest.raises(Denied, match="none covering the others"):
        app.bot_requests.acting_on(identity, "demo")


@pytest.mark.parametrize("beside", ["a secret", "a domain"])
def test_a_grant_with_more_permissions_does_not_cover_one_with_a_secret_or_domain_it_lacks(
        app: App, beside: str) -> None:
    """Found as a newcomer: a bot holding a grant with `admin` and another with `--secrets API_KEY`
    acted (over MCP) through the first, and its commands found $API_KEY empty with no word why."""
    identity = app.auth.authenticate(app.grants.register_bot("ann").token)
    app.secrets.set("API_KEY", "s3cr3t")
    app.grants.grant("demo", "ann", ["read", "write", "execute", "admin", "secrets"])  # no secret named
    if beside == "a secret":
        app.grants.grant("demo", "ann", ["read", "execute", "secrets"], secrets=["API_KEY"])
    else:
        app.grants.grant("demo", "ann", ["read", "execute"], domains=["pypi.org:443"])
    with pytest.raises(Denied, match="none covering the others"):
        app.bot_requests.acting_on(identity, "demo")
    wide = app.grants.grant("demo", "ann", ["read", "write", "execute", "admin", "secrets"], secrets=["API_KEY"],
                            domains=["pypi.org:443"])
    assert app.bot_requests.acting_on(identity, "demo").accessor == wide.grant.accessor
