"""Grants: what a token lets a bot do in one workspace, and the rules that decide (pure).

A grant holds permissions (`read`, `write`, `execute`, `secrets`, `admin`), optionally a set
of zones (top-level directories of the workspace; none means the whole workspace), the
names of secrets injected into its runs, the domains its commands may ask to reach (none: no
network), and an expiry: a TTL plus an immutable maximum (Vault's `ttl` / `explicit_max_ttl`).
A child grant, minted by the holder of an `admin` grant, is clamped to its parent: never wider
in permissions, zones, secrets, domains or time. The
clamp is applied when the child is made and again at every use, over the whole chain, so
a parent that is revoked or expires takes its children with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from warden.core.bwrap_argv import is_loader_variable
from warden.core.decisions import Decision
from warden.core.durations import format_duration
from warden.core.errors import Denied, InvalidInput
from warden.core.names import is_name
from warden.core.network import parse_rule, uncovered
from warden.core.shell_env import is_shell_startup_name

__all__ = [
    "PERMISSIONS",
    "BotRow",
    "Grant",
    "Plan",
    "alive",
    "check_bot_name",
    "check_domains",
    "check_secret_name",
    "check_zone_name",
    "decide",
    "effective",
    "expiry",
    "parse_permissions",
    "plan_grant",
    "zone_entry",
    "zone_names",
]

PERMISSIONS = ("read", "write", "execute", "secrets", "admin", "approve")
_PERMISSION_LIST = "read, write, execute, secrets, admin, approve"

_SECRET = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
# Environment names a secret may not take: they steer the loader, the shell or Python and
# would turn "a value for the bot" into "code in the sandbox" (or break every run).
_RESERVED_ENV = frozenset({"PATH", "HOME", "SHELL", "USER", "LOGNAME", "PWD", "TERM", "LANG",
                           "TZ", "IFS", "ENV", "BASH_ENV", "PYTHONPATH", "PYTHONHOME",
                           "PYTHONSTARTUP", "NODE_OPTIONS", "VIRTUAL_ENV", "TMPDIR",
                           "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"})


@dataclass(frozen=True)
class BotRow:
    """A registered bot (its identity token is stored only as an HMAC)."""

    id: str
    name: str
    created_at: str
    created_by: str

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "created": self.created_at, "created_by": self.created_by}


@dataclass(frozen=True)
class Grant:
    """One grant row (never its token; the registry holds only the token's HMAC)."""

    accessor: str
    workspace: str
    workspace_id: str
    bot: str
    permissions: frozenset[str]
    zones: tuple[str, ...] | None
    secrets: tuple[str, ...]
    created: datetime
    expires: datetime
    max_expires: datetime
    revoked: datetime | None = None
    parent: str | None = None
    created_by: str = "user"
    # What its commands may ask to reach, one command at a time (core.network entries:
    # `example.com`, `*.example.com`, `host:PORT`); none: they never get the network.
    domains: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "accessor": self.accessor, "workspace": self.workspace, "bot": self.bot,
            "permissions": [p for p in PERMISSIONS if p in self.permissions],
            "zones": list(self.zones) if self.zones is not None else None,
            "secrets": list(self.secrets), "domains": list(self.domains), "created": self.created.isoformat(),
            "expires": self.expires.isoformat(), "max_expires": self.max_expires.isoformat(),
            "revoked": self.revoked.isoformat() if self.revoked else None,
            "parent": self.parent, "created_by": self.created_by,
        }


@dataclass(frozen=True)
class Plan:
    """The scope and times a new grant will have once clamped."""

    permissions: frozenset[str]
    zones: tuple[str, ...] | None
    secrets: tuple[str, ...]
    expires: datetime
    max_expires: datetime
    domains: tuple[str, ...] = ()


def check_domains(domains: Iterable[str]) -> tuple[str, ...]:
    """A grant's domains, each parsed (InvalidInput names a bad one) and written the one way
    core.network prints it, without repeats, in order."""
    if isinstance(domains, str):
        raise InvalidInput("domains must be a list of entries such as pypi.org or *.example.com")
    return tuple(dict.fromkeys(parse_rule(d).text for d in domains))


