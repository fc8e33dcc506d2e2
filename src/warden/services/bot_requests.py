"""A bot's requests (the bot protocol): ask for a workspace, use it, share it, give it back.

One method per request a bot can make, shared by every front end that speaks for bots (the HTTP
API, the MCP server). The front end turns the token a bot presents into a `Principal`
(AuthService.authenticate); each method then decides whether that principal may make the request
— raising `Denied("permission denied")` with the rule that decided, as AuthService does — carries
it out and answers a frozen result for the front end to render.

Each request leaves one audit event, written by the front end (interfaces/http/calls.py `Call`).
The service tells it, through the `Trail` it is given, the rule that let the request through and
the details worth recording: names and accessors, never a token or a secret value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal, Protocol

from warden.core.durations import parse_duration
from warden.core.errors import Conflict, Denied, InvalidInput, TimedOut, Unavailable
from warden.core.grants import PERMISSIONS, effective
from warden.core.network import parse_rule, ported, uncovered
from warden.services.auth import DENIED
from warden.services.installs import check_packages
from warden.services.templates import TemplateCatalog

if TYPE_CHECKING:
    from collections.abc import Iterator

    from warden.core.grants import Grant
    from warden.core.live import Chunk, Logs, ProcessView
    from warden.core.ports import Tx
    from warden.core.runs import RunResult
    from warden.core.settings import Settings
    from warden.core.workspaces import WorkspaceRecord
    from warden.services.auth import AuthService, Principal
    from warden.services.grants import GrantService, IssuedGrant
    from warden.services.installs import InstallResult, InstallService
    from warden.services.live import Busy, LiveSandboxService
    from warden.services.runs import RunOutput, RunService
    from warden.services.secrets import SecretService
    from warden.services.workspaces import WorkspaceService

__all__ = [
    "CREATOR_PERMISSIONS",
    "UNTRACED",
    "BotRequestService",
    "ChildGrant",
    "Command",
    "CreatedWorkspace",
    "DestroyedWorkspace",
    "Identity",
    "NewWorkspace",
    "RequestSettings",
    "RevokedGrants",
    "SandboxRules",
    "Trail",
    "WorkspaceView",
]

# What a bot gets on a workspace it asked for: everything but secrets, which a person grants.
CREATOR_PERMISSIONS = ("read", "write", "execute", "admin")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class Trail(Protocol):
    """Where the front end gathers a request's one audit event (the HTTP `Call`)."""

    def allow(self, rule: str) -> None:
        """The request passed the check named `rule`."""
        ...

    def note(self, **detail: object) -> None:
        """Fields for the event: names, never a token or a secret value."""
        ...


class _Untraced:
    """The trail of a caller that writes no event of its own (the services below still audit)."""

    def allow(self, rule: str) -> None:
        pass

    def note(self, **detail: object) -> None:
        pass


UNTRACED: Trail = _Untraced()


# -- what bots ask for --------------------------------------------------------------------------
@dataclass(frozen=True)
class NewWorkspace:
    """The `params` of a bot's request for a workspace."""

    name: str
    python: str | None = None
    node: str | None = None
    requirements: tuple[str, ...] = ()
    template: str | None = None  # the name of an installed template, never a file
    project_blob: str | None = None  # base64 of a tar.gz or zip


@dataclass(frozen=True)
class Command:
    """A command to run in a workspace's sandbox."""

    argv: tuple[str, ...]
    timeout: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    cwd: str | None = None  # relative to the workspace, or absolute inside it (None: the workspace)
    # The hosts this one command may reach (`host:port`, core.network entries), each within the
    # domains the grant allows; None: no network.
    network: tuple[str, ...] | None = None
    mcp: bool = False  # asked through MCP, whose tools ask for no network nor packages


@dataclass(frozen=True)
class ChildGrant:
    """A grant a bot mints for another bot from its own; never wider than the one it holds."""

    bot: str
    permissions: tuple[str, ...]
    zones: tuple[str, ...] | None = None  # None: every zone the parent covers
    secrets: tuple[str, ...] = ()
    ttl: str | timedelta | None = None  # a DURATION (`30m`) or a timedelta
    max_ttl: str | timedelta | None = None
    domains: tuple[str, ...] = ()  # what its commands may ask to reach; within the parent's


