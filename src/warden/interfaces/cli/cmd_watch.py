"""`warden watch NAME`: a workspace's file changes as they happen, until Ctrl-C.

Text: one line per change (`added /src/a.py`), the lines of one debounced batch printed
together. `--json`: one JSON object per batch and line, as the events stream sends them
(`{"changes": [{"change": "added|modified|deleted", "path": "/x"}], "at", "count"[, "overflow"]}`),
and when watching ends by --count, --timeout or the workspace going, the usual envelope
`{"ok": true, "data": {"batches", "changes", "ended"}}` as the last line. Ctrl-C: "interrupted", 130.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from warden.core.errors import InvalidInput
from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output, printable

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="print a workspace's file changes as they happen",
                       description="One line per change (one JSON object per debounced batch with --json), "
                                   "until Ctrl-C, --count batches or --timeout. Changes in .git, .venv, "
                                   "node_modules and .warden are not shown.")
    add_workspace(p)
    p.add_argument("--count", "-n", type=int, metavar="N", help="stop after N batches")
    p.add_argument("--timeout", metavar="SECONDS", help="stop after this long (seconds, or 30s, 10m)")
    p.set_defaults(handler=_watch)


def _watch(ctx: Context, args: argparse.Namespace) -> Output:
    if args.count is not None and args.count < 1:
        raise InvalidInput("--count must be at least 1")
    deadline = None
    if args.timeout is not None:
        from warden.core.durations import parse_timeout

        deadline = time.monotonic() + parse_timeout(args.timeout)
    batches = changes = 0
    with ctx.app.watching.open(args.name) as watch:
        # On stderr, --json or not: a script (or a test) knows from it that changes now count.
        sys.stderr.write(f"watching {printable(args.name)} (Ctrl-C stops)\n")
        for note in watch.fresh_notes():
            sys.stderr.write(f"warden: {printable(note.message)}\n")
        sys.stderr.flush()
        while args.count is None or batches < args.count:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            batch = watch.next(left)
            for note in watch.fresh_notes():  # folders left unwatched meanwhile (limits)
                sys.stderr.write(f"warden: {printable(note.message)}\n")
            if batch is None:
                if watch.ended is not None:
                    break
                continue
            batches += 1
            changes += batch.count
            if ctx.json:
                sys.stdout.write(json.dumps(batch.to_json()) + "\n")
            else:
                sys.stdout.write("".join(printable(line) + "\n" for line in batch.lines()))
            sys.stdout.flush()
        ended = watch.ended
    data = {"batches": batches, "changes": changes, "ended": ended}
    if ended is not None:  # the workspace went (destroyed, archived, moved): a script should know
        sys.stderr.write(f"warden: stopped watching: workspace {printable(args.name)} is {ended}\n")
        return Output(data, streamed=True, exit_code=1)
    return Output(data, streamed=True)
