"""The filtering proxy of a live sandbox with network, as a process of its own.

A fresh sandbox's proxy is a thread of the Warden process that waits for the run; a live sandbox
outlives that process, so its proxy runs beside it: `python -m warden.adapters.sandbox.live_proxy
SOCKET EVENTS`, in a session of its own, with Warden's rights (as the thread has). It reads the
network policy (one JSON line) on stdin, serves it on SOCKET (proxy.py decides every target), then
reads the sandbox's bwrap pid (one line) and ends when that process ends — or at once when stdin
closes before a pid came (the Warden that started it died). Each decision is appended to EVENTS as a
JSON line, at most 1 MiB of them, for Warden to audit (`HostLiveSandboxes.net_events`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time

__all__ = ["MAX_EVENTS_BYTES", "main"]

MAX_EVENTS_BYTES = 1 << 20


def _wait_for(pid: int) -> None:
    """Return once process `pid` has ended."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel: look every second
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(1.0)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def main() -> None:
    from warden.adapters.sandbox.proxy import FilteringProxy, NetEvent
    from warden.core.network import NetworkPolicy

    socket_path, events_path = sys.argv[1], sys.argv[2]
    policy = json.loads(sys.stdin.readline())
    written = 0
    events = os.open(events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    def record(event: NetEvent) -> None:
        nonlocal written
        line = (json.dumps(event.to_json()) + "\n").encode()
        if written + len(line) <= MAX_EVENTS_BYTES:
            written += len(line)
            with contextlib.suppress(OSError):
                os.write(events, line)

    # Its decisions go to EVENTS only: none kept in memory, where a sandbox asking for hours would grow it.
    proxy = FilteringProxy(NetworkPolicy.from_json(policy), socket_path, on_event=record, max_events=0)
    proxy.start()
    print("ready", flush=True)
    line = sys.stdin.readline().strip()
    try:
        if line.isdigit():
            _wait_for(int(line))
    finally:
        proxy.stop()
        os.close(events)


if __name__ == "__main__":
    main()
