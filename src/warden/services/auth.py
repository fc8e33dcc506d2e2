"""Authenticate a token into a principal and authorize it for one operation.

Every failure — an unknown, malformed, expired or revoked token, a grant for another
workspace, a missing permission — raises the same `Denied("permission denied")`, so a caller
learns nothing about which tokens exist. The rule that decided travels on the exception
(`exc.rule`) for the audit log only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from warden.core.errors import Denied, NotFound
from warden.core.grants import PERMISSIONS, Grant, alive, decide, effective, zone_entry
from warden.core.workspaces import WorkspaceRecord
from warden.core.zones import Zone, ZoneRequest, restrict
from warden.services.grants import GrantService
from warden.services.workspaces import WorkspaceService

if TYPE_CHECKING:
    from warden.services.audit import AuditLog
    from warden.services.secrets import SecretService

__all__ = ["DENIED", "AuthDenied", "AuthService", "Principal", "zone_scope_of"]

DENIED = "permission denied"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a bot by its identity token, or a bot through one grant."""

    bot: str
    kind: Literal["bot", "grant"]
    chain: tuple[Grant, ...] = ()

    @property
    def accessor(self) -> str | None:
        return self.chain[0].accessor if self.chain else None

    @property
    def grant(self) -> Grant | None:
        return self.chain[0] if self.chain else None

    @property
    def minter(self) -> str:
        """The bot answerable for this caller's use: whoever holds the root of its grant chain.

        A child grant's chain ends at the grant a person issued (or a bot's grant on a workspace
        it created itself); the bot holding that root minted every grant below it, whoever they
        name, so per-bot bounds and the audit count the minter. For a root grant or an identity
        token it is the bot itself.
        """
        return self.chain[-1].bot if self.chain else self.bot

    @property
    def actor(self) -> str:
        """How the audit log names this caller: the bot and the accessor, never the token."""
        return f"bot:{self.bot}" + (f"@{self.accessor}" if self.accessor else "")


class AuthDenied(Denied):
    """The uniform refusal; `actor` names the bot and accessor when the token was known. `why`:
    which of the caller's own grant's limits applied, said when the caller's grant is live and
    for this very workspace (it learns nothing of other tokens, only what GET /v1/whoami tells it)."""

    def __init__(self, rule: str, actor: str | None = None, why: str | None = None) -> None:
        super().__init__(f"{DENIED}: {why}" if why else DENIED, rule=rule)
        self.actor = actor


def _deny(rule: str, actor: str | None = None) -> AuthDenied:
    return AuthDenied(rule, actor)


def _short_of(principal: Principal, workspace: str, permission: str, rule: str, whole_workspace: bool) -> str:
    """What the caller's own grant lacks for this call, and who can change it."""
    ask = f"a person widens it with `warden grant {workspace} {principal.bot} --permissions ...`"
    if rule == "grant.permission":
        return f"this token's grant on workspace {workspace} does not include `{permission}`; {ask}"
    if whole_workspace:
        return (f"this token's grant on workspace {workspace} is limited to some of its zones, and this "
                f"needs the whole workspace; {ask}")
    return f"this token's grant on workspace {workspace} does not cover that zone; {ask}"


def zone_scope_of(principal: Principal,
                  zones: Mapping[str, Zone] | Callable[[], Mapping[str, Zone]]) -> dict[str, Zone] | None:
    """The zones a principal's file operations are limited to (None: the whole workspace).

    `zones` are the workspace's configured zones (or a function that reads them, called only
    when the grant is limited to zones); a grant names some of them and gets exactly those,
    with their modes and approvals (core.zones.restrict).
    """
    if not principal.chain:
        return {}
    entries = effective(principal.chain).zones
    if entries is None:
        return None
    configured = zones() if callable(zones) else zones
    wanted = [zone_entry(entry) for entry in entries]
    try:
        return restrict(configured, [ZoneRequest(name, mode) for name, mode in wanted])  # type: ignore[arg-type]
    except Denied as exc:
        raise _deny(exc.rule or "grant.zone") from None


