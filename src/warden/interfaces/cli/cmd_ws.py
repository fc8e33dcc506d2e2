"""`warden ws set|current|back|forward|history|list` and `warden @NAME`: this terminal's current
workspace (services/context.py). The terminal is `WARDEN_TERMINAL` when set, else its session."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ws", parents=[common], help="this terminal's current workspace (`warden @NAME` sets it)")
    ops = p.add_subparsers(dest="op", metavar="OP", required=True, parser_class=type(p))
    o = ops.add_parser("set", parents=[common], help="make a workspace this terminal's current one")
    o.add_argument("target", metavar="NAME|PATH",
                   help="a workspace's name (or an unambiguous part of it), or a path inside its folder")
    o.set_defaults(handler=_set)
    for word, text, handler in (("current", "this terminal's current workspace", _current),
                                ("back", "go back to the previous workspace of this terminal", _back),
                                ("forward", "go forward again after `ws back`", _forward),
                                ("history", "this terminal's recent workspaces, most recent first", _history),
                                ("list", "every workspace, this terminal's current one marked", _list)):
        ops.add_parser(word, parents=[common], help=text).set_defaults(handler=handler)


def _said(ctx: Context, name: str) -> Output:
    record = ctx.app.workspaces.get(name)
    return Output({"name": record.name, "path": record.path, "terminal": ctx.app.context.terminal},
                  text=f"{record.name}  {record.path}")


def _set(ctx: Context, args: argparse.Namespace) -> Output:
    record = ctx.app.context.set(args.target)
    if record.type == "bot":
        # A bot chooses its workspaces' names, so one may be what the person typed: say whose it is.
        ctx.note(f"note: {record.name} is a workspace a bot made ({record.created_by or 'unknown'})")
    return _said(ctx, record.name)


def _current(ctx: Context, args: argparse.Namespace) -> Output:
    now = ctx.app.context.require_current()
    assert now.name is not None
    return _said(ctx, now.name)


def _back(ctx: Context, args: argparse.Namespace) -> Output:
    return _said(ctx, ctx.app.context.back())


def _forward(ctx: Context, args: argparse.Namespace) -> Output:
    return _said(ctx, ctx.app.context.forward())


def _history(ctx: Context, args: argparse.Namespace) -> Output:
    context = ctx.app.context.context()
    rows = [{"name": name, "current": name == context.current} for name in context.recent]
    return Output(rows, render=lambda d: "\n".join(("* " if r["current"] else "  ") + r["name"] for r in d)
                  or "no workspaces set in this terminal yet")


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    current = ctx.app.context.context().current
    rows = [{"name": r.name, "status": r.status, "type": r.type, "path": r.path, "current": r.name == current}
            for r in ctx.app.workspaces.list()]
    return Output(rows, render=lambda d: table(("", "NAME", "STATUS", "TYPE", "PATH"),
                                               [("*" if r["current"] else "", r["name"], r["status"], r["type"],
                                                 r["path"]) for r in d]) if d else "no workspaces")
