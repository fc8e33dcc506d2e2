"""`warden approvals|approve|deny`: the person's side of the approvals queue (services/approvals.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from warden.core.approvals import where
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, margined, printable, table

if TYPE_CHECKING:
    from warden.core.approvals import ApprovalRecord

__all__ = ["register"]

_PREVIEW_LINES = 200
_DELETE_SHOWN = 1 << 20  # a file to be deleted up to this size is shown as a diff to nothing


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("approvals", parents=[common], help="bots' requests waiting for your approval")
    p.add_argument("--workspace", "-w", metavar="NAME", help="only this workspace's requests")
    p.add_argument("--all", action="store_true", help="answered and expired requests too")
    p.add_argument("--show", metavar="ID", help="one request in full, with the change it would make as a diff")
    p.set_defaults(handler=_list)
    for verb, text in (("approve", "approve a request: Warden carries the operation out exactly as asked"),
                       ("deny", "deny a request: nothing is done")):
        p = sub.add_parser(verb, parents=[common], help=text)
        p.add_argument("id", help="the request's id (apr_…, see `warden approvals`)")
        p.add_argument("--note", help="a note kept with the answer in the audit log")
        p.set_defaults(handler=_approve if verb == "approve" else _deny)


def _render(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no requests waiting for approval"
    return table(("ID", "STATUS", "WORKSPACE", "BOT", "OPERATION", "PATH", "SIZE", "ASKED"),
                 [(r["id"], r["status"], r["workspace"], r["bot"], r["operation"],
                   where(r["path"], r.get("destination")),
                   "" if r["size"] is None else r["size"], r["created"][:19]) for r in rows])


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    approvals = ctx.app.approvals
    if args.show:
        return _show(ctx, approvals.get(args.show))
    if args.workspace:
        ctx.app.workspaces.get(args.workspace)  # not found: exit 4, not an empty list
    records = approvals.listed(workspace=args.workspace, everything=args.all)
    return Output([approvals.view(r) for r in records], render=_render)


def _show(ctx: Context, record: ApprovalRecord) -> Output:
    approvals = ctx.app.approvals
    view = approvals.view(record)
    # Every word a bot chose (its path above all: a file name may hold a line break) is escaped,
    # so nothing it wrote can pass for a line of Warden's own, a fake diff header say.
    lines = [f"{record.id}: {record.bot} asks to {record.op} {printable(where(record.path, record.destination))} "
             f"in workspace "
             f"{record.workspace} ({view['status']})",
             f"  zone{'s' if len(record.zones) > 1 else ''} {', '.join(z or '-' for z in record.zones)} · rule "
             f"{printable(record.rule)}",
             f"  asked {view['created'][:19]}, expires {view['expires'][:19]}"]
    if record.answered_by:
        lines.append(f"  answered by {printable(record.answered_by)}"
                     + (f": {printable(record.note)}" if record.note else ""))
    diff = _diff(ctx, record) if view["status"] == "pending" else None
    if diff is not None:
        lines.append(diff)
    return Output({**view, "diff": diff}, text="\n".join(lines))


def _diff(ctx: Context, record: ApprovalRecord) -> str | None:
    """The change a pending write or move would make, as a unified diff (text; a move's as the new
    file at its destination), or a one-line summary."""
    from warden.core.diffs import unified_diff

    if record.op == "git.push":
        from warden.core.errors import NotFound

        try:
            proposal = ctx.app.git.proposal(record.workspace, record.path)
        except NotFound:
            proposal = None
        if proposal is None or proposal.commit != record.detail.get("commit"):
            return "  (the proposal is gone or was staged again: approving it pushes nothing)"
        # The whole message that would be pushed, every line escaped behind a margin: no second
        # paragraph, trailer look-alike or escape sequence of a bot's stays out of sight.
        head = [f"  proposal {proposal.id} for {printable(proposal.branch)}, commit {proposal.commit}"
                + (" (stale: made on an older HEAD, approving it will fail)" if proposal.stale else ""),
                "  message:", *margined(proposal.message)]
        text = proposal.diff or "\n".join(f"{status} {path}" for status, path in proposal.files)
        return "\n".join([*head, *(printable(line) for line in text.split("\n"))])
    from warden.core.errors import NotFound, WardenError

    if record.op == "move" and record.destination is not None:
        # What would land at the destination: the file's bytes as they are now, which approving
        # places only while they are still the bytes the bot asked to move (their hash).
        from warden.core.approvals import content_digest

        try:
            new = ctx.app.files(record.workspace).read_bytes(record.path)
        except WardenError:
            return f"  (the file {printable(record.path)} is gone or no longer a file: approving it moves nothing)"
        if content_digest(new) != record.detail.get("source_sha256"):
            return (f"  (the file {printable(record.path)} changed since it was asked: approving it moves nothing; "
                    "deny it, and the bot may ask again)")
        shown, old = printable(record.destination), b""
    elif record.op == "delete":
        # What would go: a reviewer shown nothing approved the deletion of a file unseen.
        shown = printable(record.path)
        files = ctx.app.files(record.workspace)
        try:
            entry = files.stat(record.path)
        except NotFound:
            return f"  (nothing is at {shown} any more: approving it deletes nothing)"
        except WardenError as exc:
            return f"  (the current {shown} cannot be looked at: {printable(exc.message)})"
        if entry.type == "dir":
            try:
                count = len(files.list(record.path))
            except WardenError:
                return f"  deletes the folder {shown}"
            if record.detail.get("recursive"):
                return f"  deletes the folder {shown} and everything in it ({count} entries at its top)"
            return f"  deletes the folder {shown} only if it is empty (it holds {count} entries now)"
        if entry.type != "file" or entry.size > _DELETE_SHOWN or entry.size == 0:
            return f"  deletes the {entry.type} {shown} ({entry.size} bytes)"
        try:
            old, new = files.read_bytes(record.path), b""
        except WardenError:
            return f"  deletes the {entry.type} {shown} ({entry.size} bytes)"
    elif record.op == "write":
        shown = printable(record.path)
        new = ctx.app.approvals.content(record.id) or b""
        try:
            old = ctx.app.files(record.workspace).read_bytes(record.path)
        except NotFound:
            old = b""  # a new file
        except WardenError:  # a folder, a link: say so rather than guess
            return f"  (the current {shown} cannot be read as a file)"
    else:
        return None
    try:
        a, b = old.decode("utf-8").splitlines(keepends=True), new.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return f"  binary: {len(old)} bytes now, {len(new)} bytes asked"
    # Linear in the files' sizes (core/diffs.py): the bot chose the bytes, and difflib's own diff of
    # a crafted file took minutes.
    lines = [printable(line.removesuffix("\n")) for line in unified_diff(a, b, f"a{shown}", f"b{shown}")]
    if len(lines) > _PREVIEW_LINES:
        lines = [*lines[:_PREVIEW_LINES], f"… {len(lines) - _PREVIEW_LINES} more lines"]
    return "\n".join(lines) or "  (no change: the file already has these bytes)"


def _outcome(record: ApprovalRecord) -> str:
    # What is empty says nothing ("stale []" after a push that made no other proposal stale); a
    # list is words, as the rest of the line.
    done = printable(", ".join(f"{k} {', '.join(map(str, v)) if isinstance(v, list | tuple) else v}"
                               for k, v in record.outcome.items() if v not in (None, "", [], (), {})))
    said = (f"approved {record.id}: {record.op} {printable(where(record.path, record.destination))} "
            f"in {record.workspace} done")
    return said + (f" ({done})" if done else "")


def _approve(ctx: Context, args: argparse.Namespace) -> Output:
    approvals = ctx.app.approvals
    record = approvals.answer(args.id, approve=True, actor="user", note=args.note)
    return Output(approvals.view(record), text=_outcome(record))


def _deny(ctx: Context, args: argparse.Namespace) -> Output:
    approvals = ctx.app.approvals
    record = approvals.answer(args.id, approve=False, actor="user", note=args.note)
    said = f"denied {record.id}: {record.op} {printable(where(record.path, record.destination))} in {record.workspace}"
    return Output(approvals.view(record), text=said)