def parse_permissions(value: str | Iterable[str]) -> frozenset[str]:
    """`read,write` or ["read", "write"] → a set of known permissions; InvalidInput otherwise."""
    items = value.split(",") if isinstance(value, str) else list(value)
    if any(not isinstance(item, str) for item in items):
        raise InvalidInput(f"permissions must be names: {_PERMISSION_LIST}")
    names = {item.strip().lower() for item in items if item.strip()}
    unknown = sorted(n for n in names if n not in PERMISSIONS)
    if unknown:
        raise InvalidInput(f"unknown permission {', '.join(unknown)}: use {_PERMISSION_LIST}")
    if not names:
        raise InvalidInput(f"a grant needs at least one permission: {_PERMISSION_LIST}")
    return frozenset(names)


def check_zone_name(name: str) -> str:
    """A valid zone entry of a grant: a zone's name, with `:ro` or `:rw` for the grant's mode in it."""
    zone_entry(name)
    return name


def zone_entry(entry: str) -> tuple[str, str | None]:
    """`drafts:rw` → ("drafts", "rw"); `input` → ("input", None: the zone's own mode)."""
    name, colon, mode = entry.partition(":") if isinstance(entry, str) else ("", "", "")
    if not is_name(name) or (colon and mode not in ("ro", "rw")):
        raise InvalidInput(f"bad zone {entry!r}: name a zone (a folder of the workspace), optionally with "
                           ":ro or :rw (e.g. drafts:rw,input:ro), or * for the whole workspace")
    return name, (mode or None)


def zone_names(entries: Iterable[str]) -> set[str]:
    return {zone_entry(entry)[0] for entry in entries}


