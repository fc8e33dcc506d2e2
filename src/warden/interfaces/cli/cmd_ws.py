"""`warden ws set|current|back|forward|history|list` and `warden @NAME`: this terminal's current
workspace (services/context.py). The terminal is `WARDEN_TERMINAL` when set, else its session."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, printable, table

__all__ = ["register"]


_SH = r"""# Warden's shell integration (`eval "$(warden shell-init {shell})"` in your shell's rc file):
# `warden cd` goes to this terminal's current workspace (`warden cd src`: a folder of it);
# `warden ws restore [LABEL]` puts this shell back where `warden ws snapshot` saved it;
# `warden_ws` prints the current workspace's name, for a prompt: PS1='$(warden_ws) '"$PS1"
warden() {{
  if [ "$1" = cd ]; then
    shift
    local __warden_dir
    __warden_dir="$(command warden ws current --field path)" || return
    builtin cd -- "$__warden_dir${{1:+/$1}}"
  elif [ "$1" = ws ] && [ "$2" = restore ]; then
    local __warden_lines
    __warden_lines="$(command warden "$@")" || return
    eval "$__warden_lines"
  else
    command warden "$@"
  fi
}}
warden_ws() {{ command warden ws current --field name 2>/dev/null; }}
"""

_FISH = r"""# Warden's shell integration (`warden shell-init fish | source` in config.fish):
# `warden cd`, `warden ws restore [LABEL]`, and `warden_ws` for a prompt, as in bash.
function warden
    if test "$argv[1]" = cd
        set -l dir (command warden ws current --field path); or return
        if test -n "$argv[2]"
            builtin cd -- "$dir/$argv[2]"
        else
            builtin cd -- "$dir"
        end
    else if test "$argv[1]" = ws; and test "$argv[2]" = restore
        command warden $argv --shell fish | source
    else
        command warden $argv
    end
end
function warden_ws
    command warden ws current --field name 2>/dev/null
end
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("shell-init", parents=[common],
                       help="shell functions for `warden cd`, `ws restore` and a prompt segment (eval it)")
    p.add_argument("shell", choices=["bash", "zsh", "fish"])
    p.set_defaults(handler=_shell_init)
    p = sub.add_parser("ws", parents=[common], help="this terminal's current workspace (`warden @NAME` sets it)")
    # Bare `warden ws` is `warden ws current`, as bare `git branch` shows the branch.
    p.set_defaults(handler=_current, field=None)
    ops = p.add_subparsers(dest="op", metavar="OP", parser_class=type(p))
    o = ops.add_parser("set", parents=[common], help="make a workspace this terminal's current one")
    o.add_argument("target", metavar="NAME|PATH",
                   help="a workspace's name (or an unambiguous part of it), or a path inside its folder")
    o.set_defaults(handler=_set)
    o = ops.add_parser("current", parents=[common], help="this terminal's current workspace")
    o.add_argument("--field", choices=["name", "path"], help="print only this (for scripts and prompts)")
    o.set_defaults(handler=_current)
    o = ops.add_parser("snapshot", parents=[common],
                       help="save where you are in the current workspace: folder, chosen variables, git branch")
    o.add_argument("label", nargs="?", help="a name for it (default: the time)")
    o.add_argument("--env", action="append", default=[], metavar="NAME",
                   help="a variable of this shell to keep (repeat; never a secret)")
    o.set_defaults(handler=_snapshot)
    o = ops.add_parser("restore", parents=[common],
                       help="print the shell lines that go back to a saved state (run through `warden shell-init`)")
    o.add_argument("label", nargs="?", help="which (default: the latest)")
    o.add_argument("--shell", choices=["sh", "fish"], default="sh")
    o.set_defaults(handler=_restore)
    o = ops.add_parser("export", parents=[common],
                       help="the current workspace's template and saved states as one pipeable line")
    o.set_defaults(handler=_export)
    o = ops.add_parser("import", parents=[common],
                       help="make a workspace from `warden ws export` output on stdin (another home's)")
    o.add_argument("--name", help="call it this here (default: its name there)")
    o.set_defaults(handler=_import)
    for word, text, handler in (("back", "go back to the previous workspace of this terminal", _back),
                                ("forward", "go forward again after `ws back`", _forward),
                                ("history", "this terminal's recent workspaces, most recent first", _history),
                                ("list", "every workspace, this terminal's current one marked", _list)):
        ops.add_parser(word, parents=[common], help=text).set_defaults(handler=handler)


