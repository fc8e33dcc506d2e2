"""`warden shell NAME`: an interactive shell on a terminal in the workspace's sandbox."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("shell", parents=[common], help="an interactive shell in a workspace's sandbox",
                       usage="warden shell [NAME | -w NAME] [options]",
                       description="bash (sh when the sandbox has no bash) on a terminal in the workspace's "
                                   "sandbox: Ctrl-C reaches the shell's job, resizes follow, and Warden exits "
                                   "with the shell's status. The sandbox's limits apply, its timeout too.")
    add_workspace(p)
    p.add_argument("--timeout", help="wall-clock limit in seconds (or 30m, 2h; default sandbox.timeout)")
    p.add_argument("--memory", help="memory limit, e.g. 256M, 2G")
    p.add_argument("--net", choices=["none", "allow"], help="network: none (default) or allow")
    p.add_argument("--allow-domain", action="append", default=[], metavar="DOMAIN",
                   help="a reachable domain with --net allow (repeat)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="set a variable inside the sandbox (repeat)")
    p.add_argument("--cwd", metavar="DIR", help="the folder the shell starts in (default: the workspace's root)")
    p.set_defaults(handler=_shell)


def _shell(ctx: Context, args: argparse.Namespace) -> Output:
    import os
    import sys

    from warden.core.terminal import PIPED_SHELL_ARGV, SHELL_ARGV
    from warden.interfaces.cli.cmd_run import _env, _timeout, execute
    from warden.interfaces.cli.terminal import run_on_terminal
    from warden.services.runs import RunRequest

    stdin = sys.stdin.fileno() if sys.stdin is not None and not sys.stdin.closed else None
    # Commands piped in (`echo ls | warden shell NAME`) are read by a shell without a terminal, as
    # `docker exec -i` does: on one, the shell's prompt and line editing came back with the output,
    # and the end of the input, read by the terminal as a key, could be lost (the shell waited on).
    piped = stdin is None or not os.isatty(stdin)
    request = RunRequest(args.name, PIPED_SHELL_ARGV if piped else SHELL_ARGV, timeout=_timeout(args.timeout),
                         memory=args.memory, net=args.net, allow_domains=args.allow_domain, env=_env(args.env),
                         cwd=args.cwd, stdin=stdin if piped else None)
    # A shell session is an instance of its node: if it dies unseen, its terminal's locks are released.
    with ctx.app.instances.registered("shell", terminal=ctx.app.terminal):
        result = execute(ctx, request) if piped else run_on_terminal(ctx, request)
    return Output(result.to_json(), exit_code=result.exit_code, streamed=not (piped and ctx.json))
