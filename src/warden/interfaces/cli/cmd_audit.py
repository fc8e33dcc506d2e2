"""`warden audit` and `warden audit verify`."""

from __future__ import annotations

import argparse
from typing import Any

from warden.core.errors import Conflict, InvalidInput
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table

# The most events one listing shows (they are held in memory; `audit verify` streams instead).
MAX_LIMIT = 1_000_000


class AuditBroken(Conflict):
    """The stored log does not match its own hash chain: a row was edited, deleted or forged.

    Its code says what happened (`conflict`, not `internal`: Warden did not fail), while the
    exit status stays 1, "failed", rather than conflict's 5: there is nothing to retry or
    resolve, the log itself is damaged.
    """

    exit_status = 1


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("audit", parents=[common], help="list or verify the audit log")
    p.add_argument("action", nargs="?", choices=["verify"], help="verify the hash chain")
    p.add_argument("--workspace", help="only events about this workspace")
    p.add_argument("--limit", type=int, default=50, help="how many of the newest events (default 50)")
    p.add_argument("--anchor", metavar="SEQ:HASH",
                   help="with verify: a head printed earlier, kept elsewhere; catches deleted newest rows")
    p.set_defaults(handler=_audit)


def _audit(ctx: Context, args: argparse.Namespace) -> Output:
    log = ctx.app.audit
    if args.anchor is not None and args.action != "verify":
        raise InvalidInput("--anchor goes with `warden audit verify`")
    if args.action == "verify":
        from warden.core.audit import parse_anchor

        anchor = parse_anchor(args.anchor) if args.anchor is not None else None
        count, broken = log.verify(anchor)
        if broken is not None:
            raise AuditBroken(f"audit log broken at row {broken.seq}: {broken.reason} ({count} rows checked)")
        head = log.head()
        head_text = f"{head[0]}:{head[1]}" if head else None
        text = f"audit log intact: {count} rows, hash chain verified"
        if head_text:
            text += (f"\nhead {head_text}\n(keep it elsewhere; `warden audit verify --anchor` with it "
                     "later also catches deleted newest rows)")
        return Output({"rows": count, "ok": True, "head": head_text}, text)
    if not 1 <= args.limit <= MAX_LIMIT:
        raise InvalidInput(f"--limit must be between 1 and {MAX_LIMIT}")
    events = log.list(target=args.workspace, limit=args.limit)
    data = [{"seq": e.seq, "at": e.at, "actor": e.actor, "action": e.action, "target": e.target,
             "decision": e.decision, "rule": e.rule, "result": e.result, "detail": e.detail}
            for e in events]
    return Output(data, render=lambda d: table(
        ["Seq", "Time", "Actor", "Action", "Target", "Decision", "Rule", "Result"],
        [[r["seq"], r["at"][:19], r["actor"], r["action"], r["target"], r["decision"],
          r["rule"], r["result"]] for r in d]))
