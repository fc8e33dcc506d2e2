"""`warden git NAME clone|status|diff|pull|stage|staged|push|discard`: git on a workspace.

Warden runs the person's git itself, hardened (no hooks, no fsmonitor, no pager or external
diff, no program the repository's config names); bots cannot write a `.git`, so their changes
reach the repository as proposals the person reviews (`stage` prints the diff) and pushes.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, margined, printable, table

if TYPE_CHECKING:
    from warden.services.git import GitService


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("git", parents=[common], help="clone, review and push a workspace's repository",
                       description="Git on a workspace, run by Warden with a hardened configuration; "
                                   "changes are staged as proposals with a diff, then pushed.")
    p.add_argument("name", help="workspace name")
    ops = p.add_subparsers(dest="op", metavar="OP", required=True, parser_class=type(p), prog="warden git NAME")

    cred = type(p)(add_help=False)  # the CLI's Parser: argparse's own imports shutil to size help
    cred.add_argument("--credential", metavar="SECRET",
                      help="the Warden secret holding the token for the remote's host (remembered at clone)")
    cred.add_argument("--username", help="the user name sent with the token (default x-access-token)")

    o = ops.add_parser("clone", parents=[common, cred], help="clone a repository into the (empty) workspace")
    o.add_argument("url", help="https://, ssh:// or file:// URL (never with a password in it)")
    o.add_argument("--branch", "-b", help="the branch to check out")
    o.set_defaults(handler=_clone)

    o = ops.add_parser("status", parents=[common], help="the branch and the changed files")
    o.set_defaults(handler=_status)

    o = ops.add_parser("diff", parents=[common], help="what `stage` would propose now (new files too)")
    o.set_defaults(handler=_diff)

    o = ops.add_parser("pull", parents=[common, cred], help="fetch and fast-forward the branch")
    o.set_defaults(handler=_pull)

    o = ops.add_parser("stage", parents=[common], help="propose the changes as one commit; prints its diff")
    o.add_argument("-m", "--message", required=True, help="the commit message")
    o.set_defaults(handler=_stage)

    o = ops.add_parser("staged", parents=[common], help="the proposals waiting; with an id, one in full")
    o.add_argument("id", nargs="?", help="a proposal: its whole message, files and diff")
    o.set_defaults(handler=_staged)

    o = ops.add_parser("push", parents=[common, cred], help="push a proposal (fast-forward only)")
    o.add_argument("id", nargs="?", help="the proposal (default: the only one waiting)")
    o.set_defaults(handler=_push)

    o = ops.add_parser("discard", parents=[common],
                       help="drop a proposal and restore its files to HEAD (not those another proposal carries)")
    o.add_argument("id", help="the proposal")
    o.set_defaults(handler=_discard)


def _git(ctx: Context) -> GitService:
    return ctx.app.git


def _clone(ctx: Context, args: argparse.Namespace) -> Output:
    result = _git(ctx).clone(args.name, args.url, branch=args.branch, credential=args.credential,
                             username=args.username)
    return Output(result.to_json(), render=lambda d: (
        f"cloned {d['url']} into {args.name}" + (f" ({d['branch']}, {d['files']} files)" if d["branch"] else "")))


def _status(ctx: Context, args: argparse.Namespace) -> Output:
    status = _git(ctx).status(args.name)

    def render(d: dict[str, Any]) -> str:
        where = d["branch"] or "(detached HEAD)"
        if d["upstream"]:
            where += f" → {d['upstream']}" + (f" (ahead {d['ahead']}, behind {d['behind']})"
                                               if d["ahead"] or d["behind"] else "")
        lines = [where] + [f"{c['code']} {c['path']}" for c in d["changes"]]
        return "\n".join(lines if d["changes"] else [*lines, "nothing changed"])

    return Output(status.to_json(), render=render)


def _diff(ctx: Context, args: argparse.Namespace) -> Output:
    result = _git(ctx).diff(args.name)
    # `text`, not `render`: a diff keeps its line breaks (any other control character is escaped).
    return Output(result.to_json(), result.diff.rstrip("\n") or "no changes")


def _pull(ctx: Context, args: argparse.Namespace) -> Output:
    result = _git(ctx).pull(args.name, credential=args.credential, username=args.username)
    return Output(result.to_json(), render=lambda d: (
        f"fast-forwarded {d['before'][:12]}..{d['after'][:12]} ({d['files']} files)" if d["updated"]
        else "already up to date"))


def _stage(ctx: Context, args: argparse.Namespace) -> Output:
    p = _git(ctx).stage(args.name, args.message)
    head = f"proposal {p.id} on {printable(p.branch)} ({len(p.files)} files): {printable(p.subject)}"
    return Output(p.to_json(), f"{head}\n\n{(p.diff or '').rstrip()}\n\n"
                                f"push it with `warden git {args.name} push {p.id}`")


def _staged(ctx: Context, args: argparse.Namespace) -> Output:
    if args.id:
        return _proposal(ctx, args)
    proposals = _git(ctx).staged(args.name)
    # The first line of each message, escaped, and how many more it has: the whole message is
    # one `staged ID` away (a bot's second paragraph is never out of sight).
    rows = [[p.id + (" (stale)" if p.stale else ""), p.branch, len(p.files), p.actor, p.created[:19], p.subject]
            for p in proposals]  # table() escapes every cell
    text = table(["Id", "Branch", "Files", "By", "Created", "Message"], rows) if rows else "no proposals waiting"
    if any(p.stale for p in proposals):
        text += (f"\nstale: made on an older HEAD, they cannot be pushed; `warden git {args.name} discard ID` "
                 "drops one without touching the working tree")
    return Output([p.to_json() for p in proposals], text)


def _proposal(ctx: Context, args: argparse.Namespace) -> Output:
    """One proposal in full: every line of its message (escaped), its files and its diff."""
    p = _git(ctx).proposal(args.name, args.id)
    lines = [f"proposal {p.id} on {printable(p.branch)} by {printable(p.actor)}, {p.created[:19]}"
             + (" (stale: made on an older HEAD)" if p.stale else ""),
             f"commit {p.commit}", "message:", *margined(p.message), "files:",
             *(f"  {status} {printable(path)}" for status, path in p.files), "",
             *(printable(line) for line in (p.diff or "").rstrip("\n").split("\n"))]
    return Output(p.to_json(), "\n".join(lines))



def _push(ctx: Context, args: argparse.Namespace) -> Output:
    result = _git(ctx).push(args.name, args.id, credential=args.credential, username=args.username)
    return Output(result.to_json(), render=lambda d: (
        f"pushed {d['id']} as {d['commit'][:12]} to {d['remote']}/{d['branch']}"
        + (f"; now stale (made on the old HEAD): {', '.join(d['stale'])}" if d["stale"] else "")))


def _discard(ctx: Context, args: argparse.Namespace) -> Output:
    result = _git(ctx).discard(args.name, args.id)

    def render(d: dict[str, Any]) -> str:
        if d["stale"]:
            return (f"discarded {d['id']}, made on an older HEAD: the working tree was left as it is "
                    f"(the commit stays under {d['ref']})")
        text = f"discarded {d['id']}; restored {len(d['restored'])} file(s) to HEAD"
        if d["kept"]:
            text += f"; kept {len(d['kept'])} changed since staging: " + ", ".join(d["kept"][:10])
        if d["shared"]:
            text += (f"; left {len(d['shared'])} that another waiting proposal carries as it is: "
                     + ", ".join(d["shared"][:10]))
        return text + f" (the commit stays under {d['ref']})"

    return Output(result.to_json(), render=render)
