"""`warden doctor`: prove isolation works here and say what is missing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from warden.core.errors import WardenError
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check that sandboxing works on this machine")
    p.add_argument("--fix", action="store_true",
                   help="also sweep what crashed processes left: run cgroups, temp files, half-built "
                        "layers, the trash, runs never finished (audited as lost)")
    p.set_defaults(handler=_doctor)


def _home_check(ctx: Context) -> Any:
    """Whether Warden may use its home: this user's, on a path no other user may change (the check
    every other command makes first, adapters/home_state.check_owned). Required: a home refused
    refuses every command, so doctor must not say all is well."""
    from warden.adapters.sandbox.doctor import Check
    from warden.core.errors import Denied

    try:
        root = ctx.app.home.root
    except Denied as exc:
        if exc.rule not in ("home.owner", "home.unwritable"):
            raise
        said, _, fix = exc.message.partition("; ")
        return Check("home", False, said, fix)
    except WardenError:  # broken settings: the other checks say so, the home itself passed
        return None
    if not root.exists():
        return Check("home", True, f"{root}: not made yet (`warden init` makes it, yours alone)")
    return Check("home", True, f"{root}: yours, on a path no other user may change")


def _disk_check(ctx: Context) -> Any:
    """How full the disk of Warden's home is, against cleanup.disk_alert_percent (the janitor audits
    the same alert); never required: a full disk refuses runs and writes on its own, saying so."""
    import shutil

    from warden.adapters.sandbox.doctor import Check

    try:
        limit = ctx.app.settings.get_int("cleanup.disk_alert_percent")
        usage = shutil.disk_usage(ctx.app.home.root)
    except (WardenError, OSError) as exc:
        return Check("disk", False, f"cannot tell how full the home's disk is: {exc}", required=False)
    used = round(100.0 * usage.used / usage.total, 1) if usage.total else 0.0
    if used >= limit:
        return Check("disk", False, f"the disk of Warden's home is {used}% full (alert at {limit}%, "
                     "cleanup.disk_alert_percent)", "`warden janitor --dry-run` shows what a cleanup frees; "
                     "`warden checkpoints NAME --drop ID` frees kept checkpoints", required=False)
    return Check("disk", True, f"the disk of Warden's home is {used}% full (alert at {limit}%)", required=False)


def _node_check(ctx: Context) -> tuple[Any, dict[str, Any]]:
    """This node's name and, for a node of a cluster (a shared PostgreSQL registry), which nodes
    are up and down (docs/nodes.md); a home on SQLite is a single-node home, and its registry is
    not opened for this (doctor on a home not set up creates nothing). Never required."""
    from warden.adapters.sandbox.doctor import Check

    try:
        app = ctx.app
        name, clustered = app.node, app.clustered
    except WardenError as exc:
        return Check("node", False, f"cannot tell this node: {exc.message}", required=False), {}
    info: dict[str, Any] = {"name": name, "clustered": clustered, "up": None, "down": None}
    if not clustered:
        return Check("node", True, f"node {name}: a single-node home (its registry is SQLite; several machines "
                     "share one PostgreSQL registry, see docs/nodes.md)", required=False), info
    try:
        # The nodes with instances, and those that hold workspaces (a node stopped cleanly has none).
        views = app.instances.nodes(tuple(sorted({r.node for r in app.workspaces.list() if r.node})))
    except WardenError as exc:
        return Check("node", False, f"node {name}: cannot read the cluster's registry: {exc.message}",
                     required=False), info
    up, down = [v.node for v in views if v.live], [v.node for v in views if not v.live]
    info.update(up=up, down=down)
    # This node is down while no Warden process of it beats (doctor itself registers none).
    shown = [f"{n} (this one: no `warden serve`, daemon or shell runs here)" if n == name else n for n in down]
    said = f"node {name}: {len(up)} node(s) up ({', '.join(up) or 'none'}), {len(down)} down"
    said += f" ({', '.join(shown)})" if down else ""
    others = [n for n in down if n != name]
    if others:
        return Check("node", False, f"{said}: the workspaces of {', '.join(others)} are unreachable",
                     "start `warden serve` on them again", required=False), info
    return Check("node", True, said, required=False), info


def _client_check(program: Path | None = None) -> Any:
    """Which program `warden` is: the native client (interfaces/cli/client.c, built by scripts/setup
    where it finds a C compiler) or the Python console script, whose own start costs each `warden
    run` ~25 ms more. Never required: both run every command alike."""
    from warden.adapters.sandbox.doctor import Check

    program = program or Path(sys.executable).with_name("warden")
    try:
        with program.open("rb") as handle:
            native = handle.read(4) == b"\x7fELF"
    except OSError:
        return Check("client", True, f"no {program}: Warden runs as `python -m warden`", required=False)
    if native:
        return Check("client", True, f"{program} is the native client: a `warden run` the home's daemon serves "
                     "starts no Python", required=False)
    return Check("client", True, f"{program} is the Python client: each `warden run` starts ~25 ms slower than "
                 "through the native one", "install gcc (sudo apt-get install -y gcc), then run scripts/setup again",
                 required=False)


def _layer_cache_check(ctx: Context) -> Any:
    """Whether the layer cache shared with other homes is used (a check only when one is set)."""
    from warden.adapters.envs.layer_cache import LayerCache
    from warden.adapters.sandbox.doctor import Check

    try:
        configured = ctx.app.settings.get_str("envs.layer_cache")
        folder = ctx.app.layer_cache
    except WardenError:
        return None
    if not configured:
        return None
    if folder is None:
        return Check("layer cache", False, f"{configured} lies in the workspaces, where bots write: not used",
                     "set envs.layer_cache to a folder outside the workspaces", required=False)
    why = LayerCache(folder).unusable()
    if why is not None and not folder.exists() and folder.parent.is_dir():
        return Check("layer cache", True, f"{folder}: not made yet; the first layer built here makes it",
                     required=False)
    if why is not None:
        return Check("layer cache", False, f"{folder}: not used, {why[0]}; every layer is built here", why[1],
                     required=False)
    count = sum(1 for entry in folder.iterdir() if not entry.name.startswith("."))
    return Check("layer cache", True, f"{folder}: {count} layer(s) to copy instead of building", required=False)


# What a sweep reports, as a person reads it (SweepReport's fields).
_LEFT = {"orphan_sandboxes": "sandboxes of a dead Warden still running", "temp_files": "half-written files",
         "layers": "half-built env layers", "trash": "folders whose removal never finished",
         "git_scratch": "scratch of killed git operations", "stale_archives": "archives no workspace uses"}


def _leftovers_check(ctx: Context) -> Any:
    """What crashed or killed processes left that `--fix` removes (a dry run of its sweep): a
    killed `create` leaves a half-built layer of tens of MB, found before only by `--fix`."""
    from warden.adapters.sandbox.doctor import Check

    try:
        if ctx.app.database_url is None and not (ctx.app.home.root / "warden.db").exists():
            return None  # not set up: looking makes no registry (doctor is what a newcomer runs first)
        found = ctx.app.sweeper.sweep(dry_run=True).to_json()
    except (WardenError, OSError):  # a home that cannot be read: its own row says why
        return None
    parts = [f"{what}: {len(v) if isinstance(v, list) else v}" for key, what in _LEFT.items() if (v := found.get(key))]
    if not parts:
        return None
    return Check("leftovers", False, "left by killed processes: " + ", ".join(parts),
                 "`warden doctor --fix` removes them", required=False)


def _doctor(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.adapters.sandbox.doctor import run_checks

    try:
        root: str | None = str(ctx.app.root_dir)  # for the disk quota's check
    except WardenError:  # broken settings: the other checks still help
        root = None
    checks = run_checks(root)
    if (home_check := _home_check(ctx)) is not None:
        checks.insert(0, home_check)
    checks.append(_disk_check(ctx))
    node_check, node = _node_check(ctx)
    checks.append(node_check)
    checks.append(_client_check())
    if (cache_check := _layer_cache_check(ctx)) is not None:
        checks.append(cache_check)
    ok = all(c.ok for c in checks if c.required)
    data: dict[str, Any] = {"ok": ok, "checks": [c.to_json() for c in checks], "node": node}
    if args.fix:
        data["swept"] = ctx.app.sweeper.sweep().to_json()
    elif (left := _leftovers_check(ctx)) is not None:
        checks.append(left)
        data["checks"].append(left.to_json())

    def render(d: dict[str, Any]) -> str:
        rows = [[c["name"], "ok" if c["ok"] else ("MISSING" if c["required"] else "warn"),
                 c["detail"], c["fix"] or "-"] for c in d["checks"]]
        verdict = ("isolation works here" if d["ok"] else
                   "Warden cannot isolate commands here and will refuse `warden run` until the "
                   "MISSING items are fixed")
        if any(c["name"] == "home" and not c["ok"] for c in d["checks"]):
            verdict = "Warden refuses every command with this home until the MISSING items are fixed"
        text = table(["Check", "Status", "Detail", "Fix"], rows) + "\n\n" + verdict
        swept = d.get("swept")
        if swept:
            done = [f"{key.replace('_', ' ')}: {len(v) if isinstance(v, list) else v}"
                    for key, v in swept.items() if key != "dry_run" and v]
            text += "\nswept: " + (", ".join(done) if done else "nothing was left behind")
            if swept.get("orphan_folders"):
                text += ("\nfolders in the workspaces root that no workspace owns (left alone): "
                         + ", ".join(swept["orphan_folders"]))
        return text

    return Output(data, render=render, exit_code=0 if ok else 1)
