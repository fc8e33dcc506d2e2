"""`warden create`, `list`, `info`, `destroy`."""

from __future__ import annotations

import argparse
from typing import Any

from warden.core.errors import InvalidInput
from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output, human_size, table


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
    p.add_argument("--status", help="creating, ready, suspended, archived or broken")
    p.add_argument("--type", dest="kind", help="user, bot or temporary")
    p.add_argument("--names", action="store_true", help="only the names, one a line (scripts, shell completion)")
    p.add_argument("--size", action="store_true", help="also measure each workspace's size on disk (walks its files)")
    p.add_argument("--destroyed", action="store_true",
                   help="the destroyed workspaces kept as archives (`warden unarchive NAME` brings one back)")
    p.set_defaults(handler=_list)

    p = sub.add_parser("info", parents=[common], help="show one workspace")
    add_workspace(p)
    p.set_defaults(handler=_info)

    p = sub.add_parser("destroy", parents=[common], help="remove a workspace")
    p.add_argument("name")
    p.add_argument("--no-archive", action="store_true", help="do not keep an archive")
    p.add_argument("--delete", action="store_true",
                   help="an adopted folder (`warden ws set PATH`): delete its files too (else they stay)")
    p.add_argument("--yes", action="store_true", help="confirm")
    p.set_defaults(handler=_destroy)


def _read_blob(source: str) -> bytes:
    import sys

    from warden.core.errors import NotFound

    if source == "-":
        return sys.stdin.buffer.read()
    try:
        with open(source, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise NotFound(f"blob file {source!r} does not exist") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read blob file {source!r}: {exc.strerror}") from None


def _create(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.durations import parse_duration

    ttl = parse_duration(args.ttl) if args.ttl else None
    blob = _read_blob(args.blob) if args.blob else None
    record = ctx.app.workspaces.create(args.name, kind=args.kind, ttl=ttl, template=args.template,
                                       python=args.python, node=args.node, blob=blob, progress=not ctx.json)
    data = record.to_json()
    return Output(data, f"created workspace {record.name} at {record.path} (template {record.template})")


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.workspaces import STATUSES, TYPES

    if args.status and args.status not in STATUSES:
        raise InvalidInput(f"bad --status {args.status!r}: use one of {', '.join(STATUSES)}")
    if args.kind and args.kind not in TYPES:
        raise InvalidInput(f"bad --type {args.kind!r}: use one of {', '.join(TYPES)}")
    if args.destroyed:
        return _destroyed(ctx)
    records = ctx.app.workspaces.list(status=args.status, kind=args.kind)
    data = [r.to_json() for r in records]
    if args.names:
        return Output([r["name"] for r in data], render=lambda d: "\n".join(d))
    headers = ["Name", "Status", "Type", "Template", "Last accessed", "Expires", "Node", "Path"]
    if args.size:
        headers.insert(-1, "Size")
        for record, row in zip(records, data, strict=True):
            row["size"] = _size(ctx, record)
    shelved = len(ctx.app.workspaces.shelf.shelved())
    kept = (f"\n({shelved} destroyed workspace{'s' * (shelved != 1)} kept as archives: `warden list --destroyed`)"
            if shelved else "")

    def render(d: list[dict[str, Any]]) -> str:
        if not d:
            return "no workspaces (create one with `warden create NAME`)" + kept
        rows = [[r["name"], r["status"], r["type"], r["template"] or "-", str(r["last_accessed"])[:19],
                 str(r["expires"])[:19] if r.get("expires") else "never", r.get("node") or "-",
                 *([human_size(r["size"]["bytes"]) if r["size"] else "-"] if args.size else []), r["path"]]
                for r in d]
        return table(headers, rows) + kept

    return Output(data, render=render)


def _size(ctx: Context, record: Any) -> dict[str, int] | None:
    """What a workspace holds: its folder's bytes and files (an archived one: its archive's size)."""
    import os

    if record.status == "archived":
        archive = record.meta.get("archive") if isinstance(record.meta, dict) else None
        try:
            return {"bytes": os.stat(archive).st_size, "files": 1} if archive else None
        except OSError:
            return None
    try:
        usage = ctx.app.quota.usage(record.path)
    except OSError:
        return None
    return {"bytes": usage.bytes, "files": usage.files}


def _destroyed(ctx: Context) -> Output:
    import os

    data = []
    for item in ctx.app.workspaces.shelf.shelved():
        try:
            size: int | None = os.stat(item.archive).st_size
        except OSError:
            size = None
        data.append({"name": item.name, "destroyed": item.destroyed, "archive": item.archive, "size": size})
    return Output(data, render=lambda d: table(
        ["Name", "Destroyed (UTC)", "Size", "Archive"],
        [[r["name"], r["destroyed"], human_size(r["size"]) if r["size"] is not None else "-", r["archive"]]
         for r in d]) + "\n(`warden unarchive NAME` brings the newest of a name back)"
        if d else "no destroyed workspaces are kept as archives")


def _info(ctx: Context, args: argparse.Namespace) -> Output:
    # Another node's workspace is shown too (its folder is not touched): `node` says where it is.
    data = ctx.app.workspaces.get(args.name, anywhere=True).to_json()
    return Output(data, render=lambda d: _info_text(d, ctx.app.node))


def _info_text(data: dict[str, Any], here: str) -> str:
    """`key: value` lines; the node right after the status, saying whether it is this one."""
    lines = []
    for key, value in data.items():
        if value is None or key == "node":
            continue
        lines.append(f"{key}: {value}")
        if key == "status" and data.get("node"):
            where = "this node" if data["node"] == here else f"another node; this is {here}"
            lines.append(f"node: {data['node']} ({where})")
    return "\n".join(lines)


def _destroy(ctx: Context, args: argparse.Namespace) -> Output:
    if not args.yes:
        raise InvalidInput(f"destroying {args.name!r} needs --yes to confirm")
    adopted = bool(ctx.app.workspaces.get(args.name).meta.get("adopted"))
    data = ctx.app.workspaces.destroy(args.name, archive=not args.no_archive, delete=args.delete,
                                      progress=not ctx.json).to_json()
    kept = (f" (archive: {data['archive']}; `warden unarchive {args.name}` brings it back)"
            if data.get("archive") else "")
    if adopted and not args.delete:
        return Output(data, f"forgot workspace {args.name}; its folder and files stay where they are")
    return Output(data, f"destroyed workspace {args.name}{kept}")
