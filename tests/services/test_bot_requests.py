"""A bot's requests, through the service every front end shares: who may ask for what, and what is
left behind when a step fails."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from warden.bootstrap import App, bootstrap
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound, Unavailable
from warden.core.live import LiveSandbox
from warden.services.auth import DENIED, Principal
from warden.services.bot_requests import (
    CREATOR_PERMISSIONS,
    BotRequestService,
    ChildGrant,
    Command,
    NewWorkspace,
)

LIMIT = 2  # api.max_workspaces_per_bot in this module's home


class Trail:
    """Records what the service tells the front end's audit event."""

    def __init__(self) -> None:
        self.rule = ""
        self.detail: dict[str, object] = {}

    def allow(self, rule: str) -> None:
        self.rule = rule

    def note(self, **detail: object) -> None:
        self.detail.update(detail)


@pytest.fixture(scope="module")
def wapp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    home = tmp_path_factory.mktemp("bot_requests") / "home"
    environ = {"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home), "HOME": str(home.parent),
               "WARDEN_API_MAX_WORKSPACES_PER_BOT": str(LIMIT)}
    application = bootstrap(home, environ=environ)
    yield application
    application.close()


def _bot(app: App, name: str) -> Principal:
    """A registered bot, signed in by its identity token."""
    return app.auth.authenticate(app.grants.register_bot(name).token)


def _create(app: App, bot: Principal, name: str, **params: object) -> tuple[Principal, Path]:
    """The bot's workspace `name`, and the principal of the grant it got on it."""
    made = app.bot_requests.create_workspace(bot, NewWorkspace(name=name, **params))  # type: ignore[arg-type]
    return app.auth.authenticate(made.grant.token), Path(made.path)


def _names(app: App) -> set[str]:
    return {w.name for w in app.workspaces.list()}


# -- creating a workspace -----------------------------------------------------------------------
def test_a_bot_gets_the_workspace_it_asked_for_and_a_creator_grant(wapp: App) -> None:
    bot = _bot(wapp, "maker")
    trail = Trail()
    made = wapp.bot_requests.create_workspace(bot, NewWorkspace(name="made"), bot="maker", trail=trail)
    assert made.name == "made" and Path(made.path).is_dir()
    assert made.grant.grant.bot == "maker" and made.grant.grant.permissions == frozenset(CREATOR_PERMISSIONS)
    record = wapp.workspaces.get("made")
    assert (record.type, record.created_by) == ("bot", "bot:maker")
    assert made.sandbox == wapp.bot_requests.settings.sandbox
    assert trail.rule == "bot.identity"
    assert trail.detail == {"accessor": made.grant.grant.accessor, "template": None}
    # The grant's token opens the workspace.
    granted = wapp.auth.authenticate(made.grant.token)
    assert wapp.bot_requests.get_workspace(granted, "made").permissions == CREATOR_PERMISSIONS


def test_only_an_identity_token_asks_and_only_for_its_own_bot(wapp: App) -> None:
    bot = _bot(wapp, "asker")
    granted, _ = _create(wapp, bot, "asked")
    for principal, claimed, rule in ((granted, "asker", "token.not_identity"),
                                     (bot, "someone-else", "token.bot_mismatch")):
        trail = Trail()
        with pytest.raises(Denied, match=DENIED) as info:
            wapp.bot_requests.create_workspace(principal, NewWorkspace(name="never"), bot=claimed, trail=trail)
        assert info.value.rule == rule and trail.rule == ""
    assert "never" not in _names(wapp)


def test_a_bot_names_a_template_never_a_file(wapp: App, tmp_path: Path) -> None:
    bot = _bot(wapp, "templater")
    evil = tmp_path / "evil.yaml"
    evil.write_text('version: "1.0"\nname: evil\n')
    for ref in (str(evil), "../evil.yaml", "evil.yml", "sub/minimal"):
        with pytest.raises(InvalidInput, match="name of an installed template"):
            wapp.bot_requests.create_workspace(bot, NewWorkspace(name="from-file", template=ref))
    assert "from-file" not in _names(wapp)
    _create(wapp, bot, "from-name", template="minimal")
    assert wapp.workspaces.get("from-name").template == "minimal"


