"""`warden bot register|list|rm`: the bots that may ask `warden serve` for workspaces.

A bot's identity token is printed once, alone on stdout (so `TOKEN=$(warden bot register ...)`
works), with the explanation on stderr; it is never an argument of any command, so it never
shows in `ps`.
"""

from __future__ import annotations

import argparse
from typing import Any

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


def _bot_register(ctx: Context, args: argparse.Namespace) -> Output:
    issued = ctx.app.grants.register_bot(args.name)
    ctx.note(f"registered bot {args.name}; its identity token is below and is shown only once.\n"
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