class AuthService:
    def __init__(self, grants: GrantService, workspaces: WorkspaceService, clock: Callable[[], datetime], *,
                 audit: AuditLog | None = None, secrets: Callable[[], SecretService] | None = None) -> None:
        self._grants = grants
        self._workspaces = workspaces
        self._clock = clock
        self._audit = audit
        self._secrets = secrets  # built on first use: only a run as a token decrypts secrets

    def authenticate(self, token: str | None) -> Principal:
        """The principal a token stands for; Denied for anything that is not a live token."""
        if not token:
            raise _deny("token.missing")
        bot, chain = self._grants.resolve(token)
        if bot is not None:
            return Principal(bot=bot.name, kind="bot")
        if not chain:
            raise _deny("token.unknown")
        principal = Principal(bot=chain[0].bot, kind="grant", chain=tuple(chain))
        life = alive(chain, self._clock())
        if not life.allowed:
            raise _deny(life.rule, principal.actor)
        return principal

    def authorize(self, principal: Principal, workspace: str, permission: str, *,
                  zone: str | None = None, whole_workspace: bool = False) -> WorkspaceRecord:
        """The workspace, when `principal` may use `permission` on it (in `zone`); Denied otherwise."""
        if principal.kind != "grant" or not principal.chain:
            raise _deny("token.identity")  # an identity token only asks for workspaces
        if principal.chain[0].workspace != workspace:
            raise _deny("grant.workspace")
        try:
            record = self._workspaces.get(workspace)
        except NotFound:
            raise _deny("workspace.gone") from None
        decision = decide(principal.chain, self._clock(), workspace_id=record.id, permission=permission,
                          zone=zone, whole_workspace=whole_workspace)
        if not decision.allowed:
            # A live grant of this very workspace short of what the call needs: a bare "permission
            # denied" (as a wrong token gets) left a bot with a reader's grant guessing why.
            own = decision.rule in ("grant.permission", "grant.zone") and permission in PERMISSIONS
            raise AuthDenied(decision.rule, why=_short_of(principal, workspace, permission, decision.rule,
                                                          whole_workspace) if own else None)
        return record

    def zone_scope(self, principal: Principal,
                   zones: Mapping[str, Zone] | Callable[[], Mapping[str, Zone]]) -> dict[str, Zone] | None:
        """The zones a principal's file operations are limited to (None: the whole workspace)."""
        return zone_scope_of(principal, zones)

    def secret_names(self, principal: Principal) -> tuple[str, ...]:
        """The secrets a principal's runs get (none without the `secrets` permission)."""
        if not principal.chain:
            return ()
        return effective(principal.chain).secrets

    def run_as_token(self, token: str | None, workspace: str) -> tuple[str, dict[str, str], tuple[str, ...]]:
        """`warden run --as-token-env`: the actor, secret environment and network (the domains
        its `--allow-domain` may name) of a grant token's run.

        The token must hold `execute` on `workspace` (whole, not zone-limited); the secrets its
        grant names are decrypted for the run's environment. A refusal is audited and answered
        with the same "permission denied" as the API gives.
        """
        assert self._audit is not None and self._secrets is not None, "wired in bootstrap"
        audit = self._audit
        principal: Principal | None = None
        try:
            principal = self.authenticate(token)
            self.authorize(principal, workspace, "execute", whole_workspace=True)
        except Denied as exc:
            actor = principal.actor if principal else getattr(exc, "actor", None) or "anonymous"
            audit.record(actor=actor, action="run.as_token", target=workspace, decision="deny",
                         rule=exc.rule or "denied", result="denied")
            raise
        injection = self._secrets().environment(self.secret_names(principal))
        audit.record(actor=principal.actor, action="run.as_token", target=workspace, decision="allow",
                     rule="grant.allow", detail={"secret_names": sorted(injection.env),
                                                 "missing_secrets": list(injection.missing)})
        return principal.actor, injection.env, tuple(effective(principal.chain).domains)
