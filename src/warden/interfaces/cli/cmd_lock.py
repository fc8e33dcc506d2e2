"""`warden lock|unlock|takeover|locks`: keep a workspace to this terminal for a while (services/locks.py).

While a workspace is locked, other terminals' runs are refused (126, `locked`), their changes
too (5), and bots' requests (HTTP 423); reads go on."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output, table

if TYPE_CHECKING:
    from warden.core.locks import TerminalLock

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("lock", parents=[common], help="keep a workspace to this terminal (others are refused)")
    add_workspace(p)
    p.add_argument("--ttl", help="how long without use before it lapses (default 2h; each use renews it)")
    p.add_argument("--reason", default="", help="said to whoever is refused")
    p.set_defaults(handler=_lock)
    p = sub.add_parser("unlock", parents=[common], help="give back this terminal's lock")
    add_workspace(p)
    p.set_defaults(handler=_unlock)
    p = sub.add_parser("takeover", parents=[common], help="take a workspace's lock from another terminal (audited)")
    add_workspace(p)
    p.add_argument("--ttl", help="how long without use before it lapses (default 2h)")
    p.add_argument("--reason", default="", help="said to whoever is refused")
    p.set_defaults(handler=_takeover)
    p = sub.add_parser("locks", parents=[common], help="the workspaces terminals hold locked")
    p.set_defaults(handler=_locks)


def _ttl(text: str | None) -> Any:
    if text is None:
        return None
    from warden.core.durations import parse_duration

    return parse_duration(text)


def _view(name: str, lock: TerminalLock, mine: str | None) -> dict[str, object]:
    return {"workspace": name, **lock.to_json(), "this_terminal": lock.terminal == mine}


def _still_running(ctx: Context, name: str) -> None:
    """A lock stops new changes, not processes already running there: say so when there are some."""
    running = [p for p in ctx.app.live.list(name) if p.status in ("starting", "running")]
    if running:
        ctx.note(f"note: {len(running)} background process(es) already running in {name} go on changing it "
                 f"(`warden ps {name}`, `warden kill {name} ID`)")


def _lock(ctx: Context, args: argparse.Namespace) -> Output:
    lock = ctx.app.locks.lock(args.name, ttl=_ttl(args.ttl), reason=args.reason)
    _still_running(ctx, args.name)
    return Output(_view(args.name, lock, ctx.app.terminal),
                  text=f"locked {args.name} to terminal {lock.terminal} until {lock.expires:%H:%M:%S} UTC "
                       "(each use renews it)")


def _unlock(ctx: Context, args: argparse.Namespace) -> Output:
    lock = ctx.app.locks.unlock(args.name)
    return Output(_view(args.name, lock, ctx.app.terminal), text=f"unlocked {args.name}")


def _takeover(ctx: Context, args: argparse.Namespace) -> Output:
    lock, previous = ctx.app.locks.takeover(args.name, ttl=_ttl(args.ttl), reason=args.reason)
    _still_running(ctx, args.name)
    said = f" from terminal {previous.terminal}" if previous is not None else " (it was not locked)"
    return Output({**_view(args.name, lock, ctx.app.terminal), "from": previous.terminal if previous else None},
                  text=f"took over {args.name}{said}; locked to terminal {lock.terminal}")


def _locks(ctx: Context, args: argparse.Namespace) -> Output:
    mine = ctx.app.terminal
    rows = [_view(name, lock, mine) for name, lock in ctx.app.locks.locks()]
    return Output(rows, render=lambda d: table(
        ("WORKSPACE", "TERMINAL", "SINCE (UTC)", "EXPIRES (UTC)", "REASON"),
        [(r["workspace"], str(r["terminal"]) + (" (this one)" if r["this_terminal"] else ""),
          str(r["since"])[:19], str(r["expires"])[:19], r["reason"]) for r in d]) if d else "no workspace is locked")
