"""Checks over `warden audit --json`: each run's outcome is audited once.

A run's outcome is its `run` event (exit status, killed, refused, interrupted) or its `run.lost`
one; two for one run id (a stop's "killed" and a start's "refused") tell two stories of one run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.conftest import Cli

__all__ = ["assert_one_outcome_per_run", "outcomes"]

_OUTCOMES = ("run", "run.lost")


def outcomes(environ: dict[str, str], *, limit: int = 1000) -> list[dict[str, Any]]:
    """The outcome events `warden audit --json` lists (newest `limit` events), oldest first."""
    shown = Cli(environ)("audit", "--limit", str(limit), "--json")
    assert shown.code == 0, shown.stderr
    return [e for e in shown.json["data"] if e["action"] in _OUTCOMES]


def assert_one_outcome_per_run(environ: dict[str, str]) -> None:
    """Every run id with an outcome in the audit has exactly one."""
    events = outcomes(environ)
    counts = Counter(e["detail"].get("run_id") for e in events if e["detail"].get("run_id"))
    twice = {run_id: [(e["action"], e["result"], e["detail"].get("stopped_by")) for e in events
                      if e["detail"].get("run_id") == run_id]
             for run_id, count in counts.items() if count > 1}
    assert twice == {}, f"runs with more than one outcome audited: {twice}"
