"""`warden doctor`: prove isolation works here and say what is missing."""

from __future__ import annotations

import argparse
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


def _doctor(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.adapters.sandbox.doctor import run_checks

    try:
        root: str | None = str(ctx.app.root_dir)  # for the disk quota's check
    except WardenError:  # broken settings: the other checks still help
        root = None
    checks = run_checks(root)
    checks.append(_disk_check(ctx))
    ok = all(c.ok for c in checks if c.required)
    data: dict[str, Any] = {"ok": ok, "checks": [c.to_json() for c in checks]}
    if args.fix:
        data["swept"] = ctx.app.sweeper.sweep().to_json()

    def render(d: dict[str, Any]) -> str:
        rows = [[c["name"], "ok" if c["ok"] else ("MISSING" if c["required"] else "warn"),
                 c["detail"], c["fix"] or "-"] for c in d["checks"]]
        verdict = ("isolation works here" if d["ok"] else
                   "Warden cannot isolate commands here and will refuse `warden run` until the "
                   "MISSING items are fixed")
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
