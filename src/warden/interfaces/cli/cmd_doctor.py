"""`warden doctor`: prove isolation works here and say what is missing."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check that sandboxing works on this machine")
    p.set_defaults(handler=_doctor)


def _doctor(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.adapters.sandbox.doctor import run_checks

    checks = run_checks()
    ok = all(c.ok for c in checks if c.required)
    data = {"ok": ok, "checks": [c.to_json() for c in checks]}

    def render(d: dict[str, Any]) -> str:
        rows = [[c["name"], "ok" if c["ok"] else ("MISSING" if c["required"] else "warn"),
                 c["detail"], c["fix"] or "-"] for c in d["checks"]]
        verdict = ("isolation works here" if d["ok"] else
                   "Warden cannot isolate commands here and will refuse `warden run` until the "
                   "MISSING items are fixed")
        return table(["Check", "Status", "Detail", "Fix"], rows) + "\n\n" + verdict

    return Output(data, render=render, exit_code=0 if ok else 1)
