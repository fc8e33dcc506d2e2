"""`warden nodes`: the nodes of the cluster (derived from their instances' heartbeats) and this
node's running Warden processes (`--instances`)."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("nodes", parents=[common],
                       help="the nodes sharing this registry: up or down, last heartbeat, API URL")
    p.add_argument("--instances", action="store_true", help="list every registered Warden process instead")
    p.set_defaults(handler=_nodes)


def _nodes(ctx: Context, args: argparse.Namespace) -> Output:
    service = ctx.app.instances
    if args.instances:
        rows = [i.to_json() for i in service.instances()]
        return Output(rows, render=lambda d: table(
            ["Node", "Kind", "Pid", "Started", "Last heartbeat", "API"],
            [[r["node"], r["kind"], r["pid"], str(r["started_at"])[:19], str(r["heartbeat_at"])[:19],
              r["url"] or "-"] for r in d]) if d else "no Warden process is registered")
    known = tuple(sorted({r.node for r in ctx.app.workspaces.list() if r.node}))
    views = [{**v.to_json(), "this": v.node == service.node} for v in service.nodes(known)]
    return Output({"node": service.node, "nodes": views}, render=lambda d: table(
        ["Node", "State", "Last heartbeat", "Live instances", "API"],
        [[r["node"] + (" (this one)" if r["this"] else ""), "up" if r["live"] else "down",
          str(r["last_heartbeat"] or "-")[:19], r["instances"], r["url"] or "-"] for r in d["nodes"]]))
