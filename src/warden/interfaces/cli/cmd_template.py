"""`warden template list|show|validate`: workspace templates, bundled and the user's."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("template", parents=[common], help="workspace templates (YAML files)")
    tsub = p.add_subparsers(dest="template_command", metavar="COMMAND")
    q = tsub.add_parser("list", parents=[common], help="list bundled and user templates")
    q.set_defaults(handler=_list)
    q = tsub.add_parser("show", parents=[common], help="show one template")
    q.add_argument("name", help="template name or YAML file")
    q.set_defaults(handler=_show)
    q = tsub.add_parser("validate", parents=[common], help="check a template file")
    q.add_argument("file")
    q.set_defaults(handler=_validate)


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
