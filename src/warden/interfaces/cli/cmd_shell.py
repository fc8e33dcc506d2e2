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
    from warden.core.terminal import SHELL_ARGV
    from warden.interfaces.cli.cmd_run import _env, _timeout
    from warden.interfaces.cli.terminal import run_on_terminal
    from warden.services.runs import RunRequest

    request = RunRequest(args.name, SHELL_ARGV, timeout=_timeout(args.timeout), memory=args.memory, net=args.net,
                         allow_domains=args.allow_domain, env=_env(args.env), cwd=args.cwd)
    # A shell session is an instance of its node: if it dies unseen, its terminal's locks are released.
    with ctx.app.instances.registered("shell", terminal=ctx.app.terminal):
        result = run_on_terminal(ctx, request)
    return Output(result.to_json(), exit_code=result.exit_code, streamed=True)
