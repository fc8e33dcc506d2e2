"""`warden template list|show|validate` and `warden snapshot build|list|prune` (env layers)."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, human_size, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("template", parents=[common], help="workspace templates (seed 001 YAML)")
    tsub = p.add_subparsers(dest="template_command", metavar="COMMAND")
    q = tsub.add_parser("list", parents=[common], help="list bundled and user templates")
    q.set_defaults(handler=_list)
    q = tsub.add_parser("show", parents=[common], help="show one template")
    q.add_argument("name", help="template name or YAML file")
    q.set_defaults(handler=_show)
    q = tsub.add_parser("validate", parents=[common], help="check a template file")
    q.add_argument("file")
    q.set_defaults(handler=_validate)

    p = sub.add_parser("snapshot", parents=[common], help="env layers built from templates")
    ssub = p.add_subparsers(dest="snapshot_command", metavar="COMMAND")
    q = ssub.add_parser("build", parents=[common], help="build a template's layers now")
    q.add_argument("template", nargs="?", help="template name or YAML file (default: workspace.default_template)")
    q.add_argument("--python", help="Python version X.Y")
    q.add_argument("--node", help="Node.js major version")
    q.add_argument("--rebuild", action="store_true", help="build again even if the layers exist")
    q.set_defaults(handler=_build)
    q = ssub.add_parser("list", parents=[common], help="list layers and the workspaces using them")
    q.set_defaults(handler=_layers)
    q = ssub.add_parser("prune", parents=[common], help="remove layers no workspace uses")
    q.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    q.set_defaults(handler=_prune)


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    catalog = ctx.app.layers.catalog
    data = []
    for located in catalog.files():
        try:
            template = catalog.parse(located)
            description, error = template.description, None
        except Exception as exc:  # one broken user template must not hide the others
            description, error = "", getattr(exc, "message", str(exc))
        data.append({"name": located.name, "origin": located.origin, "path": str(located.path),
                     "description": description, "error": error})
    return Output(data, render=lambda d: table(
        ["Name", "Origin", "Description"],
        [[t["name"], t["origin"], t["description"] if not t["error"] else f"INVALID: {t['error']}"] for t in d]))


def _show(ctx: Context, args: argparse.Namespace) -> Output:
    template, located = ctx.app.layers.catalog.load(args.name)
    data = {**template.to_json(), "origin": located.origin, "path": str(located.path)}

    def render(d: dict[str, Any]) -> str:
        lines = [f"name: {d['name']}  ({d['origin']}: {d['path']})", f"description: {d['description']}"]
        if d["python"]:
            version = d["python"]["version"] or "(Warden's own interpreter)"
            lines.append(f"python {version}: " + (", ".join(d["python"]["dependencies"]) or "no packages"))
        if d["nodejs"]:
            deps = ", ".join(f"{k}@{v}" for k, v in d["nodejs"]["dependencies"].items())
            lines.append(f"nodejs {d['nodejs']['version'] or ''} ({d['nodejs']['runtime']}): {deps or 'no packages'}")
        if d["security"]:
            lines.append(f"security: {d['security']}")
        return "\n".join(lines)

    return Output(data, render=render)


def _validate(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.services.templates import TemplateCatalog

    template = TemplateCatalog(ctx.app.home.templates).validate_file(args.file)
    return Output({"valid": True, **template.to_json()}, f"{args.file}: valid template {template.name!r}")


def _build(ctx: Context, args: argparse.Namespace) -> Output:
    resolution, infos = ctx.app.layers.build(args.template, python=args.python, node=args.node,
                                             rebuild=args.rebuild)
    data = {"template": resolution.template.name, "layers": [
        {"id": info["id"], "kind": info["kind"], "path": str(ctx.app.layers.store.path(info["id"])),
         "size": info.get("size", 0), "packages": info.get("packages", info.get("links", [])),
         "built_at": info.get("built_at")} for info in infos.values()]}
    return Output(data, render=lambda d: "\n".join(
        f"layer {layer['id']} ({layer['kind']}, {len(layer['packages'])} packages, {human_size(layer['size'])}) "
        f"ready at {layer['path']}" for layer in d["layers"]) or f"template {d['template']} needs no layer")


def _layers(ctx: Context, args: argparse.Namespace) -> Output:
    data = ctx.app.layers.list(ctx.app.lifecycle.layers_in_use())
    return Output(data, render=lambda d: table(
        ["Layer", "Kind", "Template", "Packages", "Size", "Built", "Workspaces"],
        [[r["id"], r["kind"], r["template"] or "-", r["packages"], human_size(r["size"]), str(r["built_at"])[:19],
          ", ".join(r["workspaces"]) or "-"] for r in d]) if d else "no layers built yet (`warden snapshot build`)")


def _prune(ctx: Context, args: argparse.Namespace) -> Output:
    removed = ctx.app.layers.prune(ctx.app.lifecycle.layers_in_use(), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    data = {"dry_run": args.dry_run, "removed": [r["id"] for r in removed],
            "freed": sum(r["size"] for r in removed)}
    return Output(data, f"{verb} {len(removed)} layers ({human_size(data['freed'])})"
                  + "".join(f"\n  {r}" for r in data["removed"]))
