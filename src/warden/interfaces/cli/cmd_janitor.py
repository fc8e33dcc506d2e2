"""`warden janitor [--once] [--dry-run]`: the cleanup rules applied (services/janitor.py); every
`janitor.interval` until Ctrl-C, or one pass with --once. `warden serve` runs it too."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from warden.core.errors import Locked, Unavailable
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, printable

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("janitor", parents=[common],
                       help="clean up on its own: idle and expired workspaces, old grants and approvals, leftovers")
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--dry-run", action="store_true", help="say what a pass would do; change nothing")
    p.set_defaults(handler=_janitor)


def _lines(report: dict[str, Any]) -> list[str]:
    if not report["ran"]:
        return ["another janitor is at work; nothing done"]
    verb = "would" if report["dry_run"] else "did"
    lines = []
    for chore in report["chores"]:
        if chore.get("new") is False:
            continue
        failed = f": not done ({printable(chore['error'])})" if chore.get("done") is False else ""
        lines.append(f"{verb} {chore['action']} {chore['workspace']} ({chore['reason']} since {chore['since'][:19]})"
                     f"{failed}")
    if report["approvals_expired"]:
        lines.append(f"expired {len(report['approvals_expired'])} approval request(s)")
    if report.get("instances_dead"):
        lines.append(f"released {len(report['instances_dead'])} dead Warden process(es)")
    if report["grants_purged"]:
        lines.append(f"purged {len(report['grants_purged'])} ended grant(s)")
    if report["disk_alert"]:
        lines.append(f"warning: the disk of Warden's home is {report['disk_percent']}% full "
                     "(cleanup.disk_alert_percent)")
    return lines or [f"nothing to do (disk {report['disk_percent']}% full)"]


def _janitor(ctx: Context, args: argparse.Namespace) -> Output:
    janitor = ctx.app.janitor
    if args.once or args.dry_run:
        report = janitor.run(dry_run=args.dry_run).to_json()
        return Output(report, text="\n".join(_lines(report)))
    interval = max(ctx.app.settings.get_seconds("janitor.interval"), 1.0)
    passes = 0
    with ctx.app.instances.registered("command", terminal=ctx.app.terminal):  # a long command: it beats
        while True:  # until Ctrl-C (main says "interrupted", 130)
            try:
                report = janitor.run().to_json()
            except (Unavailable, Locked) as exc:
                # A full disk, a registry held by another process: this pass's trouble, not the
                # janitor's end (it ended at the first, exit 1, and cleaned up no more). Said, and
                # the next pass tries again.
                sys.stderr.write(f"{time.strftime('%H:%M:%S')} warden: this pass stopped: {exc.message}; "
                                 f"the next in {interval:g} s\n")
                sys.stderr.flush()
                time.sleep(interval)
                continue
            passes += 1
            if not ctx.json:
                for line in _lines(report):
                    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {line}\n")
                sys.stdout.flush()
            time.sleep(interval)
