"""`warden console`: the terminal console (interfaces/console), opened only on a real terminal."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from warden.core.errors import Unavailable
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("console", parents=[common],
                       help="the terminal console: workspaces, sandbox settings, grants, approvals, audit")
    p.set_defaults(handler=_console)


def terminal_problem(min_size: tuple[int, int]) -> str | None:
    """Why the console cannot open here (no terminal, or too small), or None."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return ("warden console needs a terminal (stdin and stdout are not one); "
                "`warden list`, `warden config show`, `warden approvals` and `warden audit` say the same in text")
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return "warden console cannot read this terminal's size; run it in a terminal window"
    width, height = min_size
    if size.columns < width or size.lines < height:
        return (f"the terminal is {size.columns}x{size.lines}; warden console needs at least {width}x{height}: "
                "make the window larger")
    return None


def _console(ctx: Context, args: argparse.Namespace) -> Output:
    if ctx.json:
        raise Unavailable("warden console is interactive and has no --json form")
    # Checked before Textual is imported: refusing is instant, and `warden --help` never pays for it.
    from warden.interfaces.console import MIN_SIZE

    problem = terminal_problem(MIN_SIZE)
    if problem is not None:
        raise Unavailable(problem)
    from warden.bootstrap import bootstrap
    from warden.interfaces.console.app import WardenConsole

    home = getattr(args, "home", None)
    WardenConsole(lambda: bootstrap(home, environ=ctx.environ)).run()
    return Output({}, streamed=True)
