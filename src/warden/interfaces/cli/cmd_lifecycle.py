"""`warden health|install|suspend|resume|archive|unarchive|cleanup`."""

from __future__ import annotations

import argparse
from typing import Any

from warden.core.errors import WardenError
from warden.interfaces.cli.main import Context, UsageError, add_workspace
from warden.interfaces.cli.output import Output, human_size


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("health", parents=[common], help="check a workspace (and repair it)")
    add_workspace(p)
    p.add_argument("--all", action="store_true", dest="every",
                   help="every workspace of this node but the archived ones (after a restore into another home)")
    p.add_argument("--repair", action="store_true", help="fix what can be fixed")
    p.set_defaults(handler=_health)

    p = sub.add_parser("install", parents=[common], help="add packages to a workspace (sandboxed)")
    p.add_argument("name")
    p.add_argument("packages", nargs="+", metavar="PACKAGE")
    p.add_argument("--node", action="store_true", help="Node.js packages (npm) instead of Python")
    p.add_argument("--no-persist", action="store_true",
                   help="do not record them in pyproject.toml / package.json")
    p.set_defaults(handler=_install)

    for name, text in (("suspend", "stop a workspace's processes"), ("resume", "check, repair and reopen"),
                       ("archive", "pack a workspace to archives/ and free its folder"),
                       ("unarchive", "restore an archived workspace")):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("name")
        p.set_defaults(handler=_simple, operation=name)

    p = sub.add_parser("cleanup", parents=[common], help="archive idle workspaces, drop idle temporary ones")
    p.add_argument("--older-than", required=True, metavar="DURATION", help="idle time, e.g. 7d")
    p.add_argument("--dry-run", action="store_true", help="only say what would happen")
    p.set_defaults(handler=_cleanup)


def _render_health(d: dict[str, Any]) -> str:
    def mark(v: object) -> str:
        return "-" if v is None else ("yes" if v else "NO")

    lines = [f"workspace {d['name']} ({d['status']}): {'healthy' if d.get('healthy') else 'needs attention'}",
             f"  configured:            {mark(d['configured'])}",
             f"  python venv:           {mark(d['python_venv'])}",
             f"  python deps installed: {mark(d['python_deps_installed'])}",
             f"  node_modules:          {mark(d['node_modules'])}",
             f"  node deps installed:   {mark(d['node_deps_installed'])}",
             f"  disk usage:            {human_size(d['disk_usage'])}"]
    for layer in d.get("layers", []):
        state = "read-only" if layer["read_only"] else ("WRITABLE" if layer["present"] else "MISSING")
        lines.append(f"  layer {layer['id']}: {state}")
    for item in d.get("fixed", []):
        lines.append(f"  fixed: {item}")
    for item in d.get("failed", []):
        lines.append(f"  could not fix: {item}")
    if not d.get("failed"):
        lines.extend(f"  issue: {i}" for i in d["issues"])
    lines.extend(f"  policy: {p}" for p in d.get("policy", []))
    return "\n".join(lines)


def _health(ctx: Context, args: argparse.Namespace) -> Output:
    if args.every:
        return _health_of_all(ctx, args)
    result = ctx.app.lifecycle.health(args.name, repair=args.repair)
    return Output(result.to_json(), render=_render_health, exit_code=0 if result.usable else 1)


def _health_of_all(ctx: Context, args: argparse.Namespace) -> Output:
    """Each workspace in turn: one that cannot be checked or repaired (an adopted folder, one in
    use) is said so and the others go on; exit 1 unless every one is healthy."""
    if args.name or args.workspace_option:
        raise UsageError("name a workspace or give --all, not both")
    reports: list[dict[str, Any]] = []
    for record in ctx.app.workspaces.list():
        if record.status == "archived" or (record.node and record.node != ctx.app.node):
            continue
        try:
            reports.append(ctx.app.lifecycle.health(record.name, repair=args.repair).to_json())
        except WardenError as exc:
            reports.append({"name": record.name, "status": record.status, "healthy": False,
                            "error": {"code": exc.code, "message": exc.message}})
    healthy = all(r.get("healthy") for r in reports)

    def render(d: dict[str, Any]) -> str:
        if not d["workspaces"]:
            return "no workspaces to check"
        return "\n".join(f"workspace {r['name']} ({r['status']}): {r['error']['message']}" if "error" in r
                         else _render_health(r) for r in d["workspaces"])

    return Output({"workspaces": reports, "healthy": healthy}, render=render, exit_code=0 if healthy else 1)


def _install(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.interfaces.cli.progress import installing

    with installing(f"installing into {args.name}", len(args.packages), enabled=not ctx.json) as (out, err):
        result = ctx.app.installs.install(args.name, args.packages, node=args.node, persist=not args.no_persist,
                                          on_stdout=out, on_stderr=err)
    return Output(result.to_json(), render=lambda d: (
        f"installed {', '.join(d['packages'])} into {d['name']}"
        + (f" and recorded in {d['recorded_in']}" if d.get("recorded_in") else "")),
        exit_code=0 if result.ok else 1)


def _simple(ctx: Context, args: argparse.Namespace) -> Output:
    lifecycle = ctx.app.lifecycle
    operation = args.operation
    if operation == "archive":  # packing a big folder takes a while: a bar on stderr (none with --json)
        data: dict[str, Any] = lifecycle.archive(args.name, progress=not ctx.json).to_json()
    else:
        data = getattr(lifecycle, operation)(args.name).to_json()
    if operation == "suspend":
        count = len(data["stopped"])
        text = f"suspended {args.name} (stopped {count} process{'' if count == 1 else 'es'})"
    elif operation == "archive":
        if "size" in data:
            text = f"archived {args.name} to {data['archive']} ({human_size(data['size'])})"
        else:  # another archive did it (it won a race, or came before): its file, not measured here
            text = f"{args.name} was archived already" + (f", to {data['archive']}" if data["archive"] else "")
    elif operation == "resume":
        text = f"{args.name} is {data['status']}" + "".join(f"\n  fixed: {f}" for f in data["repaired"]) \
            + "".join(f"\n  could not fix: {f}" for f in data["failed"])
    else:
        text = f"unarchived {args.name} at {data['path']} ({data['status']})" \
            + "".join(f"\n  could not fix: {f}" for f in data["failed"])
    return Output(data, text, exit_code=0 if data.get("status") != "broken" else 1)


def _cleanup(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.durations import parse_duration

    data = ctx.app.lifecycle.cleanup(parse_duration(args.older_than), dry_run=args.dry_run).to_json()
    data["older_than"] = "".join(args.older_than.split())  # as typed ("7d"), not the service's "1w"

    def render(d: dict[str, Any]) -> str:
        if not d["actions"]:
            return f"nothing idle for more than {d['older_than']}"
        verb = "would" if d["dry_run"] else "did"
        lines = [f"{verb} {a['action']} {a['name']} ({a['reason']}, last used {a['last_accessed'][:19]})"
                 + ("" if a.get("done", True) else f": FAILED {a.get('error')}") for a in d["actions"]]
        return "\n".join(lines)

    return Output(data, render=render)