def test_a_bot_holds_at_most_its_limit_of_workspaces(wapp: App) -> None:
    assert wapp.bot_requests.settings.max_workspaces == LIMIT  # read from the settings
    bot, other = _bot(wapp, "hoarder"), _bot(wapp, "neighbour")
    grants = [_create(wapp, bot, f"hoard-{i}")[0] for i in range(LIMIT)]
    with pytest.raises(Conflict, match=r"api\.max_workspaces_per_bot"):
        wapp.bot_requests.create_workspace(bot, NewWorkspace(name="hoard-extra"))
    assert "hoard-extra" not in _names(wapp)
    _create(wapp, other, "neighbours")  # the limit is per bot
    wapp.bot_requests.delete_workspace(grants[0], "hoard-0")
    _create(wapp, bot, "hoard-extra")  # one given back, one may be taken


def test_bad_input_is_refused_before_anything_is_made(wapp: App) -> None:
    bot = _bot(wapp, "sloppy")
    with pytest.raises(InvalidInput, match="not base64"):
        wapp.bot_requests.create_workspace(bot, NewWorkspace(name="sloppy", project_blob="not base64!"))
    with pytest.raises(InvalidInput, match="bad package"):
        wapp.bot_requests.create_workspace(bot, NewWorkspace(name="sloppy", requirements=("--index-url=x",)))
    assert "sloppy" not in _names(wapp)
    assert not (wapp.root_dir / "sloppy").exists()
    assert wapp.audit.list(target="sloppy") == []  # never made (and so never unmade either)


def test_a_workspace_whose_creator_grant_fails_is_not_left_behind(wapp: App) -> None:
    bot = _bot(wapp, "vanishing")
    wapp.grants.remove_bot("vanishing")  # by a person, while the bot's request is on its way
    with pytest.raises(NotFound, match="no bot named"):
        wapp.bot_requests.create_workspace(bot, NewWorkspace(name="orphan"))
    assert "orphan" not in _names(wapp)
    assert not (wapp.root_dir / "orphan").exists()
    assert not wapp.grants.list_grants("orphan")


def test_a_workspace_whose_requirements_fail_is_not_left_behind(wapp: App) -> None:
    class BrokenIndex:
        def install(self, name: str, packages: object, *, actor: str) -> None:
            assert name in _names(wapp)  # made first, then installed into
            raise Unavailable("installing six failed (exit 1): no index")

    # The App's services and settings, with an installer whose package index is down.
    requests = BotRequestService(workspaces=wapp.workspaces, grants=wapp.grants, auth=wapp.auth,
                                 secrets=wapp.secrets, runs=wapp.runs, installs=BrokenIndex,  # type: ignore[arg-type]
                                 settings=wapp.bot_requests.settings)
    bot = _bot(wapp, "needy")
    with pytest.raises(Unavailable, match="installing six failed"):
        requests.create_workspace(bot, NewWorkspace(name="needy", requirements=("six",)))
    assert "needy" not in _names(wapp)
    assert not (wapp.root_dir / "needy").exists()


# -- using it -----------------------------------------------------------------------------------
def test_whoami_and_list_speak_for_the_token(wapp: App) -> None:
    bot = _bot(wapp, "lister")
    granted, _ = _create(wapp, bot, "listed")
    _create(wapp, bot, "listed-too")
    trail = Trail()
    me = wapp.bot_requests.whoami(bot, trail=trail)
    assert (me.bot, me.kind, me.accessor, me.permissions) == ("lister", "bot", None, ())
    assert trail.rule == "token.valid"
    me = wapp.bot_requests.whoami(granted)
    assert (me.kind, me.workspace, me.accessor) == ("grant", "listed", granted.accessor)
    assert me.permissions == CREATOR_PERMISSIONS and me.secrets == () and me.expires is not None
    # An identity token lists every workspace its bot holds a grant on; a grant token its one.
    assert [v.name for v in wapp.bot_requests.list_workspaces(bot)] == ["listed", "listed-too"]
    assert all(v.permissions == () for v in wapp.bot_requests.list_workspaces(bot))
    (only,) = wapp.bot_requests.list_workspaces(granted)
    assert (only.name, only.permissions) == ("listed", CREATOR_PERMISSIONS)