# -- what they get back -------------------------------------------------------------------------
@dataclass(frozen=True)
class SandboxRules:
    """The limits a bot's commands run under, as the answer to a workspace request states them:
    what really applies, so a bot plans by it."""

    allowed_commands: tuple[str, ...]  # empty unless the allowlist is on (`allowlist`)
    blocked_paths: tuple[str, ...]
    max_file_size_mb: int
    allowlist: bool = False  # sandbox.enabled: only allowed_commands run
    domains: tuple[str, ...] = ()  # what a command may ask to reach (the grant's); none: no network
    timeout_s: float = 0.0  # sandbox.timeout, the most a command may ask for
    memory: int = 0  # sandbox.memory, bytes
    cpu_seconds: int = 0  # sandbox.cpu_seconds
    pids: int = 0  # sandbox.pids
    max_output: int = 0  # api.max_output, bytes kept per stream


@dataclass(frozen=True)
class Identity:
    """Who a token stands for: a bot (identity token) or a bot through one grant, and its scope."""

    bot: str
    kind: Literal["bot", "grant"]
    accessor: str | None = None
    workspace: str | None = None
    permissions: tuple[str, ...] = ()
    zones: tuple[str, ...] | None = None
    secrets: tuple[str, ...] = ()  # names only
    expires: datetime | None = None
    domains: tuple[str, ...] = ()  # what its commands may ask to reach


@dataclass(frozen=True)
class CreatedWorkspace:
    """A workspace made for a bot, and the grant its creator holds on it (token shown once)."""

    name: str
    path: str
    venv: str | None
    grant: IssuedGrant
    sandbox: SandboxRules


@dataclass(frozen=True)
class WorkspaceView:
    """One workspace as a bot sees it, with what its grant allows there."""

    name: str
    path: str
    status: str
    type: str
    template: str | None
    created: str
    last_accessed: str
    expires: str | None
    python_venv: str | None
    permissions: tuple[str, ...] = ()
    node: str | None = None  # the Warden node that holds it


@dataclass(frozen=True)
class DestroyedWorkspace:
    name: str
    revoked: tuple[str, ...]  # accessors of the grants revoked with it


@dataclass(frozen=True)
class RevokedGrants:
    revoked: tuple[str, ...]  # the grant and every grant minted from it


@dataclass(frozen=True)
class RequestSettings:
    """The settings a bot's requests are judged by."""

    max_workspaces: int  # api.max_workspaces_per_bot
    max_timeout: float  # sandbox.timeout, seconds
    max_output: int  # api.max_output, bytes per stream
    sandbox: SandboxRules

    @classmethod
    def from_settings(cls, settings: Settings) -> RequestSettings:
        from warden.core.policy import UNIX_PROTECTED

        blocked = UNIX_PROTECTED if settings.get_bool("sandbox.block_system_paths") else ()
        allowlist = settings.get_bool("sandbox.enabled")
        commands = tuple(settings.get_list("sandbox.allowed_commands")) if allowlist else ()
        rules = SandboxRules(commands, tuple(blocked), settings.get_int("sandbox.max_file_size_mb"),
                             allowlist=allowlist, timeout_s=settings.get_seconds("sandbox.timeout"),
                             memory=settings.get_size("sandbox.memory"),
                             cpu_seconds=settings.get_int("sandbox.cpu_seconds"),
                             pids=settings.get_int("sandbox.pids"), max_output=settings.get_size("api.max_output"))
        return cls(max_workspaces=settings.get_int("api.max_workspaces_per_bot"),
                   max_timeout=settings.get_seconds("sandbox.timeout"),
                   max_output=settings.get_size("api.max_output"), sandbox=rules)


def _ordered(permissions: frozenset[str]) -> tuple[str, ...]:
    return tuple(p for p in PERMISSIONS if p in permissions)


def _duration(value: str | timedelta | None) -> timedelta | None:
    return parse_duration(value) if isinstance(value, str) else value


