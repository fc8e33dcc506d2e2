"""`warden create`, `list`, `info`, `destroy`."""

from __future__ import annotations

import argparse
from typing import Any

from warden.core.errors import InvalidInput
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("create", parents=[common], help="create a workspace")
    p.add_argument("name")
    p.add_argument("--template", help="template name or YAML file")
    p.add_argument("--python", help="Python version X.Y of the workspace venv")
    p.add_argument("--node", help="Node.js major version")
    p.add_argument("--type", dest="kind", default="user", choices=["user", "bot", "temporary"])
    p.add_argument("--ttl", help="expire after DURATION (30s, 10m, 2h, 7d)")
    p.add_argument("--blob", help="unpack a project from FILE (tar.gz, zip, base64) or - for stdin")
    p.set_defaults(handler=_create)

    p = sub.add_parser("list", parents=[common], help="list workspaces")
    p.add_argument("--status")
    p.add_argument("--type", dest="kind")
    p.set_defaults(handler=_list)

    p = sub.add_parser("info", parents=[common], help="show one workspace")
    p.add_argument("name")
    p.set_defaults(handler=_info)

    p = sub.add_parser("destroy", parents=[common], help="remove a workspace")
    p.add_argument("name")
    p.add_argument("--no-archive", action="store_true", help="do not keep an archive")
    p.add_argument("--yes", action="store_true", help="confirm")
    p.set_defaults(handler=_destroy)


def _create(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.durations import parse_duration

    ttl = parse_duration(args.ttl) if args.ttl else None
    record = ctx.app.workspaces.create(args.name, kind=args.kind, ttl=ttl, template=args.template)
    data = record.to_json()
    return Output(data, f"created workspace {record.name} at {record.path}")


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    records = ctx.app.workspaces.list(status=args.status, kind=args.kind)
    data = [r.to_json() for r in records]
    return Output(data, render=lambda d: table(
        ["Name", "Status", "Type", "Template", "Last accessed", "Path"],
        [[r["name"], r["status"], r["type"], r["template"] or "-", str(r["last_accessed"])[:19],
          r["path"]] for r in d]) if d else "no workspaces (create one with `warden create NAME`)")


def _info(ctx: Context, args: argparse.Namespace) -> Output:
    data = ctx.app.workspaces.get(args.name).to_json()
    return Output(data, render=lambda d: "\n".join(f"{k}: {v}" for k, v in d.items() if v is not None))


def _destroy(ctx: Context, args: argparse.Namespace) -> Output:
    if not args.yes:
        raise InvalidInput(f"destroying {args.name!r} needs --yes to confirm")
    ctx.app.workspaces.destroy(args.name)
    return Output({"name": args.name, "destroyed": True}, f"destroyed workspace {args.name}")
