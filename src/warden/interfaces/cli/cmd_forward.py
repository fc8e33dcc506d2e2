"""`warden forward NAME PORT`: a dev server in a workspace's live sandbox, reached from the host.

Listens on the host's loopback (127.0.0.1:PORT by default, `--listen [HOST:]PORT` otherwise) and
relays each connection into the live sandbox of the person (default) or of a bot (`--as BOT`, or
one grant: `--as acc_…`), until Ctrl-C ("interrupted", 130) or until the workspace is archived,
suspended or destroyed (a line on stderr, exit 1). A connection that cannot be relayed (nothing
listens on the port, no live sandbox now) is closed, and the reason printed on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output, printable

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("forward", parents=[common],
                       help="reach a port of a workspace's live sandbox (a dev server) from this host",
                       description="Listen on this host's loopback and relay each connection to PORT inside the "
                                   "workspace's live sandbox: yours, or a bot's with --as. Runs until Ctrl-C, or "
                                   "until the workspace is archived, suspended or destroyed.")
    add_workspace(p)
    p.add_argument("port", help="the port the server listens on inside the sandbox (sandbox.forward_ports allows it)")
    p.add_argument("--listen", metavar="[HOST:]PORT",
                   help="where to listen on this host: a loopback address (127.0.0.1 when not given) and a port "
                        "(0: any free one); default 127.0.0.1 and PORT itself")
    p.add_argument("--as", dest="reach", metavar="BOT|acc_…",
                   help="reach a bot's live sandbox (any of its grants on the workspace), or one grant's by its "
                        "accessor (`warden grants NAME`); default: your own")
    p.add_argument("--any-user", action="store_true",
                   help="relay connections from every account of this host (by default only yours and root's: "
                        "a loopback port is open to all of them)")
    p.set_defaults(handler=_forward)


def _forward(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.adapters.port_relay import PortRelay, listen
    from warden.core.forwards import MAX_CONNECTIONS, ForwardCounts, Reach, parse_listen, parse_port
    from warden.services.forwards import Forward

    port = parse_port(args.port)
    reach = Reach.of(args.reach)
    host, listen_port = parse_listen(args.listen, port)
    forwards = ctx.app.forwards
    workspace_id = forwards.check(args.name, port, reach)
    listener = listen(host, listen_port)
    bound = listener.getsockname()
    address = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
    forward = Forward(args.name, workspace_id, port, reach, address)
    counts = ForwardCounts()

    def note(line: str) -> None:
        sys.stderr.write(f"warden: {printable(line)}\n")
        sys.stderr.flush()

    relay = PortRelay(listener, lambda: forwards.dial(forward), max_connections=MAX_CONNECTIONS, counts=counts,
                      note=note, admit=None if args.any_user else {os.getuid(), 0})
    forwards.open(forward)
    reason = "interrupted"
    try:
        # On stderr, --json or not: a script (or a test) knows from it where to connect.
        sys.stderr.write(f"forwarding http://{address} to port {port} in {printable(args.name)} "
                         f"(the live sandbox of {reach.who()}; Ctrl-C stops)\n")
        sys.stderr.flush()
        ended = relay.serve(lambda: forwards.ended(forward))
        reason = f"the workspace was {ended}"
    finally:
        relay.stop()
        forwards.close(forward, counts, reason)
    note(f"stopped forwarding: workspace {args.name} is {ended} ({counts.relayed} connections relayed)")
    return Output({**forward.to_json(), **counts.to_json(), "ended": ended}, streamed=True, exit_code=1)