def test_an_identity_token_opens_no_workspace(wapp: App) -> None:
    bot = _bot(wapp, "knocker")
    _create(wapp, bot, "knocked")
    with pytest.raises(Denied) as info:
        wapp.bot_requests.get_workspace(bot, "knocked")
    assert info.value.rule == "token.identity"


def test_deleting_revokes_every_grant_then_destroys(wapp: App) -> None:
    bot, _ = _bot(wapp, "leaver"), _bot(wapp, "friend")
    granted, path = _create(wapp, bot, "leaving")
    child = wapp.bot_requests.create_grant(granted, "leaving", ChildGrant(bot="friend", permissions=("read",)))
    trail = Trail()
    gone = wapp.bot_requests.delete_workspace(granted, "leaving", trail=trail)
    assert set(gone.revoked) == {granted.accessor, child.grant.accessor}
    assert trail.rule == "grant.allow"
    assert "leaving" not in _names(wapp) and not path.exists()
    with pytest.raises(Denied):
        wapp.auth.authenticate(child.token)


def test_exec_checks_the_command_before_anything_runs(wapp: App) -> None:
    bot = _bot(wapp, "runner")
    granted, _ = _create(wapp, bot, "running")
    limit = wapp.bot_requests.settings.max_timeout
    for command, why in ((Command(("true",), timeout=limit + 1), "sandbox.timeout"),
                         (Command(("true",), env={"BAD-NAME": "x"}), "bad environment variable name"),
                         (Command(("",)), "cmd\\[0\\] is empty")):
        with pytest.raises(InvalidInput, match=why):
            wapp.bot_requests.exec(granted, "running", command)

    # The front end's slot is taken for the grant chain's minter; a full one stops the run.
    asked: list[str] = []

    @contextmanager
    def full(bot: str) -> Iterator[None]:
        asked.append(bot)
        raise Unavailable("no slot", rule="api.max_execs")
        yield

    trail = Trail()
    with pytest.raises(Unavailable, match="no slot"):
        wapp.bot_requests.exec(granted, "running", Command(("echo", "hi"), env={"MINE": "1"}), trail=trail,
                               admit=full)
    assert asked == ["runner"]
    assert trail.detail["env_names"] == ["MINE"] and trail.detail["program"] == "echo"
    assert "exit_code" not in trail.detail


# -- grants -------------------------------------------------------------------------------------
def test_child_grants_are_clamped_and_durations_read(wapp: App) -> None:
    bot, _ = _bot(wapp, "parent-bot"), _bot(wapp, "child-bot")
    granted, _ = _create(wapp, bot, "sharing")
    trail = Trail()
    issued = wapp.bot_requests.create_grant(
        granted, "sharing", ChildGrant(bot="child-bot", permissions=("read", "write"), ttl="30m"), trail=trail)
    grant = issued.grant
    assert grant.parent == granted.accessor and grant.permissions == frozenset({"read", "write"})
    assert (grant.expires - grant.created).total_seconds() == 1800
    assert trail.rule == "grant.allow" and trail.detail == {"accessor": grant.accessor, "bot": "child-bot"}
    with pytest.raises(InvalidInput, match="bad duration"):
        wapp.bot_requests.create_grant(granted, "sharing", ChildGrant(bot="child-bot", permissions=("read",),
                                                                      ttl="soon"))
    # A read-only child cannot mint (admin) at all.
    reader = wapp.auth.authenticate(issued.token)
    with pytest.raises(Denied):
        wapp.bot_requests.create_grant(reader, "sharing", ChildGrant(bot="child-bot", permissions=("read",)))


