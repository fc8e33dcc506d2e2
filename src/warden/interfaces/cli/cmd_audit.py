"""`warden audit` and `warden audit verify`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from warden.core.echo import json_printable
from warden.core.errors import Conflict, InvalidInput
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, printable, table

if TYPE_CHECKING:
    from datetime import datetime

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
    p.add_argument("--since", metavar="WHEN",
                   help="only events since then: a duration back from now (30m, 2h, 7d) or a date/time "
                        "(2026-05-01, 2026-05-01T12:00)")
    p.add_argument("--follow", "-f", action="store_true",
                   help="after the listing, print new events as they are recorded, until Ctrl-C")
    p.add_argument("--anchor", metavar="SEQ:HASH",
                   help="with verify: a head printed earlier, kept elsewhere; catches deleted newest rows")
    p.set_defaults(handler=_audit)


def _audit(ctx: Context, args: argparse.Namespace) -> Output:
    log = ctx.app.audit
    if args.anchor is not None and args.action != "verify":
        raise InvalidInput("--anchor goes with `warden audit verify`")
    if args.action == "verify" and (args.since or args.follow):
        raise InvalidInput("--since and --follow list events; `warden audit verify` checks the whole chain")
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
    cutoff = _since(args.since, log.now()) if args.since is not None else None
    events = log.list(target=args.workspace, limit=args.limit)
    if cutoff is not None:
        events = [e for e in events if _at(e.at) >= cutoff]
    data = [_row(e) for e in events]
    if args.follow:
        return _follow(ctx, args, data, events[-1].seq if events else (log.head() or (0, ""))[0])
    return Output(data, render=lambda d: table(_HEADERS, [_cells(r) for r in d]))


_HEADERS = ["Seq", "Time", "Actor", "Action", "Target", "Decision", "Rule", "Result"]
_FOLLOW_S = 0.5  # how often a follower asks the registry for new rows


def _row(e: Any) -> dict[str, Any]:
    return {"seq": e.seq, "at": e.at, "actor": e.actor, "action": e.action, "target": e.target,
            "decision": e.decision, "rule": e.rule, "result": e.result, "detail": e.detail}


def _cells(r: dict[str, Any]) -> list[Any]:
    return [r["seq"], r["at"][:19], r["actor"], r["action"], r["target"], r["decision"], r["rule"], r["result"]]


def _at(text: str) -> datetime:
    from datetime import UTC, datetime

    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _since(text: str, now: datetime) -> datetime:
    """`--since`: a duration back from `now`, or a date/time (UTC unless it names its zone)."""
    from warden.core.durations import parse_duration

    try:
        return now - parse_duration(text)
    except (InvalidInput, ValueError):
        pass
    try:
        return _at(text)
    except ValueError:
        raise InvalidInput(f"bad --since {text!r}: give a duration (30m, 2h, 7d) or a date/time "
                           "(2026-05-01, 2026-05-01T12:00)") from None


def _follow(ctx: Context, args: argparse.Namespace, shown: list[dict[str, Any]], last: int) -> Output:
    """Print what was listed, then each new event as it is recorded (one table line, or one JSON
    object a line with --json), until interrupted: Ctrl-C ends it with status 0."""
    import json
    import sys
    import time

    def emit(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if ctx.json:
                sys.stdout.write(json_printable(json.dumps(r, default=str, ensure_ascii=False)) + "\n")
            else:  # one line an event, columns as in the listing's order (its widths are unknown ahead)
                sys.stdout.write("  ".join(printable(str(c)) or "-" for c in _cells(r)) + "\n")
        sys.stdout.flush()

    if not ctx.json:
        sys.stdout.write("  ".join(_HEADERS) + "\n")
    emit(shown)
    try:
        while True:
            time.sleep(_FOLLOW_S)
            new = ctx.app.audit.after(last, target=args.workspace)
            if new:
                last = new[-1].seq
                emit([_row(e) for e in new])
    except KeyboardInterrupt:
        return Output(None, streamed=True)
