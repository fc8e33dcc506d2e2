"""`warden fs NAME ls|cat|stat|write|rm|mkdir|versions|restore PATH`, `warden fs NAME mv SRC DST`: safe file
operations on a workspace.

PATH is workspace-relative ("/" is the workspace root). The CLI user is the local person,
so zones that `ask` for approval proceed as approved by them (and the audit log says so).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table

if TYPE_CHECKING:
    from warden.services.files import FileService

_SUFFIX = {"dir": "/", "symlink": "@", "fifo": "|", "socket": "=", "device": "#"}


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("fs", parents=[common], help="read and write a workspace's files safely",
                       description="Safe file operations; PATH is workspace-relative (/ is the workspace root).")
    p.add_argument("name", help="workspace name")
    # prog: usage and hints read `warden fs NAME write`, NAME a placeholder like PATH.
    ops = p.add_subparsers(dest="op", metavar="OP", required=True, parser_class=type(p), prog="warden fs NAME")

    o = ops.add_parser("ls", parents=[common], help="list a directory")
    o.add_argument("path", nargs="?", default="/")
    o.add_argument("-l", "--long", action="store_true", help="show type, size and time")
    o.set_defaults(handler=_ls)

    o = ops.add_parser("cat", parents=[common], help="print a file's bytes")
    o.add_argument("path")
    o.set_defaults(handler=_cat)

    o = ops.add_parser("stat", parents=[common], help="show what a path is")
    o.add_argument("path")
    o.set_defaults(handler=_stat)

    o = ops.add_parser("write", parents=[common], help="replace a file with standard input")
    o.add_argument("path")
    o.set_defaults(handler=_write)

    o = ops.add_parser("rm", parents=[common], help="delete a file, a link or an empty directory")
    o.add_argument("path")
    o.add_argument("-r", "--recursive", action="store_true", help="delete a directory and what it holds")
    o.set_defaults(handler=_rm)

    o = ops.add_parser("mkdir", parents=[common], help="create a directory (and its parents)")
    o.add_argument("path")
    o.set_defaults(handler=_mkdir)

    o = ops.add_parser("versions", parents=[common],
                       help="list the earlier contents Warden kept of a path (overwritten or deleted)")
    o.add_argument("path")
    o.set_defaults(handler=_versions)

    o = ops.add_parser("restore", parents=[common], help="write a kept version of a file back")
    o.add_argument("path")
    o.add_argument("version", nargs="?", metavar="VERSION", help="its id (default: the newest)")
    o.set_defaults(handler=_restore)

    o = ops.add_parser("mv", parents=[common], help="move or rename a file or directory (never over one)")
    o.add_argument("source")
    o.add_argument("destination")
    o.set_defaults(handler=_mv)


def _files(ctx: Context, args: argparse.Namespace) -> FileService:
    from warden.services.files import approve_local_user

    return ctx.app.files(args.name, approver=approve_local_user)


def _ls(ctx: Context, args: argparse.Namespace) -> Output:
    entries = [e.to_json() for e in _files(ctx, args).list(args.path)]

    def render(data: list[dict[str, Any]]) -> str:
        if args.long:
            return table(["Type", "Size", "Modified", "Name"],
                         [[e["type"], e["size"], e["mtime"][:19], e["name"] + _SUFFIX.get(e["type"], "")]
                          for e in data]) if data else ""
        return "\n".join(e["name"] + _SUFFIX.get(e["type"], "") for e in data)

    return Output(entries, render=render)


def _cat(ctx: Context, args: argparse.Namespace) -> Output:
    data = _files(ctx, args).read_bytes(args.path)
    if ctx.json:
        try:
            return Output({"path": args.path, "size": len(data), "encoding": "utf-8", "content": data.decode()})
        except UnicodeDecodeError:
            import base64

            return Output({"path": args.path, "size": len(data), "encoding": "base64",
                           "content": base64.b64encode(data).decode("ascii")})
    sys.stdout.flush()
    sys.stdout.buffer.write(data)  # raw bytes, unchanged: binary files survive `cat > copy`
    sys.stdout.buffer.flush()
    return Output({"path": args.path, "size": len(data)}, streamed=True)


def _stat(ctx: Context, args: argparse.Namespace) -> Output:
    entry = _files(ctx, args).stat(args.path).to_json()
    entry["path"] = args.path
    return Output(entry, render=lambda d: "\n".join(f"{k}: {d[k]}" for k in
                                                    ("path", "type", "size", "mode", "mtime", "nlink")))


def _write(ctx: Context, args: argparse.Namespace) -> Output:
    files = _files(ctx, args)
    # Read at most one byte past the limit: the size is refused before anything lands.
    # (the service refuses and audits an oversized write).
    data = sys.stdin.buffer.read(files.max_bytes + 1)
    size = files.write_bytes(args.path, data)
    return Output({"path": args.path, "size": size}, f"wrote {size} bytes to {args.path}")


def _rm(ctx: Context, args: argparse.Namespace) -> Output:
    kind = _files(ctx, args).delete(args.path, recursive=args.recursive)
    return Output({"path": args.path, "deleted": True, "type": kind}, f"deleted {args.path}")


def _mkdir(ctx: Context, args: argparse.Namespace) -> Output:
    created = _files(ctx, args).mkdir(args.path)
    return Output({"path": args.path, "created": created},
                  f"created {args.path}" if created else f"{args.path} already exists")


def _versions(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.interfaces.cli.output import human_size

    found = [v.to_json() for v in _files(ctx, args).list_versions(args.path)]

    def render(data: list[dict[str, Any]]) -> str:
        if not data:
            return f"no kept versions of {args.path}"
        return table(["ID", "When", "Who", "Op", "Size", "Path"],
                     [[d["id"], d["created_at"][:19].replace("T", " "), d["actor"], d["op"], human_size(d["size"]),
                       d["path"]] for d in data])

    return Output(found, render=render)


def _restore(ctx: Context, args: argparse.Namespace) -> Output:
    chosen = _files(ctx, args).restore_version(args.path, args.version)
    return Output({"path": args.path, "version": chosen.id, "size": chosen.size},
                  render=lambda d: f"restored {d['path']} to version {d['version']} ({d['size']} bytes)")


def _mv(ctx: Context, args: argparse.Namespace) -> Output:
    kind = _files(ctx, args).move(args.source, args.destination)
    return Output({"source": args.source, "destination": args.destination, "type": kind},
                  f"moved {args.source} to {args.destination}")
