"""`warden snapshot build|list|prune`: the env layers built from templates (the user's
"snapshots": a template's installed dependencies, built once and shared read-only)."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, human_size, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
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


def _build(ctx: Context, args: argparse.Namespace) -> Output:
    data = ctx.app.layers.build(args.template, python=args.python, node=args.node, rebuild=args.rebuild,
                                progress=not ctx.json).to_json()  # --json: no bar on stderr
    return Output(data, render=lambda d: "\n".join(
        f"layer {layer['id']} ({layer['kind']}, {_packages(len(layer['packages']))}, {human_size(layer['size'])}) "
        f"ready at {layer['path']}" for layer in d["layers"]) or f"template {d['template']} needs no layer")


def _packages(n: int) -> str:
    return "1 package" if n == 1 else f"{n} packages"


def _layers(ctx: Context, args: argparse.Namespace) -> Output:
    data = [row.to_json() for row in ctx.app.layers.list(ctx.app.lifecycle.layers_in_use())]
    return Output(data, render=lambda d: table(
        ["Layer", "Kind", "Template", "Packages", "Size", "Built", "Workspaces"],
        [[r["id"], r["kind"], r["template"] or "-", r["packages"], human_size(r["size"]), str(r["built_at"])[:19],
          ", ".join(r["workspaces"]) or "-"] for r in d]) if d else "no layers built yet (`warden snapshot build`)")


def _prune(ctx: Context, args: argparse.Namespace) -> Output:
    removed = ctx.app.layers.prune(ctx.app.lifecycle.layers_in_use, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    data = {"dry_run": args.dry_run, "removed": [r.id for r in removed], "freed": sum(r.size for r in removed)}
    return Output(data, f"{verb} {len(removed)} layers ({human_size(data['freed'])})"
                  + "".join(f"\n  {r}" for r in data["removed"]))
