"""The filtering proxy of a live sandbox with network, as a process of its own.

A fresh sandbox's proxy is a thread of the Warden process that waits for the run; a live sandbox
outlives that process, so its proxy runs beside it: `python -m warden.adapters.sandbox.live_proxy
SOCKET EVENTS`, in a session of its own, with Warden's rights (as the thread has). It reads the
network policy (one JSON line) on stdin, serves it on SOCKET (proxy.py decides every target), then
reads the sandbox's bwrap pid (one line) and ends when that process ends — or at once when stdin
closes before a pid came (the Warden that started it died). Each decision is appended to EVENTS as a
JSON line for Warden to audit (`HostLiveSandboxes.net_events`), which takes what is there and empties
the file, both under the file's flock. At most 1 MiB waits there: the decisions past it are counted,
and the count written (`{"dropped": N}`) once there is room again. (A bound for the sandbox's whole
life let a bot fill it with junk refusals first and then go unaudited for as long as it lived.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import sys
import threading
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
    events = os.open(events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    dropped = 0
    one_at_a_time = threading.Lock()  # the proxy's connection threads (a flock is the process's)

    def record(event: NetEvent) -> None:
        nonlocal dropped
        line = (json.dumps(event.to_json()) + "\n").encode()
        with one_at_a_time, contextlib.suppress(OSError):
            fcntl.flock(events, fcntl.LOCK_EX)  # not while Warden takes the file's lines and empties it
            try:
                size = os.fstat(events).st_size
                if dropped:
                    told = (json.dumps({"dropped": dropped}) + "\n").encode()
                    if size + len(told) + len(line) > MAX_EVENTS_BYTES:
                        dropped += 1
                        return
                    os.write(events, told)
                    dropped, size = 0, size + len(told)
                if size + len(line) > MAX_EVENTS_BYTES:
                    dropped += 1
                    return
                os.write(events, line)
            finally:
                fcntl.flock(events, fcntl.LOCK_UN)

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
