"""How `warden audit verify` scales: time and peak memory at 10k (the baseline) and 100k rows.

    .venv/bin/python bench/audit_verify.py [--rows 100000] [--baseline 10000]

Each size gets a fresh home whose audit log is written straight into the table (valid hash
chain, one transaction in batches), then verified in a fresh Python process that reports its
peak RSS (getrusage ru_maxrss), so the figures of one size do not leak into the other.
Target: peak RSS flat from 10k to 100k rows (a verify holding every row took 188 MB at 100k).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "src"))
from _common import bench_home  # noqa: E402

# What the child runs: verify once, then report rows, seconds and peak RSS (KiB on Linux).
_CHILD = """
import json, resource, sys, time
from warden.bootstrap import bootstrap
app = bootstrap(sys.argv[1], environ={})
start = time.perf_counter()
count, broken = app.audit.verify()
elapsed = time.perf_counter() - start
assert broken is None, broken
print(json.dumps({"rows": count, "seconds": elapsed,
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def build(home: Path, env: dict[str, str], n: int, batch: int = 10_000) -> None:
    """A home whose audit log holds `n` valid rows, like a busy machine's `run` events."""
    from warden.bootstrap import bootstrap
    from warden.core.audit import GENESIS, AuditEvent, event_hash

    app = bootstrap(home, environ=env)
    app.audit.head()  # creates and migrates the registry
    app.close()
    detail = {"argv": ["python", "-m", "pytest", "-q"], "env_keys": [], "exit_code": 0,
              "limits": {"memory": 536870912, "cpu_seconds": 60, "pids": 256}, "network": "none"}
    stored = json.dumps(detail, sort_keys=True, ensure_ascii=False)
    prev = GENESIS
    with sqlite3.connect(home / "warden.db") as conn:
        for first in range(1, n + 1, batch):
            rows = []
            for seq in range(first, min(first + batch, n + 1)):
                event = AuditEvent(at=f"2024-01-01T00:00:{seq % 60:02d}.000000+00:00", actor="bot:ci",
                                   action="run", target=f"ws{seq % 50}", decision="allow",
                                   rule="sandbox", result="0", detail=detail)
                digest = event_hash(event, seq, prev)
                rows.append((seq, event.at, event.actor, event.action, event.target, event.decision,
                             event.rule, event.result, stored, prev, digest))
                prev = digest
            conn.executemany("INSERT INTO audit_events VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)


def measure_verify(home: Path, env: dict[str, str]) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(home)], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(REPO / "src")}, check=True)
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=10_000)
    args = parser.parse_args()
    results = []
    for label, n in (("baseline", args.baseline), ("measured", args.rows)):
        with tempfile.TemporaryDirectory() as tmp:
            home, env = bench_home(tmp)
            build(home, env, n)
            results.append((label, measure_verify(home, env)))
    base_rss = results[0][1]["rss_kib"]
    print(f"{'variant':<10} {'rows':>8} {'time (s)':>9} {'peak RSS (MB)':>14} {'vs baseline':>12}")
    for label, r in results:
        print(f"{label:<10} {int(r['rows']):>8} {r['seconds']:>9.2f} {r['rss_kib'] / 1024:>14.1f} "
              f"{r['rss_kib'] / base_rss:>11.2f}x")


if __name__ == "__main__":
    main()
