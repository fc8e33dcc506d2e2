"""`warden mcp`: serve the Model Context Protocol over stdio for the token in WARDEN_TOKEN.

An MCP client (Claude Code, Cursor, VS Code, …) starts this command and speaks JSON-RPC on its
standard input and output; the tools are those of interfaces/mcp. The token is checked before
the first message is read, so a client configured with a wrong one fails at once with the
reason on stderr (and exit status 3) rather than offering tools that all refuse.
"""

from __future__ import annotations

import argparse
from typing import Any

from warden.core.errors import Denied
from warden.interfaces.cli.main import Context, quiet_stdout
from warden.interfaces.cli.output import Output


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("mcp", parents=[common], help="serve MCP tools over stdio for the token in WARDEN_TOKEN",
                       description="Serve the Model Context Protocol over standard input and output for the "
                                   "bot identity token or grant token in WARDEN_TOKEN (an MCP client starts "
                                   "this command). `warden serve` offers the same over HTTP at /mcp.")
    p.add_argument("--token-env", default="WARDEN_TOKEN", metavar="VAR",
                   help="the environment variable holding the token (default: WARDEN_TOKEN)")
    p.set_defaults(handler=_mcp)


def _mcp(ctx: Context, args: argparse.Namespace) -> Output:
    import anyio

    from warden.interfaces.mcp.server import serve_stdio

    token = ctx.environ.get(args.token_env, "").strip()
    if not token:
        raise Denied(f"no token: set {args.token_env} to a bot's identity token (`warden bot register NAME`) "
                     "or a grant token (`warden grant WORKSPACE BOT …`)", rule="token.missing")
    app = ctx.app
    # Its requests are a bot's, as a server's are: no terminal's lock is theirs. Acting for the
    # terminal it was started from, a bot passed that terminal's lock (which refuses the same bot
    # over HTTP), and a refused one was told to take the lock over with a person's command.
    app.serving = True
    try:
        principal = app.auth.authenticate(token)
    except Denied as exc:
        app.audit.record(actor=getattr(exc, "actor", None) or "anonymous", action="mcp.connect", target="stdio",
                         decision="deny", rule=exc.rule or "denied", result="denied")
        raise Denied(f"the token in {args.token_env} was refused (permission denied): it is unknown, revoked or "
                     "expired; ask for a new one", rule=exc.rule) from None
    app.audit.record(actor=principal.actor, action="mcp.connect", target="stdio", decision="allow",
                     rule="token.valid")
    try:
        anyio.run(serve_stdio, app, token)
    except* BrokenPipeError:
        # The client closed its end of our stdout: it left, as surely as by closing stdin, and
        # the SDK's task group cancelled the call (its command killed). The group's EPIPE is no
        # internal error; stdout goes to /dev/null so the interpreter's last flush stays quiet.
        quiet_stdout()
    return Output({"stopped": True}, streamed=True)
