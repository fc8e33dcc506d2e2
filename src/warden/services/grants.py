"""Bots and grants: register identities, mint, list and revoke grants, resolve tokens.

Tokens are made here from the injected randomness, shown once to the caller, and stored only
as their HMAC under the keystore's pepper. Revoking a grant revokes every grant minted from
it, in the same transaction, and `decide` checks the whole chain again at every use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from warden.core.errors import Denied, InvalidInput, NotFound
from warden.core.grants import BotRow, Grant, alive, check_bot_name, parse_permissions, plan_grant, zone_names
from warden.core.ports import Clock, Keys, Registry, Tx
from warden.core.tokens import (
    ACCESSOR_BYTES,
    TOKEN_BYTES,
    hash_token,
    looks_like_token,
    make_accessor,
    make_token,
    same_hash,
)
from warden.core.workspaces import check_name
from warden.core.zones import Zone
from warden.services.audit import AuditLog

if TYPE_CHECKING:
    from warden.core.workspaces import WorkspaceRecord
    from warden.services.workspaces import WorkspaceService

DENIED_GRANT = "permission denied"  # as every grant refusal reads (services/auth.py)

__all__ = ["GrantService", "IssuedBot", "IssuedGrant", "chain_of"]

# How deep a chain of child grants may go; bounds the walk done at every request.
MAX_DEPTH = 8


@dataclass(frozen=True)
class IssuedBot:
    """A newly registered bot and its identity token (shown once, never stored)."""

    bot: BotRow
    token: str

    def to_json(self) -> dict[str, object]:
        return {**self.bot.to_json(), "token": self.token}


@dataclass(frozen=True)
class IssuedGrant:
    """A newly minted grant and its token (shown once, never stored)."""

    grant: Grant
    token: str

    def to_json(self) -> dict[str, object]:
        return {"token": self.token, "accessor": self.grant.accessor,
                "expires": self.grant.expires.isoformat(), **{
                    k: v for k, v in self.grant.to_json().items() if k not in {"accessor", "expires"}}}


class GrantService:
    def __init__(self, registry: Registry, audit: AuditLog, keys: Keys, workspaces: WorkspaceService,
                 clock: Clock, *, default_ttl: timedelta, max_ttl: timedelta,
                 random: Callable[[int], bytes] = os.urandom,
                 zones_of: Callable[[WorkspaceRecord], Mapping[str, Zone]] | None = None,
                 on_revoke: Callable[[list[str], str], object] | None = None) -> None:
        self._registry = registry
        self._audit = audit
        self._keys = keys
        self._workspaces = workspaces
        self._clock = clock
        self._random = random
        self.default_ttl = default_ttl
        self.max_ttl = max_ttl
        # The workspace's configured zones, to refuse a grant naming one it does not have.
        self._zones_of = zones_of
        # Told the accessors revoked (and by whom) once the revocation is committed: the live
        # sandboxes of those grants are stopped at once (services/live.py).
        self._on_revoke = on_revoke

    def _revoked(self, accessors: list[str], actor: str) -> list[str]:
        if accessors and self._on_revoke is not None:
            self._on_revoke(accessors, actor)
        return accessors

    def _hash(self, token: str) -> str:
        return hash_token(token, self._keys.pepper())

    def _new_token(self) -> tuple[str, str]:
        token = make_token(self._random(TOKEN_BYTES))
        return token, self._hash(token)

    # -- bots --------------------------------------------------------------------------------
    def register_bot(self, name: str, *, actor: str = "user") -> IssuedBot:
        """Register a bot and return its identity token (the only time it is seen)."""
        check_bot_name(name)
        token, digest = self._new_token()
        bot = BotRow(id="bot_" + self._random(8).hex(), name=name,
                          created_at=self._clock().isoformat(), created_by=actor)
        with self._registry.transaction() as tx:
            tx.bots.insert(bot, digest)
            self._audit.record(actor=actor, action="bot.register", target=f"bot:{name}",
                               detail={"bot_id": bot.id}, tx=tx)
        return IssuedBot(bot, token)

    def list_bots(self) -> list[BotRow]:
        with self._registry.transaction(write=False) as tx:
            return tx.bots.list_all()

    def remove_bot(self, name: str, *, actor: str = "user") -> list[str]:
        """Forget the bot's identity and revoke every grant it holds (and their children)."""
        check_bot_name(name)
        now = self._clock()
        with self._registry.transaction() as tx:
            known = tx.bots.by_name(name)
            held = [g.accessor for g in tx.grants.of_bot(name)]
            if known is None and not held:
                raise NotFound(f"no bot named {name!r}: `warden bot list` shows the bots")
            revoked = self._revoke_tree(tx, held, now)
            tx.bots.delete(name)
            self._audit.record(actor=actor, action="bot.remove", target=f"bot:{name}",
                               detail={"revoked": revoked}, tx=tx)
        return self._revoked(revoked, actor)

    # -- grants ------------------------------------------------------------------------------
    def grant(self, workspace: str, bot: str, permissions: str | Iterable[str], *,
              zones: Sequence[str] | None = None, secrets: Sequence[str] = (),
              ttl: timedelta | None = None, max_ttl: timedelta | None = None,
              actor: str = "user", parent: Sequence[Grant] | None = None,
              domains: Sequence[str] = ()) -> IssuedGrant:
        """Mint a grant for `bot` on `workspace`; with `parent` (its chain) it is a clamped child.
        `domains`: what its commands may ask to reach, one command at a time (none: no network).

        A grant without a parent (the person's `warden grant`, or a bot's own grant on a
        workspace it created) needs a registered bot: NotFound "no bot named …" otherwise, a
        typo caught by the person, who owns the registry. A child grant is minted for any
        well-formed name, registered or not, with the same answer: its minter is a bot holding
        an `admin` grant, and a different answer for a name nobody registered would let it list
        the registry one guess at a time. Such a grant is no wider than its parent, is revoked
        with it, counts against its minter (Principal.minter) and says in the audit whether its
        bot was registered; it reaches a bot only if one is registered under that name.
        """
        check_name(workspace)
        check_bot_name(bot)
        wanted = parse_permissions(permissions)
        record = self._workspaces.get(workspace)
        if parent is not None and len(parent) >= MAX_DEPTH:
            raise InvalidInput(f"grants may nest at most {MAX_DEPTH} deep; mint this one from a grant nearer the root")
        now = self._clock()
        plan = plan_grant(now, wanted, zones=zones, secrets=secrets, ttl=ttl, max_ttl=max_ttl,
                          default_ttl=self.default_ttl, ceiling=self.max_ttl, parent=parent,
                          domains=domains)
        if plan.zones is not None and self._zones_of is not None:
            known = self._zones_of(record)
            unknown = sorted(zone_names(plan.zones) - set(known))
            if unknown:
                raise InvalidInput(f"workspace {workspace!r} has no zone {', '.join(unknown)}; "
                                   f"its zones: {', '.join(sorted(known)) or 'none'}")
            wider = sorted(e.partition(":")[0] for e in plan.zones
                           if e.endswith(":rw") and known[e.partition(":")[0]].mode == "ro")
            if wider:  # refused now, not at every use (the whole grant would be unusable)
                raise InvalidInput(f"zone {', '.join(wider)} of workspace {workspace!r} is read-only; "
                                   "a grant cannot make it rw")
        token, digest = self._new_token()
        grant = Grant(accessor=make_accessor(self._random(ACCESSOR_BYTES)), workspace=workspace,
                      workspace_id=record.id, bot=bot, permissions=plan.permissions, zones=plan.zones,
                      secrets=plan.secrets, created=now, expires=plan.expires, max_expires=plan.max_expires,
                      parent=parent[0].accessor if parent else None, created_by=actor,
                      domains=plan.domains)
        with self._registry.transaction() as tx:
            # Looked up for a child grant too, so both answers take the same time.
            registered = tx.bots.by_name(bot) is not None
            if not registered and not parent:
                raise NotFound(f"no bot named {bot!r} is registered: register it first with "
                               f"`warden bot register {bot}`")
            missing = sorted(set(plan.secrets) - set(tx.secrets.names()))
            if missing:
                raise NotFound(f"no secret named {', '.join(missing)}: set it first with "
                               f"`warden secret set {missing[0]}`")
            if parent:
                # The parent as it is now, in this transaction: revoked since the request was
                # authenticated, its child would be born under a dead grant (and outlive its purge).
                life = alive(chain_of(tx, parent[0].accessor), now)
                if not life.allowed:
                    raise Denied(DENIED_GRANT, rule=life.rule)
            tx.grants.insert(grant, digest)
            self._audit.record(actor=actor, action="grant.create", target=workspace, decision="allow",
                               rule="grant.child" if parent else "grant.issue",
                               detail={"accessor": grant.accessor, "bot": bot, "bot_registered": registered,
                                       "parent": grant.parent,
                                       "permissions": sorted(plan.permissions),
                                       "zones": list(plan.zones) if plan.zones is not None else None,
                                       "secret_names": list(plan.secrets),
                                       "domains": list(plan.domains),
                                       "expires": plan.expires.isoformat()}, tx=tx)
        return IssuedGrant(grant, token)

    def list_grants(self, workspace: str) -> list[Grant]:
        """Every grant of `workspace`, revoked ones included (tokens never appear)."""
        check_name(workspace)
        with self._registry.transaction(write=False) as tx:
            return tx.grants.of_workspace(workspace)

    def get(self, accessor: str) -> Grant:
        with self._registry.transaction(write=False) as tx:
            grant = tx.grants.by_accessor(accessor)
        if grant is None:
            raise NotFound(f"no grant with accessor {accessor!r}: `warden grants NAME` lists them")
        return grant

    def revoke(self, workspace: str, *, bot: str | None = None, accessor: str | None = None,
               actor: str = "user") -> list[str]:
        """Revoke a bot's grants on `workspace`, or one grant by accessor; children go too."""
        check_name(workspace)
        if (bot is None) == (accessor is None):
            raise InvalidInput("revoke needs a BOT or --accessor ID (one of them)")
        now = self._clock()
        with self._registry.transaction() as tx:
            if accessor is not None:
                grant = tx.grants.by_accessor(accessor)
                if grant is None or grant.workspace != workspace:
                    raise NotFound(f"no grant {accessor!r} on workspace {workspace!r}: "
                                   f"`warden grants {workspace}` lists them")
                roots = [accessor]
            else:
                assert bot is not None
                check_bot_name(bot)
                roots = [g.accessor for g in tx.grants.of_bot(bot, workspace=workspace)]
                if not roots:
                    raise NotFound(f"bot {bot!r} holds no live grant on {workspace!r}: "
                                   f"`warden grants {workspace}` lists them")
            revoked = self._revoke_tree(tx, roots, now)
            self._audit.record(actor=actor, action="grant.revoke", target=workspace, decision="none",
                               detail={"accessor": accessor, "bot": bot, "revoked": revoked}, tx=tx)
        return self._revoked(revoked, actor)

    def revoke_workspace(self, workspace: str, *, actor: str = "user") -> list[str]:
        """Revoke every grant of a workspace (when it is destroyed)."""
        now = self._clock()
        with self._registry.transaction() as tx:
            roots = [g.accessor for g in tx.grants.of_workspace(workspace, live_only=True)]
            revoked = self._revoke_tree(tx, roots, now)
            if revoked:
                self._audit.record(actor=actor, action="grant.revoke", target=workspace,
                                   detail={"revoked": revoked, "reason": "workspace destroyed"}, tx=tx)
        return self._revoked(revoked, actor)

    def _revoke_tree(self, tx: Tx, roots: list[str], at: datetime) -> list[str]:
        everything = list(dict.fromkeys(roots + tx.grants.descendants(roots)))
        tx.grants.revoke(everything, at)
        return everything

    def is_descendant(self, accessor: str, ancestor: str) -> bool:
        """True when `accessor` was minted (at any depth) from `ancestor`, or is it."""
        with self._registry.transaction(write=False) as tx:
            chain = chain_of(tx, accessor)
        return any(g.accessor == ancestor for g in chain)

    # -- resolving tokens --------------------------------------------------------------------
    def resolve(self, token: str) -> tuple[BotRow | None, list[Grant]]:
        """The bot whose identity token this is, or the grant chain it opens ([] for neither)."""
        if not looks_like_token(token):
            return None, []
        # A cluster keeps its old peppers after a rotation: a token minted before verifies under
        # the one it was hashed with, until that pepper is retired.
        digests = [hash_token(token, pepper) for pepper in self._keys.peppers()]
        with self._registry.transaction(write=False) as tx:
            for digest in digests:
                found = tx.grants.chain_by_hash(digest, MAX_DEPTH)
                if found is not None and same_hash(found[1], digest):
                    return None, found[0]
                bot = tx.bots.by_hash(digest)
                if bot and same_hash(bot[1], digest):
                    return bot[0], []
        return None, []

    def grants_of_bot(self, bot: str, *, workspace: str | None = None) -> list[Grant]:
        """The grants `bot` can still use: neither revoked nor expired, nor any ancestor.

        Judged by `alive` on the service clock, as a token is at every use, so what a bot is
        shown never outlasts what it may do.
        """
        now = self._clock()
        with self._registry.transaction(write=False) as tx:
            held = tx.grants.of_bot(bot, workspace=workspace)
            # Its own fields first; the ancestors are read only for a child grant still alive.
            return [grant for grant in held
                    if grant.revoked is None and now < min(grant.expires, grant.max_expires) and (
                        grant.parent is None or alive(chain_of(tx, grant.accessor), now).allowed)]

    def chain(self, accessor: str) -> list[Grant]:
        with self._registry.transaction(write=False) as tx:
            return chain_of(tx, accessor)


def chain_of(tx: Tx, accessor: str, *, hold: bool = False) -> list[Grant]:
    """The grant `accessor` and its ancestors, nearest first (at most MAX_DEPTH + 1); with
    `hold`, none of them can be revoked until `tx` ends (GrantTable.by_accessor)."""
    chain: list[Grant] = []
    current: str | None = accessor
    while current is not None and len(chain) <= MAX_DEPTH:
        grant = tx.grants.by_accessor(current)
        if grant is None:
            break
        chain.append(grant)
        current = grant.parent
    if not hold:
        return chain
    # Held in accessor order, as a revoke updates them (GrantTable.revoke): held child first, a
    # read met a revoke of the tree taken parent first, each waiting for the other's row (a
    # deadlock on PostgreSQL). Read again as held: a revoke may have committed meanwhile. A
    # grant's parent never changes, so the chain is the same grants.
    held: dict[str, Grant] = {}
    for name in sorted({g.accessor for g in chain}):
        grant = tx.grants.by_accessor(name, hold=True)
        if grant is not None:
            held[name] = grant
    again: list[Grant] = []
    for grant in chain:
        if grant.accessor not in held:
            break  # purged meanwhile: the chain ends there, as when it is read so
        again.append(held[grant.accessor])
    return again
