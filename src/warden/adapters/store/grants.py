"""Bot and grant rows in the registry. Tokens appear here only as their HMAC."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from warden.adapters.store.db import Row, Sql
from warden.core.errors import Conflict
from warden.core.grants import PERMISSIONS, BotRow, Grant

__all__ = ["SqlBots", "SqlGrants"]


def _bot(row: Row) -> BotRow:
    return BotRow(id=row["id"], name=row["name"], created_at=row["created_at"], created_by=row["created_by"])


class SqlBots:
    """The `bots` table (core.ports.BotTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, bot: BotRow, token_hash: str) -> None:
        try:
            self._sql.execute("INSERT INTO bots (id, name, token_hash, created_at, created_by)"
                       " VALUES (:id, :name, :hash, :at, :by)",
                       {"id": bot.id, "name": bot.name, "hash": token_hash, "at": bot.created_at,
                        "by": bot.created_by})
        except Conflict:
            raise Conflict(f"bot {bot.name!r} is already registered; `warden bot rm {bot.name}` first "
                           "to issue a new identity token") from None

    def by_name(self, name: str) -> BotRow | None:
        rows = self._sql.execute("SELECT id, name, created_at, created_by FROM bots WHERE name = :n", {"n": name})
        return _bot(rows[0]) if rows else None

    def by_hash(self, token_hash: str) -> tuple[BotRow, str] | None:
        """The bot whose identity token has this hash, with the stored hash (compared by the caller)."""
        rows = self._sql.execute("SELECT id, name, created_at, created_by, token_hash FROM bots"
                          " WHERE token_hash = :h", {"h": token_hash})
        return (_bot(rows[0]), str(rows[0]["token_hash"])) if rows else None

    def list_all(self) -> list[BotRow]:
        return [_bot(r) for r in self._sql.execute("SELECT id, name, created_at, created_by FROM bots ORDER BY name")]

    def delete(self, name: str) -> None:
        self._sql.execute("DELETE FROM bots WHERE name = :n", {"n": name})


# -- grants ---------------------------------------------------------------------------------
_GRANT_COLUMNS = ("accessor, parent_accessor, workspace, workspace_id, bot, permissions, zones, secrets,"
                  " created_at, expires_at, max_expires_at, revoked_at, created_by, domains")


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


# The chain's columns, qualified by the query's alias once rather than at every token's lookup.
_CHAIN_COLUMNS = ", ".join(f"g.{c.strip()}" for c in _GRANT_COLUMNS.split(","))


def _texts(text: str) -> tuple[str, ...]:
    """A JSON list column as a tuple; the common empty list without the JSON parser (a bot's
    every request reads its grant chain)."""
    return () if text == "[]" else tuple(json.loads(text))


def _grant(row: Row) -> Grant:
    zones = json.loads(row["zones"]) if row["zones"] is not None else None
    created = _time(row["created_at"])
    expires = _time(row["expires_at"])
    max_expires = _time(row["max_expires_at"])
    assert created is not None and expires is not None and max_expires is not None
    return Grant(
        accessor=row["accessor"], workspace=row["workspace"], workspace_id=row["workspace_id"],
        bot=row["bot"], permissions=frozenset(p for p in str(row["permissions"]).split(",") if p),
        zones=tuple(zones) if zones is not None else None, secrets=_texts(row["secrets"]),
        created=created, expires=expires, max_expires=max_expires, revoked=_time(row["revoked_at"]),
        parent=row["parent_accessor"], created_by=row["created_by"],
        domains=_texts(row["domains"] or "[]"))


