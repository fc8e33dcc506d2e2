"""`warden grant`, `grants` and `revoke`: which bot may do what in a workspace, until when.

A grant token is printed once, alone on stdout (so `TOKEN=$(warden grant ...)` works), with
the explanation on stderr; it is never an argument of any command, so it never shows in `ps`.
"""

from __future__ import annotations

import argparse
from typing import Any

from warden.core.errors import InvalidInput
from warden.core.grants import shared_with_writers
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("grant", parents=[common], help="give a bot access to a workspace; prints the token once")
    p.add_argument("name", help="workspace")
    p.add_argument("bot")
    p.add_argument("--permissions", required=True,
                   help="comma-separated: read, write, execute, secrets, admin, approve (answer other bots' "
                        "requests for approval)")
    p.add_argument("--zones", help="comma-separated zones the grant is limited to, each with :ro or :rw for "
                                   "the bot's mode there (drafts:rw,input:ro); without it: the whole workspace (*)")
    p.add_argument("--secrets", help="comma-separated secret names injected into the bot's runs")
    p.add_argument("--allow-domain", dest="allow_domain", action="append", default=[], metavar="DOMAIN",
                   help="a domain the bot's commands may ask to reach, one command at a time (repeat; "
                        "*.example.com for subdomains, host:PORT for one port); without it: no network")
    p.add_argument("--ttl", help="lifetime (30s, 10m, 2h, 7d; default grants.default_ttl)")
    p.add_argument("--max-ttl", dest="max_ttl", help="immutable maximum lifetime (default grants.max_ttl)")
    p.set_defaults(handler=_grant)

    p = sub.add_parser("grants", parents=[common], help="list the grants of a workspace (never tokens)")
    p.add_argument("name", help="workspace")
    p.set_defaults(handler=_grants)

    p = sub.add_parser("revoke", parents=[common], help="revoke a bot's grants on a workspace, or one by accessor")
    p.add_argument("name", help="workspace")
    p.add_argument("bot", nargs="?")
    p.add_argument("--accessor", help="the accessor of one grant (from `warden grants NAME`)")
    p.set_defaults(handler=_revoke)


def _list_arg(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _grant(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.durations import parse_duration

    zones = _list_arg(args.zones)
    if zones is not None and (not zones or len(zones) != len(args.zones.split(","))):
        # An empty $ZONES in a script must not fail open into the whole workspace.
        raise InvalidInput(f"--zones {args.zones!r} names an empty zone: list zones (drafts:rw,input:ro), "
                           "or * for the whole workspace")
    issued = ctx.app.grants.grant(
        args.name, args.bot, args.permissions, zones=zones, secrets=_list_arg(args.secrets) or [],
        ttl=parse_duration(args.ttl) if args.ttl else None,
        max_ttl=parse_duration(args.max_ttl) if args.max_ttl else None, domains=args.allow_domain)
    grant = issued.grant
    reach = f", network to {', '.join(grant.domains)} on request" if grant.domains else ""
    ctx.note(f"granted {args.bot} {','.join(sorted(grant.permissions))}{reach} on {args.name} until "
             f"{grant.expires.isoformat(timespec='seconds')} (accessor {grant.accessor}); "
             "the token below is shown only once")
    met = shared_with_writers(grant, ctx.app.grants.list_grants(args.name), ctx.app.clock())
    data = issued.to_json()
    if met:
        warning = (f"{', '.join(met)} and {args.bot} share {args.name}, where one may write (its commands too) and "
                   "the other's commands run with secrets: code a writer plants there (.venv/bin, node_modules/.bin, "
                   "a script) runs with them; give secrets on a workspace no other bot may write or run commands in")
        ctx.note(f"warning: {warning}")
        data["warnings"] = [warning]
    return Output(data, issued.token)


def _grants(ctx: Context, args: argparse.Namespace) -> Output:
    now = ctx.app.clock()
    listed = []
    for grant in ctx.app.grants.list_grants(args.name):
        state = "revoked" if grant.revoked else "expired" if grant.expires <= now else "active"
        listed.append({**grant.to_json(), "state": state})
    return Output(listed, render=lambda d: table(
        ["Accessor", "Bot", "Permissions", "Zones", "Secrets", "Domains", "Expires", "State", "Parent"],
        [[g["accessor"], g["bot"], ",".join(g["permissions"]),
          "*" if g["zones"] is None else (",".join(g["zones"]) or "none"),
          ",".join(g["secrets"]) or "-", ",".join(g["domains"]) or "-", str(g["expires"])[:19], g["state"],
          g["parent"] or "-"] for g in d])
        if d else f"no grants on {args.name}")


def _revoke(ctx: Context, args: argparse.Namespace) -> Output:
    if (args.bot is None) == (args.accessor is None):
        raise InvalidInput("warden revoke NAME needs a BOT or --accessor ID (exactly one)")
    revoked = ctx.app.grants.revoke(args.name, bot=args.bot, accessor=args.accessor)
    return Output({"workspace": args.name, "revoked": revoked},
                  f"revoked {len(revoked)} grant(s) on {args.name}: {', '.join(revoked)}")
