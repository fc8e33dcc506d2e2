"""What issue #11's "overlap" would cost today: a bot's exec of `true` in its live sandbox as it runs
(the supervisor starts the command at once, by vfork through Warden's launcher) against the same
exec with the command held before exec until Warden says `go` (the supervisor's fork path, which
an overlap of the spawn with the run's intent transaction would need), alternating, in one process.

    .venv/bin/python bench/exec_held.py [-n 300]

The overlap: send the spawn first, commit the intent (and lease) while the supervisor prepares the
command, then let it exec. The most it could hide is the intent transaction's wall time
(RunService._hold_lease, timed here on the plain execs); what it costs is the held exec's extra
time over the plain one (the supervisor's Python fork and its set-up in the child, the `go`
round trip, Warden's look for the held child's host pid). The last line says which is larger.
The held execs are made by this benchmark alone (their spawn request asks for `hold`): Warden's
own code runs unchanged, with the held child handled as for a background command; a third row
skips Warden's look for its host pid (the child joined its cgroups and set its rlimits itself),
the least a held spawn costs with today's supervisor.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bot_exec, raw_bwrap_argv  # noqa: E402


def _p10(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 10]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=300, help="execs timed each way (alternating)")
    args = parser.parse_args()
    from warden.adapters.sandbox import live
    from warden.services import runs

    held: list[str | None] = [None]  # None: as it runs; "held"; "bare": held, no host pid looked for
    real_send = live._Channel.send

    @functools.wraps(real_send)
    def send(self: Any, message: Mapping[str, object], fds: list[int] | None = None) -> None:
        if held[0] and message.get("op") == "spawn":
            message = {**message, "hold": True}
        real_send(self, message, fds)

    real_host_pid = live._host_pid

    def host_pid(*a: Any, **k: Any) -> int | None:
        return None if held[0] == "bare" else real_host_pid(*a, **k)

    live._host_pid = host_pid  # type: ignore[assignment]

    live._Channel.send = send  # type: ignore[method-assign]
    intent_ms: list[float] = []
    real_hold = runs.RunService._hold_lease

    @functools.wraps(real_hold)
    def hold_lease(*a: Any, **k: Any) -> None:
        start = time.perf_counter()
        try:
            real_hold(*a, **k)
        finally:
            if not held[0]:
                intent_ms.append((time.perf_counter() - start) * 1000)

    runs.RunService._hold_lease = hold_lease  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp, bot_exec(tmp) as (_, exec_true):

        def run() -> float:
            start = time.perf_counter()
            exec_true()
            return (time.perf_counter() - start) * 1000

        ways = (None, "held", "bare")
        for way in (*ways, *ways):
            held[0] = way
            run()  # the live sandbox started, both paths warm
        time.sleep(1.05)  # the policy folder settled (a folder changed within a second is read again)
        raw, raw_ms = raw_bwrap_argv(), []
        times: dict[str | None, list[float]] = {way: [] for way in ways}
        for _ in range(args.n):
            start = time.perf_counter()
            subprocess.run(raw, check=True)
            raw_ms.append((time.perf_counter() - start) * 1000)
            for way in ways:
                held[0] = way
                times[way].append(run())
    plain, hold, bare = times[None], times["held"], times["bare"]
    print(f"{'per exec, ms (n=' + str(args.n) + ')':40} {'p10':>8} {'median':>8}")
    for label, samples in (("exec as it runs (vfork, launcher)", plain),
                           ("exec held for `go` (fork)", hold),
                           ("  held, its host pid not looked for", bare),
                           ("  its intent transaction (_hold_lease)", intent_ms),
                           ("raw bwrap ... true", raw_ms)):
        print(f"{label:40} {_p10(samples):8.2f} {statistics.median(samples):8.2f}")
    cost = statistics.median(bare) - statistics.median(plain)
    hidden = statistics.median(intent_ms)
    print(f"\nholding costs at least {cost:+.2f} ms at the median ({_p10(bare) - _p10(plain):+.2f} at p10); an overlap "
          f"could hide at most {hidden:.2f} ms: {'a gain' if hidden > cost else 'a loss'} of "
          f"{abs(hidden - cost):.2f} ms per exec; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
