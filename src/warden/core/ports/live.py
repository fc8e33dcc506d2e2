"""Live sandboxes on this host: starting one, running commands in it, asking its supervisor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warden.core.forwards import Connection
    from warden.core.live import Chunk, Exited, LiveProcess, LiveSandbox, Logs, StartedSandbox, Supervised
    from warden.core.runs import NetEvent, RunResult, SandboxRequest, Usage

__all__ = ["LiveSandboxes"]


class LiveSandboxes(Protocol):
    """Long-lived sandboxes holding a supervisor of Warden's (core/live.py says what they are).

    Every answer from a supervisor is untrusted: bounded and parsed before use. A supervisor that
    does not answer in time or answers badly raises Unavailable with rule `live.unreachable` or
    `live.bad_answer`; its sandbox should then be stopped.
    """

    def start(self, sandbox_id: str, request: SandboxRequest, *, idle_s: float) -> StartedSandbox:
        """Start a live sandbox with `request`'s mounts, limits and network (its argv is not run);
        it ends by itself after `idle_s` seconds with nothing running. Unavailable when it cannot."""
        ...

    def alive(self, sandbox: LiveSandbox) -> bool:
        """Whether the sandbox and its supervisor still run."""
        ...

    def intact(self, sandbox: LiveSandbox) -> bool:
        """Whether what it hides or holds read-only is still hidden and read-only: no mount of it
        undone by a rename or removal on the host, no denied path made where it had none to hide."""
        ...

    def run(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest) -> RunResult:
        """Run `request`'s command in the sandbox to its end, within its own limits, cgroup and
        timeout, its output to the request's sinks; what it leaves behind is killed at its end."""
        ...

    def spawn(self, sandbox: LiveSandbox, process_id: str, request: SandboxRequest, *,
              ring: int = ...) -> dict[str, object]:
        """Start `request`'s command in the background (its limits applied before it runs); the
        host's details of it, for the registry."""
        ...

    def listing(self, sandbox: LiveSandbox) -> list[Supervised]:
        """The processes the supervisor knows."""
        ...

    def logs(self, sandbox: LiveSandbox, process_id: str) -> tuple[Logs, Exited | None]:
        """What the process printed (as much as its rings kept) and how it ended, if it did."""
        ...

    def follow(self, sandbox: LiveSandbox, process_id: str, *, tick: float = ...) -> Iterator[Chunk | None]:
        """Its output so far, then as it comes, then its end; None after each `tick` of quiet."""
        ...

    def wait(self, sandbox: LiveSandbox, process_id: str, timeout: float) -> Supervised:
        """The process once it ended, or as it is after `timeout` seconds."""
        ...

    def signal(self, sandbox: LiveSandbox | None, process: LiveProcess, sig: int) -> None:
        """Send `sig` to the process's group (by the host when the supervisor cannot)."""
        ...

    def forget(self, sandbox: LiveSandbox, process_id: str) -> None:
        """Let the supervisor drop a finished process (its output was kept elsewhere)."""
        ...

    def connect(self, sandbox: LiveSandbox, port: int) -> Connection:
        """A TCP connection to `port` on the sandbox's own loopback, made inside its network
        namespace (for `warden forward`); NotListening when nothing there accepts it."""
        ...

    def release(self, process: LiveProcess) -> bool:
        """Kill what a finished background process left and drop its cgroup; whether its memory
        limit killed something of it."""
        ...

    def usage(self, process: LiveProcess, exited: Exited | None = None) -> Usage | None:
        """What a background process has used so far, read cheaply (no supervisor call): its
        cgroup's figures while it has one, else the host's count of its CPU while it runs, or
        what its supervisor reported (`exited`) once it ended; None when nothing says. Before
        `release` (which drops the cgroup)."""
        ...

    def stop(self, sandbox: LiveSandbox) -> None:
        """End the sandbox and everything in it; remove what it held on the host."""
        ...

    def keep_logs(self, process_id: str, logs: Logs) -> None:
        """Keep a collected process's output in Warden's home (its sandbox may stop)."""
        ...

    def kept_logs(self, process_id: str) -> Logs | None: ...

    def drop_logs(self, process_id: str) -> None: ...

    def net_events(self, sandbox: LiveSandbox) -> tuple[list[NetEvent], int]:
        """What the sandbox's network proxy decided since the last call ([] without network), and
        how many more decisions it could not keep meanwhile (past its bound between two calls)."""
        ...