def _zone_map(entries: Iterable[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for entry in entries:
        name, mode = zone_entry(entry)
        if name in found:
            raise InvalidInput(f"zone {name} is named twice; keep one")
        found[name] = mode
    return found


def _entries(zones: Mapping[str, str | None]) -> tuple[str, ...]:
    return tuple(sorted(name if mode is None else f"{name}:{mode}" for name, mode in zones.items()))


def _narrowed(mine: Mapping[str, str | None], parent: Mapping[str, str | None]) -> dict[str, str | None]:
    """The zones both name, each at the stricter mode (ro beats rw beats the zone's own)."""
    out: dict[str, str | None] = {}
    for name in mine.keys() & parent.keys():
        modes = {mine[name], parent[name]} - {None}
        out[name] = "ro" if "ro" in modes else ("rw" if modes else None)
    return out


def check_secret_name(name: str) -> str:
    """A valid secret name: an environment variable name that does not steer the sandbox."""
    if not isinstance(name, str) or not _SECRET.match(name):
        raise InvalidInput(f"bad secret name {name!r}: use an environment variable name in capitals, "
                           "digits and '_' (e.g. OPENAI_API_KEY)")
    # Loader and libc variables (they would travel through bwrap's --setenv, and steer the
    # dynamic loader of every program inside) and shell start-up variables (code that runs
    # before the command) are never a secret's name.
    if (name in _RESERVED_ENV or name.startswith(("LD_", "WARDEN_", "BWRAP"))
            or is_loader_variable(name) or is_shell_startup_name(name)):
        raise InvalidInput(f"secret name {name!r} is reserved (it controls the sandbox or its programs); "
                           "pick another name")
    return name


def _names(values: Iterable[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return tuple(sorted(set(values)))


def plan_grant(now: datetime, permissions: frozenset[str], *, zones: Sequence[str] | None = None,
               secrets: Sequence[str] = (), ttl: timedelta | None, max_ttl: timedelta | None,
               default_ttl: timedelta, ceiling: timedelta, parent: Sequence[Grant] | None = None,
               domains: Sequence[str] = ()) -> Plan:
    """Validate a request for a grant and clamp it to its parent chain (`parent[0]` = the parent).

    Wider permissions, zones, secrets or domains than the parent are refused (Denied, naming what);
    times are shortened to the parent's silently, as Vault does with a child's TTL.
    """
    whole = zones is not None and list(zones) == ["*"]
    if zones is not None and not whole:
        if "*" in zones:
            raise InvalidInput("* (the whole workspace) stands alone; name zones or give *, not both")
        _zone_map(zones)
    for name in secrets:
        check_secret_name(name)
    domain_set = check_domains(domains)
    if secrets and "secrets" not in permissions:
        # Said in the grant's words: a bot minting a child grant over HTTP has no --permissions.
        raise InvalidInput("naming secrets needs the `secrets` permission: add it to the grant's permissions "
                           "(`--permissions …,secrets`; over HTTP, \"permissions\")")
    # The wording names the grant's fields (ttl, max_ttl): the CLI's --ttl/--max-ttl and the
    # HTTP body's "ttl"/"max_ttl" both read it right.
    for label, value in (("ttl", ttl), ("max_ttl", max_ttl)):
        if value is not None and value <= timedelta(0):
            raise InvalidInput(f"the grant's {label} must be longer than zero (e.g. 30m, 7d)")
    if max_ttl is not None and max_ttl > ceiling:
        raise InvalidInput(f"the grant's max_ttl ({format_duration(max_ttl)}) is longer than this "
                           f"server's limit grants.max_ttl ({format_duration(ceiling)}); ask for a "
                           "shorter one, or have the limit raised")
    limit = max_ttl if max_ttl is not None else ceiling
    wanted = ttl if ttl is not None else min(default_ttl, limit)
    if wanted > limit:
        if max_ttl is not None:
            where, fix = "its max_ttl", f"a longer max_ttl (at most {format_duration(ceiling)})"
        else:
            where, fix = "this server's limit grants.max_ttl", "have the limit raised"
        raise InvalidInput(f"the grant's ttl ({format_duration(wanted)}) is longer than {where} "
                           f"({format_duration(limit)}); ask for a shorter ttl, or {fix}")
    # Without a parent (a person's grant) no --zones means the whole workspace. A child grant
    # gets exactly the zones it declares and none when it declares none (a worker that
    # declares nothing gets nothing); `*` asks for all its parent has.
    zone_set = None if whole or (zones is None and not parent) else _entries(_zone_map(zones or ()))
    secret_set = _names(secrets) or ()
    expires = now + wanted
    max_expires = now + limit
    if parent:
        scope = effective(parent)
        if "approve" in permissions:
            # A person's consent, handed to a bot of theirs: a bot never passes it on (it would
            # mint an approver of its own requests under another name).
            raise Denied("only a person gives the approve permission (`warden grant NAME BOT --permissions "
                         "approve`); a child grant never carries it", rule="grant.clamp")
        extra = sorted(permissions - scope.permissions)
        if extra:
            raise Denied(f"the parent grant does not have {', '.join(extra)}; a child grant is never wider",
                         rule="grant.clamp")
        if scope.zones is not None:
            if zone_set is None:
                zone_set = scope.zones
            have = _zone_map(scope.zones)
            asked = _zone_map(zone_set)
            outside = sorted(set(asked) - set(have))
            if outside:
                raise Denied(f"the parent grant does not cover zone {', '.join(outside)}; "
                             "a child grant is never wider", rule="grant.clamp")
            wider = sorted(name for name, mode in asked.items() if mode == "rw" and have[name] == "ro")
            if wider:
                raise Denied(f"the parent grant has zone {', '.join(wider)} read-only; "
                             "a child grant is never wider", rule="grant.clamp")
        missing = sorted(set(secret_set) - set(scope.secrets))
        if missing:
            raise Denied(f"the parent grant does not name secret {', '.join(missing)}; "
                         "a child grant is never wider", rule="grant.clamp")
        beyond = uncovered(domain_set, scope.domains)
        if beyond:
            raise Denied(f"the parent grant does not reach {', '.join(beyond)}; "
                         "a child grant is never wider", rule="grant.clamp")
        expires = min(expires, scope.expires)
        max_expires = min(max_expires, scope.max_expires)
    expires = min(expires, max_expires)
    return Plan(frozenset(permissions), zone_set, secret_set, expires, max_expires, domain_set)


def effective(chain: Sequence[Grant]) -> Plan:
    """The scope a grant really has: the intersection over itself and every ancestor."""
    if not chain:
        raise ValueError("an empty grant chain has no scope")
    permissions = frozenset(PERMISSIONS)
    zones: dict[str, str | None] | None = None
    secrets: set[str] | None = None
    # The grant's own domains, each kept only while every ancestor covers it too.
    domains = [d for d in chain[0].domains if all(not uncovered([d], g.domains) for g in chain[1:])]
    expires = chain[0].expires
    max_expires = chain[0].max_expires
    for grant in chain:
        permissions &= grant.permissions
        if grant.zones is not None:
            own = _zone_map(grant.zones)
            zones = own if zones is None else _narrowed(zones, own)
        secrets = set(grant.secrets) if secrets is None else secrets & set(grant.secrets)
        expires = min(expires, grant.expires, grant.max_expires)
        max_expires = min(max_expires, grant.max_expires)
    if "secrets" not in permissions:
        secrets = set()
    return Plan(permissions, _entries(zones) if zones is not None else None,
                tuple(sorted(secrets or ())), expires, max_expires, tuple(domains))


def expiry(chain: Sequence[Grant]) -> datetime:
    """When the grant at `chain[0]` stops working (its own or an ancestor's end)."""
    return effective(chain).expires


def alive(chain: Sequence[Grant], now: datetime) -> Decision:
    """Is the grant at `chain[0]` usable at all: neither it nor an ancestor revoked or expired?"""
    if not chain:
        return Decision(False, "token.unknown", "no such token")
    if chain[-1].parent is not None:
        # An ancestor's row is gone (purged once it ended): what hung from it ended with it.
        return Decision(False, "grant.parent_gone", f"grant {chain[-1].parent} no longer exists")
    for depth, grant in enumerate(chain):
        if grant.revoked is not None:
            rule = "grant.revoked" if depth == 0 else "grant.parent_revoked"
            return Decision(False, rule, f"grant {grant.accessor} was revoked")
    ends = effective(chain).expires
    if now >= ends:
        return Decision(False, "grant.expired", f"grant {chain[0].accessor} expired at {ends.isoformat()}")
    return Decision(True, "grant.alive", f"grant {chain[0].accessor} is live")


def decide(chain: Sequence[Grant], now: datetime, *, workspace_id: str | None, permission: str,
           zone: str | None = None, whole_workspace: bool = False) -> Decision:
    """May the holder of `chain[0]` use `permission` (in `zone`) on the workspace `workspace_id`?

    `zone`, when given, must be one of the grant's zones. `whole_workspace` is for operations
    that reach every file (running a command): a grant limited to zones may not do them.
    """
    life = alive(chain, now)
    if not life.allowed:
        return life
    scope = effective(chain)
    if workspace_id is not None and chain[0].workspace_id != workspace_id:
        return Decision(False, "grant.workspace", f"grant {chain[0].accessor} is for another workspace")
    if permission not in PERMISSIONS:
        return Decision(False, "grant.permission", f"unknown permission {permission!r}")
    if permission not in scope.permissions:
        return Decision(False, "grant.permission", f"grant {chain[0].accessor} lacks {permission}")
    if scope.zones is not None:
        if whole_workspace:
            return Decision(False, "grant.zone", f"grant {chain[0].accessor} is limited to zones "
                            f"{', '.join(scope.zones)} and cannot reach the whole workspace")
        if zone is not None and zone not in zone_names(scope.zones):
            return Decision(False, "grant.zone", f"grant {chain[0].accessor} does not cover zone {zone}")
    return Decision(True, "grant.allow", f"grant {chain[0].accessor} has {permission}")



def shared_with_writers(new: Grant, others: Iterable[Grant], now: datetime) -> tuple[str, ...]:
    """The other bots whose live grants on `new`'s workspace meet it so that one's code may run
    with the other's secrets: a bot that may write there can plant what the other's commands run
    (`.venv/bin/sh`, a package, a script), and a command of a grant with secrets runs with them.
    Warden cannot tell such code from the workspace's own; `warden grant` warns of it.

    `execute` writes too: a command writes the workspace whatever the grant's `write` says (that
    permission is the file API's), so a `read,execute` bot planted `.venv/bin/ls` and read another
    bot's secret back, with no warning given (found as a newcomer)."""
    def writes(g: Grant) -> bool:
        return bool(g.permissions & {"write", "admin", "execute"})

    met = {o.bot for o in others
           if o.bot != new.bot and o.revoked is None and o.expires > now
           and ((new.secrets and writes(o)) or (o.secrets and writes(new)))}
    return tuple(sorted(met))


def check_bot_name(name: str) -> str:
    """A valid bot name (it appears in the audit log and in URLs)."""
    if not is_name(name):
        raise InvalidInput(f"bad bot name {name!r}: use 1-63 letters, digits, '.', '_' or '-', "
                           "starting with a letter or digit")
    return name
