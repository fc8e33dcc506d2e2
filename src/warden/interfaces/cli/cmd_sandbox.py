"""`warden sandbox list|add|remove|forget|check`: allowed/denied host paths at three levels.

`add` allows a path at a level and drops it from that level's denied list; `remove` denies
it and drops it from the allowed list; `forget` drops it from both, so the other levels decide
it again. The level defaults to the narrowest one the flags name (session, else workspace,
else global). `check` prints the decision and its rule and exits 3 when the answer is deny.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from warden.core.errors import InvalidInput
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table

if TYPE_CHECKING:
    from warden.core.workspaces import WorkspaceRecord

DENIED_EXIT = 3


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("sandbox", parents=[common], help="allowed and denied paths (global, workspace, session)")
    ops = p.add_subparsers(dest="op", metavar="OP", required=True, parser_class=type(p))

    def scoped(name: str, help_text: str) -> argparse.ArgumentParser:
        o: argparse.ArgumentParser = ops.add_parser(name, parents=[common], help=help_text)
        o.add_argument("--workspace", help="workspace name")
        o.add_argument("--session", help="session id (needs --workspace)")
        return o

    o = scoped("list", "show the effective paths of every level")
    o.set_defaults(handler=_list)

    for name, help_text, handler in (("add", "allow a path (and drop it from the denied list)", _add),
                                     ("remove", "deny a path (and drop it from the allowed list)", _remove),
                                     ("forget", "drop a path from both lists of a level (undoes add or remove)",
                                      _forget)):
        o = scoped(name, help_text)
        o.add_argument("path")
        o.add_argument("--level", choices=["global", "workspace", "session"],
                       help="which file to change (default: the narrowest one given)")
        if name == "add":
            o.add_argument("--mode", choices=["ro", "rw"], default="rw", help="read-only or read-write (default rw)")
        o.set_defaults(handler=handler)

    o = scoped("check", "decide a path as Warden would and name the rule (exit 3 when denied)")
    o.add_argument("path", help="a host path (relative: to the workspace folder with --workspace)")
    o.add_argument("--op", choices=["read", "write", "delete"], default="read")
    o.set_defaults(handler=_check)


def _record(ctx: Context, args: argparse.Namespace) -> WorkspaceRecord | None:
    return ctx.app.workspaces.get(args.workspace) if args.workspace else None


def _host_path(raw: str, base: str | None = None) -> str:
    if not raw.strip():
        # An empty word would become the current folder: never what anyone meant to allow.
        raise InvalidInput("empty path: give the folder or file, e.g. /srv/data or ./data")
    path = os.path.expanduser(raw)
    if not os.path.isabs(path):
        path = os.path.join(base or os.getcwd(), path)
    return path


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    record = _record(ctx, args)
    rules = ctx.app.sandbox_paths.rules(record, args.session).all()
    data = [r.to_json() for r in rules]

    def render(rows: list[dict[str, Any]]) -> str:
        body = table(["Path", "Action", "Source"],
                     [[r["path"], r["action"].upper() + (" (ro)" if r["mode"] == "ro" else ""), r["source"]]
                      for r in rows])
        note = "" if rows else "\n(none yet: `warden sandbox add PATH` allows one, `sandbox remove PATH` denies one)"
        return "Effective Sandbox Paths:\n\n" + body + note

    return Output(data, render=render)


def _add(ctx: Context, args: argparse.Namespace) -> Output:
    record = _record(ctx, args)
    rule = ctx.app.sandbox_paths.add(_host_path(args.path), level=args.level, workspace=record,
                                     session=args.session, mode=args.mode)
    # A deny always wins, so an allow under a protected system path or another level's deny is
    # written but changes nothing: said at once, not found out from a run that still cannot see it.
    overruled = ctx.app.sandbox_paths.overruled(rule.path, workspace=record, session=args.session)
    text = f"allowed {rule.path} ({rule.mode}) at level {rule.level}"
    if overruled is not None:
        text += (f"\nnote: runs still do not get {rule.path}: {overruled} wins over any allow "
                 "(`warden sandbox check PATH --op read` shows the rule)")
    elif not os.path.exists(rule.path):
        # A missing allowed path is simply not mounted (adapters/sandbox/mountsrc.py), and a run
        # then fails "No such file or directory" with nothing to say why: a typo is said at once.
        text += f"\nnote: {rule.path} does not exist on this host (yet); runs get it once it does"
    return Output({**rule.to_json(), "overruled_by": overruled}, text)


def _remove(ctx: Context, args: argparse.Namespace) -> Output:
    rule = ctx.app.sandbox_paths.remove(_host_path(args.path), level=args.level, workspace=_record(ctx, args),
                                        session=args.session)
    return Output(rule.to_json(), f"denied {rule.path} at level {rule.level}")


def _forget(ctx: Context, args: argparse.Namespace) -> Output:
    record = _record(ctx, args)
    dropped = ctx.app.sandbox_paths.forget(_host_path(args.path), level=args.level, workspace=record,
                                           session=args.session)
    path, level = dropped[0].path, dropped[0].level
    was = " and ".join("allowed" + (f" ({rule.mode})" if rule.mode == "ro" else "") if rule.action == "allow"
                       else "denied" for rule in dropped)
    # What it comes to now: another level's entry, a protected path, or nothing (outside every list).
    decision = ctx.app.sandbox_paths.decide(path, "read", workspace=record, session=args.session)
    now = "runs may read it" if decision.allowed else "runs do not get it"
    return Output({"path": path, "level": level, "was": [rule.to_json() for rule in dropped],
                   "now": decision.to_json()},
                  f"forgot {path} at level {level} (it was {was}); now {now}: {decision.rule}")


def _check(ctx: Context, args: argparse.Namespace) -> Output:
    record = _record(ctx, args)
    path = _host_path(args.path, record.path if record else None)
    decision = ctx.app.sandbox_paths.check(path, args.op, workspace=record, session=args.session)
    from warden.core.paths import normalize  # lazily, as every import of a command module

    data = {"path": normalize(path), "op": args.op, **decision.to_json()}
    return Output(data, f"{decision.decision} {args.op} {data['path']}\nrule: {decision.rule}",
                  exit_code=0 if decision.allowed else DENIED_EXIT)