class SqlGrants:
    """The `grants` table (core.ports.GrantTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, grant: Grant, token_hash: str) -> None:
        self._sql.execute(
            f"INSERT INTO grants (token_hash, {_GRANT_COLUMNS}) VALUES (:token_hash, :accessor, :parent,"
            " :workspace, :workspace_id, :bot, :permissions, :zones, :secrets, :created, :expires,"
            " :max_expires, NULL, :created_by, :domains)",
            {"token_hash": token_hash, "accessor": grant.accessor, "parent": grant.parent,
             "workspace": grant.workspace, "workspace_id": grant.workspace_id, "bot": grant.bot,
             "permissions": ",".join(p for p in PERMISSIONS if p in grant.permissions),
             "zones": json.dumps(list(grant.zones)) if grant.zones is not None else None,
             "secrets": json.dumps(list(grant.secrets)), "created": grant.created.isoformat(),
             "expires": grant.expires.isoformat(), "max_expires": grant.max_expires.isoformat(),
             "created_by": grant.created_by, "domains": json.dumps(list(grant.domains))})

    def chain_by_hash(self, token_hash: str, max_depth: int) -> tuple[list[Grant], str] | None:
        """The grant whose token has this hash and its ancestors (nearest first), in one query,
        with the stored hash (compared by the caller)."""
        rows = self._sql.execute(
            "WITH RECURSIVE chain(accessor, parent, depth) AS ("
            " SELECT accessor, parent_accessor, 0 FROM grants WHERE token_hash = :h"
            " UNION ALL SELECT p.accessor, p.parent_accessor, c.depth + 1 FROM grants p"
            " JOIN chain c ON p.accessor = c.parent WHERE c.depth < :d)"
            f" SELECT g.token_hash, {_CHAIN_COLUMNS} FROM chain c JOIN grants g ON g.accessor = c.accessor"
            " ORDER BY c.depth", {"h": token_hash, "d": max_depth})
        if not rows:
            return None
        return [_grant(r) for r in rows], str(rows[0]["token_hash"])

    def by_accessor(self, accessor: str, *, hold: bool = False) -> Grant | None:
        lock = " FOR SHARE" if hold and self._sql.dialect == "postgresql" else ""
        rows = self._sql.execute(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE accessor = :a{lock}", {"a": accessor})
        return _grant(rows[0]) if rows else None

    def of_workspace(self, workspace: str, *, live_only: bool = False) -> list[Grant]:
        rows = self._sql.execute(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE workspace = :w"
                          + (" AND revoked_at IS NULL" if live_only else "") + " ORDER BY created_at, accessor",
                          {"w": workspace})
        return [_grant(r) for r in rows]

    def of_bot(self, bot: str, *, workspace: str | None = None, live_only: bool = True) -> list[Grant]:
        """The bot's grants (on `workspace`); `live_only` drops revoked ones only.

        Expiry is not judged here: it needs the service's clock and the grant's ancestors
        (GrantService.grants_of_bot does both).
        """
        rows = self._sql.execute(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE bot = :b"
                          " AND (CAST(:w AS TEXT) IS NULL OR workspace = :w)"
                          + (" AND revoked_at IS NULL" if live_only else "") + " ORDER BY created_at, accessor",
                          {"b": bot, "w": workspace})
        return [_grant(r) for r in rows]

    def descendants(self, accessors: Sequence[str]) -> list[str]:
        """Every grant minted from one of `accessors`, at any depth (breadth first)."""
        found: list[str] = []
        seen = set(accessors)
        frontier = list(accessors)
        while frontier:
            marks = ", ".join(f":p{i}" for i in range(len(frontier)))
            rows = self._sql.execute(f"SELECT accessor FROM grants WHERE parent_accessor IN ({marks})",
                              {f"p{i}": a for i, a in enumerate(frontier)})
            frontier = [str(r["accessor"]) for r in rows if r["accessor"] not in seen]
            seen.update(frontier)
            found.extend(frontier)
        return found

    def purge(self, before: datetime) -> list[str]:
        """Delete grants revoked or expired before `before` (a child ends no later than its parent,
        so no live grant loses an ancestor); their accessors."""
        rows = self._sql.execute("DELETE FROM grants WHERE (revoked_at IS NOT NULL AND revoked_at < :b) "
                                 "OR expires_at < :b RETURNING accessor", {"b": before.isoformat()})
        return sorted(str(r["accessor"]) for r in rows)

    def revoke(self, accessors: Sequence[str], at: datetime) -> int:
        """Mark `accessors` revoked (those not already); returns how many changed. Updated in
        accessor order, the order a held chain is read in (services.grants.chain_of): a tree's
        revoke taken parent first met a held read taken child first, each waiting for the
        other's row (PostgreSQL's "deadlock detected")."""
        changed = 0
        for accessor in sorted(set(accessors)):
            rows = self._sql.execute("UPDATE grants SET revoked_at = :at WHERE accessor = :a AND revoked_at IS NULL"
                              " RETURNING accessor", {"at": at.isoformat(), "a": accessor})
            changed += len(rows)
        return changed