def _decode_blob(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("params.project_blob is not base64; send base64 of a tar.gz or zip") from None


def _check_command(command: Command, max_timeout: float) -> None:
    if command.timeout is not None and command.timeout > max_timeout:
        raise InvalidInput(f"timeout {command.timeout:g} s is over this server's limit of {max_timeout:g} s "
                           "(sandbox.timeout); ask for less")
    for name, value in command.env.items():
        if not _ENV_NAME.match(name):
            raise InvalidInput(f"bad environment variable name {name!r}: use letters, digits and '_'")
        if "\0" in value:
            raise InvalidInput(f"environment variable {name} holds a NUL byte, which cannot be passed")
    if any("\0" in arg for arg in command.argv):
        raise InvalidInput("an argument of cmd holds a NUL byte, which cannot be passed to a program")
    if not command.argv or not command.argv[0]:
        raise InvalidInput("cmd[0] is empty: name the program to run")


class BotRequestService:
    """The requests of the bot protocol, one method each, for an authenticated principal."""

    def __init__(self, *, workspaces: WorkspaceService, grants: GrantService, auth: AuthService,
                 secrets: SecretService, runs: RunService, installs: Callable[[], InstallService],
                 settings: RequestSettings, live: Callable[[], LiveSandboxService] | None = None) -> None:
        self._live = live  # background processes (services/live.py)
        self._workspaces = workspaces
        self._grants = grants
        self._auth = auth
        self._secrets = secrets
        self._runs = runs
        self._installs = installs
        self.settings = settings

    def _authorize(self, principal: Principal, workspace: str, permission: str, trail: Trail, *,
                   whole_workspace: bool = False) -> WorkspaceRecord:
        record = self._auth.authorize(principal, workspace, permission, whole_workspace=whole_workspace)
        trail.allow("grant.allow")
        return record

    # -- who am I --------------------------------------------------------------------------
    def whoami(self, principal: Principal, *, trail: Trail = UNTRACED) -> Identity:
        """Who the principal is and, for a grant, what it allows (its scope over the whole chain)."""
        trail.allow("token.valid")
        if not principal.chain:
            return Identity(bot=principal.bot, kind="bot")
        scope = effective(principal.chain)
        return Identity(bot=principal.bot, kind="grant", accessor=principal.accessor,
                        workspace=principal.chain[0].workspace, permissions=_ordered(scope.permissions),
                        zones=scope.zones, secrets=scope.secrets, expires=scope.expires, domains=scope.domains)

    def acting_on(self, principal: Principal, workspace: str) -> Principal:
        """Who acts on `workspace` for this principal: a grant token is itself; a bot's identity
        token acts through a root grant of the bot's there (one a person issued, or the bot's own
        from making the workspace) — never a child grant, whose token another bot minted and
        holds. With several, the one that covers all the others (permissions and zones), the
        latest to expire among equals; none covering the rest is refused: use a grant token.

        Read again at every call, so a grant revoked or expired meanwhile stops working at once;
        with none, the uniform Denied (rule `grant.none`)."""
        if principal.chain:
            return principal
        from warden.services.auth import Principal as Acting

        chains = [tuple(self._grants.chain(held.accessor))
                  for held in self._grants.grants_of_bot(principal.bot, workspace=workspace)
                  if held.parent is None]
        chains = [chain for chain in chains if chain]
        if not chains:
            raise Denied(DENIED, rule="grant.none")

        def covers(wide: tuple[Grant, ...], narrow: tuple[Grant, ...]) -> bool:
            a, b = effective(wide), effective(narrow)
            if not b.permissions <= a.permissions:
                return False
            # Its secrets and domains too: a bot holding one grant with `admin` and another with a
            # secret acted through the first, and its commands found the secret's variable empty.
            if not set(b.secrets) <= set(a.secrets) or uncovered(b.domains, a.domains):
                return False
            if a.zones is None:
                return True
            return b.zones is not None and set(b.zones) <= set(a.zones)

        widest = [c for c in chains if all(covers(c, other) for other in chains)]
        if not widest:
            raise Denied(f"bot {principal.bot} holds several grants on {workspace}, none covering the others; "
                         "use the token of the one meant", rule="grant.ambiguous")
        return Acting(bot=principal.bot, kind="grant", chain=max(widest, key=lambda c: effective(c).expires))

    # -- workspaces ------------------------------------------------------------------------
    def create_workspace(self, principal: Principal, wish: NewWorkspace, *, bot: str | None = None,
                         trail: Trail = UNTRACED) -> CreatedWorkspace:
        """Make the workspace a bot asked for, with its requirements, and grant the bot on it.

        Only a bot's identity token asks for workspaces, and `bot`, when the request names one,
        must be the token's. All or nothing: a workspace whose requirements or grant failed is
        destroyed again before the error goes on.
        """
        if principal.kind != "bot":
            # The token authenticated (a live grant's), so saying what it is tells its holder
            # nothing new, as MCP's text for this rule does; a bare "permission denied" sent a
            # newcomer following the SDK's create_workspace with the README's grant token nowhere.
            raise Denied(f"{DENIED}: a grant's token acts on its one workspace (the SDK's Client(url, token)"
                         ".workspace(NAME)) and cannot ask for a new one; that takes the bot's identity token "
                         "(`warden bot register NAME` printed it)", rule="token.not_identity")
        if bot is not None and principal.bot != bot:
            raise Denied(DENIED, rule="token.bot_mismatch")
        trail.allow("bot.identity")
        if wish.requirements:
            check_packages(wish.requirements, node=False)  # refused before anything is made
        record = self._make(wish, principal.actor)
        try:
            if wish.requirements:
                # The request's `requirements`: installed in the sandbox, recorded in pyproject.toml.
                self._installs().install(record.name, wish.requirements, actor=principal.actor)
                record = self._workspaces.get(record.name)
            issued = self._grants.grant(record.name, principal.bot, CREATOR_PERMISSIONS, actor=principal.actor)
        except BaseException:
            self._workspaces.destroy(record.name, actor=principal.actor, archive=False)
            raise
        trail.note(accessor=issued.grant.accessor, template=wish.template)
        venv = record.meta.get("python_venv")
        rules = dataclasses.replace(self.settings.sandbox, domains=issued.grant.domains)
        return CreatedWorkspace(name=record.name, path=record.path, venv=venv if isinstance(venv, str) else None,
                                grant=issued, sandbox=rules)

    def _make(self, wish: NewWorkspace, actor: str) -> WorkspaceRecord:
        """The workspace itself (type `bot`), once the template, the bot's count and the blob pass."""
        if wish.template is not None and TemplateCatalog.is_file_ref(wish.template):
            # A bot names a template; it never names a file. A path would let a bot point Warden at
            # a YAML file it wrote in its own workspace, and layers are built on the host.
            raise InvalidInput("params.template must be the name of an installed template "
                               "(`warden template list`), not a file path")
        owned = sum(1 for w in self._workspaces.list() if w.created_by == actor)
        if owned >= self.settings.max_workspaces:
            # Each workspace costs disk and maybe a layer build: a bot's identity token alone must
            # not be able to fill the machine. Refused here before a layer is built; the count
            # that holds is the one the create makes as it claims the name (two at once).
            raise Conflict(f"this bot already has {owned} workspaces, the most it may "
                           "(api.max_workspaces_per_bot); delete one first")
        blob = _decode_blob(wish.project_blob) if wish.project_blob else None
        try:
            return self._workspaces.create(wish.name, kind="bot", actor=actor, template=wish.template,
                                           python=wish.python, node=wish.node, blob=blob,
                                           most=self.settings.max_workspaces)
        except Conflict as exc:
            if exc.rule != "workspace.exists":
                raise
            # The person's hint (`warden destroy`) is no command a bot has: say what it can do. A
            # bot that restarted may be asking again for one it made: its grant token came then.
            raise Conflict(f"workspace {wish.name!r} already exists; pick another name (GET /v1/workspaces "
                           "lists those you hold a grant on; the grant token of one you made came in the "
                           "answer that created it, else a person grants you one)", rule=exc.rule) from None

    def list_workspaces(self, principal: Principal, *, trail: Trail = UNTRACED) -> tuple[WorkspaceView, ...]:
        """The workspaces the principal holds a live grant on (a grant token: its one workspace)."""
        trail.allow("token.valid")
        names = ([principal.chain[0].workspace] if principal.chain else
                 sorted({g.workspace for g in self._grants.grants_of_bot(principal.bot)}))
        listed = []
        for name in names:
            try:
                # Another node's workspace is listed too (its node, `unreachable` while it is
                # down); authorizing it is that node's, when a request for it is forwarded there.
                record = self._workspaces.get(name, anywhere=True)
                if principal.chain and self._workspaces.here(record):
                    listed.append(self._view(self._auth.authorize(principal, name, "read"), principal))
                else:
                    listed.append(self._view(record, principal if principal.chain else None))
            except (Denied, Unavailable):
                continue
            except Exception:  # noqa: S112 (a workspace that vanished mid-listing is skipped)
                continue
        return tuple(listed)

    def get_workspace(self, principal: Principal, name: str, *, trail: Trail = UNTRACED) -> WorkspaceView:
        """One workspace (needs `read`)."""
        return self._view(self._authorize(principal, name, "read", trail), principal)

    @staticmethod
    def _view(record: WorkspaceRecord, principal: Principal | None) -> WorkspaceView:
        venv = record.meta.get("python_venv")
        permissions: tuple[str, ...] = ()
        if principal is not None and principal.chain:
            permissions = _ordered(effective(principal.chain).permissions)
        return WorkspaceView(name=record.name, path=record.path, status=record.status, type=record.type,
                             template=record.template, created=record.created_at,
                             last_accessed=record.last_accessed, expires=record.expires_at,
                             python_venv=venv if isinstance(venv, str) else None, permissions=permissions,
                             node=record.node)

    def delete_workspace(self, principal: Principal, name: str, *, trail: Trail = UNTRACED) -> DestroyedWorkspace:
        """Revoke every grant on the workspace, then destroy it (archived first; needs `admin`)."""
        self._authorize(principal, name, "admin", trail)
        revoked = self._grants.revoke_workspace(name, actor=principal.actor)
        self._workspaces.destroy(name, actor=principal.actor)
        return DestroyedWorkspace(name=name, revoked=tuple(revoked))

    # -- exec ------------------------------------------------------------------------------
    def exec(self, principal: Principal, name: str, command: Command, *, trail: Trail = UNTRACED,
             admit: Callable[[str], AbstractContextManager[object]] | None = None,
             output: RunOutput | None = None, terminal: int | None = None,
             ended: Callable[[Tx], None] | None = None) -> RunResult:
        """Run `command` in the workspace's sandbox (needs `execute` on the whole workspace).

        The secrets the grant names join the environment, over the request's variables of the
        same name. `admit(bot)` holds the front end's slot for the run, if it bounds them; the bot
        is the principal's minter, so minting grants for others wins a bot no extra slots.
        Without `command.network` the command has no network, whatever network.enabled says;
        with it, exactly those hosts, each within the grant's domains (Denied otherwise).
        `output`: where the output goes as it comes (a streamed exec), instead of the result;
        `terminal`: the slave of a pseudo-terminal the front end relays (a PTY), stdin ignored.
        `ended(tx)`: the front end's own writes (its call's event) in the transaction that records
        the outcome of a command that ran, the trail's exit_code and timed_out noted first.
        """
        record = self._authorize(principal, name, "execute", trail, whole_workspace=True)
        _check_command(command, self.settings.max_timeout)
        reach = self._reach(principal, command.network, trail) if command.network is not None else ()
        injection = self._secrets.environment(self._auth.secret_names(principal))
        env = {**command.env, **injection.env}
        # Names only: values (the bot's and the secrets) never reach the audit log. `bot` presents
        # the token, `minted_by` holds its chain's root.
        trail.note(bot=principal.bot, minted_by=principal.minter, program=command.argv[0],
                   argc=len(command.argv), env_names=sorted(command.env), secret_names=sorted(injection.env),
                   missing_secrets=list(injection.missing))
        if command.cwd is not None:
            trail.note(cwd=command.cwd)

        def outcome(tx: Tx, result: RunResult) -> None:
            trail.note(exit_code=result.exit_code, timed_out=result.timed_out)
            if ended is not None:
                ended(tx)

        with (admit or nullcontext)(principal.minter):
            result = self._runs.run(record.name, list(command.argv), timeout=command.timeout, env=env,
                                    stdin=command.stdin.encode("utf-8") if command.stdin is not None else None,
                                    actor=principal.actor, max_output=self.settings.max_output, cwd=command.cwd,
                                    net="allow" if reach else "none", allow_domains=reach,
                                    grant_domains=effective(principal.chain).domains, output=output, terminal=terminal,
                                    on_end=outcome, mcp=command.mcp, read=record)
        trail.note(exit_code=result.exit_code, timed_out=result.timed_out)
        return result

    @staticmethod
    def _reach(principal: Principal, wanted: tuple[str, ...], trail: Trail) -> tuple[str, ...]:
        """The hosts one command asks to reach, when the grant's domains cover each of them."""
        if not wanted:
            raise InvalidInput('network.allow is empty: name the hosts the command needs, e.g. '
                               '{"allow": ["pypi.org:443"]}, or leave "network" out for none')
        asked = tuple(dict.fromkeys(parse_rule(w).text for w in wanted))  # InvalidInput names a bad one
        granted = effective(principal.chain).domains
        trail.note(network=list(asked))
        beyond = uncovered(asked, granted)
        if beyond:
            has = f"it allows {', '.join(granted)}" if granted else "it allows no network"
            # `pypi.org` asks for every port: under a grant of `pypi.org:443` the bot's own fix is to
            # name the port, not to have a person widen the grant.
            instead = [ported(b, granted) for b in beyond]
            if all(instead):
                raise Denied(f"the grant does not allow network to {', '.join(beyond)} on every port ({has}): "
                             f"ask for {', '.join(p for ports in instead for p in ports)}, with the port",
                             rule="grant.network")
            raise Denied(f"the grant does not allow network to {', '.join(beyond)} ({has}); a person adds "
                         "domains with `warden grant WORKSPACE BOT --allow-domain DOMAIN`", rule="grant.network")
        return asked

    # -- install ---------------------------------------------------------------------------
    def install(self, principal: Principal, name: str, packages: Sequence[str], *, node: bool = False,
                trail: Trail = UNTRACED,
                admit: Callable[[str], AbstractContextManager[object]] | None = None) -> InstallResult:
        """Add Python (or, `node`, npm) packages to the workspace (needs `write` and `execute` on
        the whole workspace: the installer writes .venv, node_modules and the manifest at its root,
        and a package's build step is code run in the sandbox). The installer reaches only the
        package indexes the person configured (envs.install_domains), whatever the grant's domains;
        `warden install` does the same. The service audits it (`workspace.install`)."""
        self._authorize(principal, name, "write", trail, whole_workspace=True)
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        checked = check_packages(packages, node=node)  # refused before anything runs
        if any(spec.startswith("file:") for spec in checked):
            # A tarball path names a file of the host, whose folder the installer would mount: a
            # person's `warden install` may, a bot never names host files.
            raise InvalidInput("name npm packages from the registry (name or name@range); a bot cannot "
                               "install from a file path")
        trail.note(bot=principal.bot, minted_by=principal.minter, packages=checked, node=node)
        with (admit or nullcontext)(principal.minter):
            result = self._installs().install(name, checked, node=node, actor=principal.actor)
        trail.note(recorded_in=result.recorded_in)
        return result

    # -- grants ----------------------------------------------------------------------------
    def create_grant(self, principal: Principal, name: str, child: ChildGrant, *,
                     trail: Trail = UNTRACED) -> IssuedGrant:
        """Mint a child grant for another bot (needs `admin`), clamped to the principal's own.

        It is minted for any well-formed bot name, registered or not, with the same answer
        (GrantService.grant says why); its commands count against the principal's minter.
        """
        self._authorize(principal, name, "admin", trail)
        issued = self._grants.grant(name, child.bot, list(child.permissions), zones=child.zones,
                                    secrets=list(child.secrets), ttl=_duration(child.ttl),
                                    max_ttl=_duration(child.max_ttl), actor=principal.actor,
                                    parent=list(principal.chain), domains=child.domains)
        trail.note(accessor=issued.grant.accessor, bot=child.bot)
        return issued

    def revoke_grant(self, principal: Principal, name: str, accessor: str, *,
                     trail: Trail = UNTRACED) -> RevokedGrants:
        """Revoke the principal's own grant or one minted from it at any depth (needs `admin`)."""
        self._authorize(principal, name, "admin", trail)
        trail.note(accessor=accessor)
        assert principal.accessor is not None  # authorize let only a grant through
        if not self._grants.is_descendant(accessor, principal.accessor):
            raise Denied(DENIED, rule="grant.not_descendant")
        return RevokedGrants(tuple(self._grants.revoke(name, accessor=accessor, actor=principal.actor)))

    # -- background processes --------------------------------------------------------------
    # A bot starts them with `"background": true` and sees, follows and kills only its own: those
    # its principal (its grant) started. Another principal's process is "not found", like one
    # that does not exist. Each needs `execute` on the whole workspace, as exec does.
    def _processes(self) -> LiveSandboxService:
        if self._live is None:
            raise Unavailable("this server runs no live sandboxes, so no background processes")
        return self._live()

    def start(self, principal: Principal, name: str, command: Command, *, trail: Trail = UNTRACED,
              busy: Busy | None = None) -> ProcessView:
        """Start `command` in the background in the principal's live sandbox (needs `execute`).

        As exec: the grant's secrets join the environment, the network is the command's own within
        the grant's domains. It takes one of the minter's exec slots while it runs (api.max_execs,
        api.max_execs_per_bot, counted in the registry over every server worker); `busy(bot)`
        gives the front end's foreground commands, counted with it (none admitted meanwhile)."""
        record = self._authorize(principal, name, "execute", trail, whole_workspace=True)
        _check_command(command, self.settings.max_timeout)
        if command.stdin is not None:
            raise InvalidInput("a background process reads no stdin: leave `stdin` out, or run it in the foreground")
        reach = self._reach(principal, command.network, trail) if command.network is not None else ()
        injection = self._secrets.environment(self._auth.secret_names(principal))
        trail.note(bot=principal.bot, minted_by=principal.minter, program=command.argv[0], argc=len(command.argv),
                   env_names=sorted(command.env), secret_names=sorted(injection.env), background=True)
        from warden.services.runs import RunRequest

        self._processes()  # refused before anything is judged, when there are none here
        request = RunRequest(record.name, tuple(command.argv), timeout=command.timeout,
                             env={**command.env, **injection.env}, actor=principal.actor, cwd=command.cwd,
                             net="allow" if reach else "none", allow_domains=reach,
                             grant_domains=effective(principal.chain).domains)
        view = self._runs.start(request, bot=principal.minter, busy=busy)
        trail.note(process=view.id)
        return view

    def processes(self, principal: Principal, name: str, *, trail: Trail = UNTRACED) -> tuple[ProcessView, ...]:
        """The principal's background processes in the workspace (needs `execute`)."""
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        return self._processes().list(name, principal=principal.actor)

    def process(self, principal: Principal, name: str, process_id: str, *, trail: Trail = UNTRACED) -> ProcessView:
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        process_id = self._processes().resolve(name, process_id, principal=principal.actor)
        trail.note(process=process_id)
        return self._processes().get(name, process_id, principal=principal.actor)

    def process_logs(self, principal: Principal, name: str, process_id: str, *,
                     trail: Trail = UNTRACED) -> tuple[str, Logs]:
        """The whole id of the process `process_id` begins (services/live.py `resolve`), and its output."""
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        process_id = self._processes().resolve(name, process_id, principal=principal.actor)
        trail.note(process=process_id)
        return process_id, self._processes().logs(name, process_id, principal=principal.actor)

    def follow_process(self, principal: Principal, name: str, process_id: str, *,
                       trail: Trail = UNTRACED) -> Iterator[Chunk | None]:
        """The process's output as it comes (services/live.py `follow`); checked before it starts."""
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        process_id = self._processes().resolve(name, process_id, principal=principal.actor)
        trail.note(process=process_id)
        live = self._processes()
        live.get(name, process_id, principal=principal.actor)  # NotFound now, not mid-stream
        return live.follow(name, process_id, principal=principal.actor)

    def wait_process(self, principal: Principal, name: str, process_id: str, timeout: float, *,
                     trail: Trail = UNTRACED) -> ProcessView:
        """The process once it has ended, or as it is after `timeout` seconds (a long poll: the
        caller asks again while it runs)."""
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        process_id = self._processes().resolve(name, process_id, principal=principal.actor)
        trail.note(process=process_id)
        live = self._processes()
        try:
            return live.wait(name, process_id, timeout, principal=principal.actor)
        except TimedOut:
            return live.get(name, process_id, principal=principal.actor)

    def kill_process(self, principal: Principal, name: str, process_id: str, sig: int, *,
                     trail: Trail = UNTRACED) -> ProcessView:
        self._authorize(principal, name, "execute", trail, whole_workspace=True)
        process_id = self._processes().resolve(name, process_id, principal=principal.actor)
        trail.note(process=process_id, signal=sig)
        return self._processes().kill(name, process_id, sig, principal=principal.actor, actor=principal.actor)

