"""`warden bot`, `grant`, `grants`, `revoke` and `secret`: who holds which keys.

A token is printed once, alone on stdout (so `TOKEN=$(warden grant ...)` works), with the
explanation on stderr; it is never an argument of any command, so it never shows in `ps`.
Secret values are read from stdin only, for the same reason.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from warden.core.errors import InvalidInput
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    bot = sub.add_parser("bot", parents=[common], help="register, list and remove bots")
    bsub = bot.add_subparsers(dest="bot_command", metavar="ACTION", required=True, parser_class=type(bot))
    p = bsub.add_parser("register", parents=[common], help="register a bot; prints its identity token once")
    p.add_argument("name")
    p.set_defaults(handler=_bot_register)
    p = bsub.add_parser("list", parents=[common], help="list registered bots")
    p.set_defaults(handler=_bot_list)
    p = bsub.add_parser("rm", parents=[common], help="remove a bot and revoke everything it holds")
    p.add_argument("name")
    p.set_defaults(handler=_bot_rm)

    p = sub.add_parser("grant", parents=[common], help="give a bot access to a workspace; prints the token once")
    p.add_argument("name", help="workspace")
    p.add_argument("bot")
    p.add_argument("--permissions", required=True,
                   help="comma-separated: read, write, execute, secrets, admin")
    p.add_argument("--zones", help="comma-separated zones (top-level folders) the grant is limited to")
    p.add_argument("--secrets", help="comma-separated secret names injected into the bot's runs")
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

    secret = sub.add_parser("secret", parents=[common], help="encrypted secrets injected into bot runs")
    ssub = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True,
                                 parser_class=type(secret))
    p = ssub.add_parser("set", parents=[common], help="store a secret; the value is read from stdin")
    p.add_argument("key")
    p.set_defaults(handler=_secret_set)
    p = ssub.add_parser("list", parents=[common], help="list secret names (never values)")
    p.set_defaults(handler=_secret_list)
    p = ssub.add_parser("rm", parents=[common], help="remove a secret")
    p.add_argument("key")
    p.set_defaults(handler=_secret_rm)
    p = ssub.add_parser("rotate-key", parents=[common], help="re-encrypt every secret under a new master key")
    p.set_defaults(handler=_secret_rotate)


def _note(ctx: Context, text: str) -> None:
    if not ctx.json:
        sys.stderr.write(text + "\n")


def _list_arg(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


# -- bots ------------------------------------------------------------------------------------
def _bot_register(ctx: Context, args: argparse.Namespace) -> Output:
    issued = ctx.app.grants.register_bot(args.name)
    _note(ctx, f"registered bot {args.name}; its identity token is below and is shown only once.\n"
               f"The bot sends it as `Authorization: Bearer <token>` to `warden serve` to ask for workspaces.")
    return Output(issued.to_json(), issued.token)


def _bot_list(ctx: Context, args: argparse.Namespace) -> Output:
    bots = [b.to_json() for b in ctx.app.grants.list_bots()]
    return Output(bots, render=lambda d: table(["Bot", "Id", "Registered", "By"],
                                               [[b["name"], b["id"], str(b["created"])[:19], b["created_by"]]
                                                for b in d]) if d else
                  "no bots (register one with `warden bot register NAME`)")


def _bot_rm(ctx: Context, args: argparse.Namespace) -> Output:
    revoked = ctx.app.grants.remove_bot(args.name)
    return Output({"bot": args.name, "removed": True, "revoked": revoked},
                  f"removed bot {args.name}; revoked {len(revoked)} grant(s)")


# -- grants ----------------------------------------------------------------------------------
def _grant(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.durations import parse_duration

    issued = ctx.app.grants.grant(
        args.name, args.bot, args.permissions, zones=_list_arg(args.zones), secrets=_list_arg(args.secrets) or [],
        ttl=parse_duration(args.ttl) if args.ttl else None,
        max_ttl=parse_duration(args.max_ttl) if args.max_ttl else None)
    grant = issued.grant
    _note(ctx, f"granted {args.bot} {','.join(sorted(grant.permissions))} on {args.name} until "
               f"{grant.expires.isoformat(timespec='seconds')} (accessor {grant.accessor}); "
               "the token below is shown only once")
    return Output(issued.to_json(), issued.token)


def _grants(ctx: Context, args: argparse.Namespace) -> Output:
    now = ctx.app.clock()
    listed = []
    for grant in ctx.app.grants.list_grants(args.name):
        state = "revoked" if grant.revoked else "expired" if grant.expires <= now else "active"
        listed.append({**grant.to_json(), "state": state})
    return Output(listed, render=lambda d: table(
        ["Accessor", "Bot", "Permissions", "Zones", "Secrets", "Expires", "State", "Parent"],
        [[g["accessor"], g["bot"], ",".join(g["permissions"]), ",".join(g["zones"]) if g["zones"] else "*",
          ",".join(g["secrets"]) or "-", str(g["expires"])[:19], g["state"], g["parent"] or "-"] for g in d])
        if d else f"no grants on {args.name}")


def _revoke(ctx: Context, args: argparse.Namespace) -> Output:
    if (args.bot is None) == (args.accessor is None):
        raise InvalidInput("warden revoke NAME needs a BOT or --accessor ID (exactly one)")
    revoked = ctx.app.grants.revoke(args.name, bot=args.bot, accessor=args.accessor)
    return Output({"workspace": args.name, "revoked": revoked},
                  f"revoked {len(revoked)} grant(s) on {args.name}: {', '.join(revoked)}")


# -- secrets ---------------------------------------------------------------------------------
def _read_value() -> bytes:
    if sys.stdin is None:
        raise InvalidInput("no value: pipe the secret on stdin")
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("secret value (not echoed): ").encode("utf-8")
    return sys.stdin.buffer.read(1024 * 1024)


def _secret_set(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.grants import check_secret_name

    check_secret_name(args.key)
    created = ctx.app.secrets.set(args.key, _read_value())
    return Output({"name": args.key, "created": created},
                  f"{'stored' if created else 'replaced'} secret {args.key} (encrypted)")


def _secret_list(ctx: Context, args: argparse.Namespace) -> Output:
    listed = [row.to_json() for row in ctx.app.secrets.list_secrets()]
    return Output(listed, render=lambda d: table(["Secret", "Key", "Updated"],
                                                 [[s["name"], s["key_id"], str(s["updated"])[:19]] for s in d])
                  if d else "no secrets (store one with `warden secret set NAME < file`)")


def _secret_rm(ctx: Context, args: argparse.Namespace) -> Output:
    ctx.app.secrets.remove(args.key)
    return Output({"name": args.key, "removed": True}, f"removed secret {args.key}")


def _secret_rotate(ctx: Context, args: argparse.Namespace) -> Output:
    kid, count = ctx.app.secrets.rotate_key()
    return Output({"key_id": kid, "resealed": count},
                  f"new master key {kid}; re-encrypted {count} secret(s)")
