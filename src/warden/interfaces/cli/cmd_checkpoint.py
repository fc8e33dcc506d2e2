"""`warden checkpoint NAME [-m TEXT]`, `warden checkpoints NAME`, `warden rollback NAME ID [--path P]`."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, human_size, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("checkpoint", parents=[common], help="save a workspace's files as a checkpoint",
                       description="Save the workspace's content (not .venv, node_modules, .git or "
                                   "Warden's files) as a checkpoint to roll back to.")
    p.add_argument("name", help="workspace name")
    p.add_argument("-m", "--message", default="", help="what the checkpoint is for")
    p.set_defaults(handler=_checkpoint)

    p = sub.add_parser("checkpoints", parents=[common], help="list a workspace's checkpoints",
                       description="List a workspace's checkpoints, newest first; --drop deletes some "
                                   "(and the content only they held).")
    p.add_argument("name", help="workspace name")
    p.add_argument("--drop", action="append", metavar="ID", default=[],
                   help="delete this checkpoint (repeatable)")
    p.set_defaults(handler=_checkpoints)

    p = sub.add_parser("rollback", parents=[common], help="bring a workspace back to a checkpoint",
                       description="Bring the workspace's content (or one path) back to a checkpoint; "
                                   "what is there now is saved as a checkpoint first.")
    p.add_argument("name", help="workspace name")
    p.add_argument("id", metavar="ID", help="the checkpoint's id (or a unique prefix of it)")
    p.add_argument("--path", metavar="P", help="only this file or folder (workspace-relative)")
    p.set_defaults(handler=_rollback)


def _checkpoint(ctx: Context, args: argparse.Namespace) -> Output:
    made = ctx.app.checkpoints.create(args.name, args.message)
    data = made.summary()
    return Output(data, render=lambda d: f"checkpoint {d['id']} of {d['workspace']}: {d['files']} files, "
                                         f"{human_size(d['size'])} ({human_size(d['added_bytes'])} new)")


def _checkpoints(ctx: Context, args: argparse.Namespace) -> Output:
    if args.drop:
        done = ctx.app.checkpoints.drop(args.name, args.drop)
        return Output(done, render=lambda d: f"dropped {', '.join(d['dropped'])} of {d['workspace']} "
                                             f"(freed {human_size(d['freed'])})")
    found = [m.summary() for m in reversed(ctx.app.checkpoints.list(args.name))]

    def render(data: list[dict[str, Any]]) -> str:
        if not data:
            return f"no checkpoints of {args.name} yet: `warden checkpoint {args.name} -m TEXT` makes one"
        return table(["ID", "When", "Who", "Files", "Size", "Message"],
                     [[d["id"], d["created_at"][:19].replace("T", " "), d["actor"], d["files"],
                       human_size(d["size"]), d["message"]] for d in data])

    return Output(found, render=render)


def _rollback(ctx: Context, args: argparse.Namespace) -> Output:
    done = ctx.app.checkpoints.rollback(args.name, args.id, path=args.path)
    return Output(done, render=lambda d: (
        f"rolled {d['workspace']}{'' if d['path'] == '/' else ' ' + d['path']} back to {d['checkpoint']}: "
        f"{d['written']} written, {d['removed']} removed, {d['folders']} folders made "
        f"(what was there is checkpoint {d['saved_as']})" + (f"\n{d['warning']}" if d.get("warning") else "")))