def test_a_bot_revokes_only_its_own_grant_or_those_minted_from_it(wapp: App) -> None:
    creator = _bot(wapp, "root-bot")
    for name in ("mid-bot", "sibling-bot", "leaf-bot"):
        _bot(wapp, name)
    root, _ = _create(wapp, creator, "tree")
    admin = ("read", "admin")
    mid = wapp.bot_requests.create_grant(root, "tree", ChildGrant(bot="mid-bot", permissions=admin))
    sibling = wapp.bot_requests.create_grant(root, "tree", ChildGrant(bot="sibling-bot", permissions=admin))
    mid_principal = wapp.auth.authenticate(mid.token)
    leaf = wapp.bot_requests.create_grant(mid_principal, "tree", ChildGrant(bot="leaf-bot", permissions=("read",)))

    # Not its parent, not its sibling: grant.not_descendant, and nothing revoked.
    for target in (root.accessor, sibling.grant.accessor):
        assert target is not None
        trail = Trail()
        with pytest.raises(Denied, match=DENIED) as info:
            wapp.bot_requests.revoke_grant(mid_principal, "tree", target, trail=trail)
        assert info.value.rule == "grant.not_descendant"
        assert trail.rule == "grant.allow" and trail.detail == {"accessor": target}
    assert wapp.auth.authenticate(sibling.token).accessor == sibling.grant.accessor

    # Its parent may revoke it, at any depth below, and its children go with it.
    done = wapp.bot_requests.revoke_grant(root, "tree", mid.grant.accessor)
    assert set(done.revoked) == {mid.grant.accessor, leaf.grant.accessor}
    for token in (mid.token, leaf.token):
        with pytest.raises(Denied):
            wapp.auth.authenticate(token)
    # And a bot may always give back its own.
    sibling_principal = wapp.auth.authenticate(sibling.token)
    assert sibling.grant.accessor is not None
    done = wapp.bot_requests.revoke_grant(sibling_principal, "tree", sibling.grant.accessor)
    assert done.revoked == (sibling.grant.accessor,)


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("when", ["after its check", "as its sandbox starts"])
def test_a_grant_revoked_before_its_command_runs_nothing(wapp: App, background: bool, when: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The grant is checked as the request comes (authenticate, `_authorize`), read again under
    the run's lease, and the bot's live sandbox is started a moment later. A revoke between the
    check and the lease started a live sandbox for it (its revocation had stopped those it had);
    one as the sandbox was being started (bwrap, for real) stopped the bot's sandboxes before this
    one was recorded, so it missed it. Either way the command (a background one for as long as it
    liked) ran. The chain is read under the lease, and the sandbox's row is recorded only with its
    grant read again: nothing runs and nothing is left."""
    late = when == "as its sandbox starts"
    bot = _bot(wapp, f"revoked-{'late-' if late else ''}{int(background)}")
    granted, path = _create(wapp, bot, f"revoking{'late' if late else ''}{int(background)}")
    assert granted.accessor is not None
    name = path.name
    if late:
        sandboxes = wapp.live._sandboxes
        real_start = sandboxes.start

        def revoked_meanwhile(*args: object, **kwargs: object) -> object:
            wapp.grants.revoke(name, accessor=granted.accessor)  # the person's revoke, as it starts
            return real_start(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(sandboxes, "start", revoked_meanwhile)
    else:
        wapp.grants.revoke(name, accessor=granted.accessor)  # between the check and the run
    command = Command(("sh", "-c", "echo ran > ran.txt; sleep 30"))
    with pytest.raises(Denied, match="revoked"):
        if background:
            wapp.bot_requests.start(granted, name, command)
        else:
            wapp.bot_requests.exec(granted, name, command)
    assert not (path / "ran.txt").exists()
    with wapp.registry.transaction(write=False) as tx:
        assert tx.sandboxes.of_workspace(name) == [] and tx.runs.of_workspace(name) == []
        assert tx.processes.of_workspace(name) == []


@pytest.mark.parametrize("when", ["after it started", "as its sandbox starts"])
def test_a_zone_made_read_only_stops_the_background_processes_that_write_there(
        wapp: App, when: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live sandbox's mounts were compared with the workspace's policy only when its principal
    sent another command: a bot's background process kept writing to a folder the person had
    since made a read-only zone (or denied), through the sweeps, for as long as it ran (up to a
    day), while the file API refused the same write at once. The sweep now stops the sandbox
    whose path policy is not the one it started under, its processes killed with the reason.
    A change as the sandbox starts (after the run's mounts were planned) counts too: the sandbox
    records the policy its mounts came from, not the one read again as it started."""
    early = when == "as its sandbox starts"
    bot = _bot(wapp, f"zoned-{'early' if early else 'later'}")
    granted, path = _create(wapp, bot, f"zoned{'early' if early else 'later'}")
    name = path.name
    (path / "secret").mkdir()

    def tighten() -> None:
        (path / ".warden" / "zones.yaml").write_text("zones:\n  secret:\n    mode: ro\n")

    if early:
        real_start = wapp.live._start

        def tightened_first(*args: object, **kwargs: object) -> object:
            tighten()  # the person's change, between the run's plan and its sandbox's start
            return real_start(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(wapp.live, "_start", tightened_first)
    started = wapp.bot_requests.start(granted, name, Command(
        ("sh", "-c", "while true; do echo x >> secret/log.txt; sleep 0.1; done")))
    deadline = time.monotonic() + 10
    while not (path / "secret" / "log.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not early:
        assert wapp.live.sweep() == []  # its policy unchanged: it runs on
        tighten()
    assert len(wapp.live.sweep()) == 1
    (view,) = [v for v in wapp.live.list(name) if v.id == started.id]
    assert view.status == "killed" and "path policy" in (view.stopped_by or "")
    size = (path / "secret" / "log.txt").stat().st_size
    time.sleep(0.5)
    assert (path / "secret" / "log.txt").stat().st_size == size  # nothing writes there any more


def test_a_live_sandbox_that_recorded_no_path_policy_is_started_again(
        wapp: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live sandbox started by a Warden before the policy digest has none: it was never
    compared, so a zone made read-only since left its background processes writing there. Such a
    sandbox is stopped by the next sweep (with the reason), and the bot's next command starts a new one."""
    bot = _bot(wapp, "older-bot")
    granted, path = _create(wapp, bot, "olderpolicy")
    name = path.name
    with monkeypatch.context() as patch:
        patch.setattr(wapp.live, "_path_policy", None)  # as an older Warden started it: no digest
        started = wapp.bot_requests.start(granted, name, Command(("sh", "-c", "echo x > up.txt; sleep 60")))
    deadline = time.monotonic() + 10
    while not (path / "up.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with wapp.registry.transaction(write=False) as tx:
        (sandbox,) = tx.sandboxes.of_workspace(name)
    assert "paths" not in sandbox.meta
    assert len(wapp.live.sweep()) == 1
    (view,) = [v for v in wapp.live.list(name) if v.id == started.id]
    assert view.status == "killed" and "before Warden recorded the path policy" in (view.stopped_by or "")
    assert wapp.bot_requests.exec(granted, name, Command(("true",))).exit_code == 0
    with wapp.registry.transaction(write=False) as tx:
        (again,) = tx.sandboxes.of_workspace(name)
    assert again.id != sandbox.id and isinstance(again.meta.get("paths"), str)


def test_a_quick_background_start_another_look_found_ended_is_started_not_refused(
        wapp: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread of the server (an exec, a `ps`, a `wait` of the same sandbox) that records
    ended processes looked between this start's spawn and its recording of the process running:
    the supervisor listed it ended (`echo`, done at once), so that look recorded its end, and the
    start, finding its row no longer "starting", said 'stopped as the command started ... run it
    again' (503) for a command that had run (met 1 in 150 starts from 10 threads of the SDK).
    A row still "starting" is its starter's: the look leaves it, and the next records its end."""
    bot = _bot(wapp, "quick-starter")
    granted, path = _create(wapp, bot, "quickstart")
    sandboxes = wapp.live._sandboxes
    real_spawn = sandboxes.spawn

    def looked_at_meanwhile(sandbox: LiveSandbox, process_id: str, *args: object, **kwargs: object) -> object:
        spawned = real_spawn(sandbox, process_id, *args, **kwargs)  # type: ignore[arg-type]
        wait_until(lambda: any(s.id == process_id and s.status == "exited" for s in sandboxes.listing(sandbox)),
                   timeout=10, message="the quick command did not end")
        wapp.live.collect_ended(sandbox)  # the other thread's look, at that moment
        return spawned

    monkeypatch.setattr(sandboxes, "spawn", looked_at_meanwhile)
    started = wapp.bot_requests.start(granted, "quickstart", Command(("sh", "-c", "echo tok-7f3a > out.txt")))
    monkeypatch.undo()
    assert (path / "out.txt").read_text() == "tok-7f3a\n"
    ended = wapp.bot_requests.wait_process(granted, "quickstart", started.id, 10)
    assert (ended.status, ended.exit_code) == ("exited", 0)