def _said(ctx: Context, name: str) -> Output:
    record = ctx.app.workspaces.get(name)
    return Output({"name": record.name, "path": record.path, "terminal": ctx.app.context.terminal},
                  text=f"{record.name}  {record.path}")


def _set(ctx: Context, args: argparse.Namespace) -> Output:
    # A path no workspace holds is adopted: a new workspace, made by a command that reads as a
    # switch (`warden ws set src/` from the wrong folder), so it is said, with the way back.
    known = {r.name for r in ctx.app.workspaces.list()} if "/" in args.target else None
    record = ctx.app.context.set(args.target)
    if known is not None and record.name not in known:
        ctx.note(f"adopted {record.path} as a new workspace {record.name} (in place: its files stay where they "
                 f"are; `warden destroy {record.name} --yes` forgets it and leaves them)")
    if record.type == "bot":
        # A bot chooses its workspaces' names, so one may be what the person typed: say whose it is.
        ctx.note(f"note: {record.name} is a workspace a bot made ({record.created_by or 'unknown'})")
    return _said(ctx, record.name)


def _current(ctx: Context, args: argparse.Namespace) -> Output:
    now = ctx.app.context.require_current()
    assert now.name is not None
    said = _said(ctx, now.name)
    if args.field:
        said.text = str(said.data[args.field])
    return said


def _snapshot(ctx: Context, args: argparse.Namespace) -> Output:
    import os

    record, snap = ctx.app.context.snapshot(args.label, folder=os.getcwd(), variables=args.env,
                                            environ=ctx.environ)
    branch = f", on branch {snap.git_branch}" if snap.git_branch else ""
    return Output({"workspace": record.name, **snap.to_json()},
                  text=f"saved {snap.label} of {record.name}: folder {snap.cwd}, {len(snap.env)} variable(s){branch}")


def _restore(ctx: Context, args: argparse.Namespace) -> Output:
    import sys

    from warden.core.context import restore_lines

    record, snap = ctx.app.context.restore(args.label)
    now = ctx.app.context.git_branch(record)
    if snap.git_branch and now != snap.git_branch:
        ctx.note(f"note: {record.name} was on branch {printable(snap.git_branch)} then, "
                 f"{printable(now or 'no branch')} now (restore does not switch branches)")
    if not ctx.json and sys.stdout.isatty():
        ctx.note("to go there, run `eval \"$(warden ws restore ...)\"`, or set up `warden shell-init`")
    return Output({"workspace": record.name, **snap.to_json(), "path": record.path},
                  text=restore_lines(record.path, snap, args.shell))


def _export(ctx: Context, args: argparse.Namespace) -> Output:
    blob = ctx.app.context.export()
    return Output({"blob": blob}, text=blob)


def _import(ctx: Context, args: argparse.Namespace) -> Output:
    import sys

    text = sys.stdin.read(1 << 20)

    def create(name: str, template: str | None, python: str | None) -> Any:
        return ctx.app.workspaces.create(name, template=template, python=python)

    record = ctx.app.context.import_blob(text, name=args.name, create=create)
    return Output({"name": record.name, "path": record.path}, text=f"imported {record.name}  {record.path}")


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


def _shell_init(ctx: Context, args: argparse.Namespace) -> Output:
    script = _FISH if args.shell == "fish" else _SH.format(shell=args.shell)
    return Output({"shell": args.shell, "script": script}, text=script)
