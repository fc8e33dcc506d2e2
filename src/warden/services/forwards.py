"""Forwards (`warden forward NAME PORT`): a port of a live sandbox reached from the host.

The person asks; each connection the front end accepts on the host's loopback is `dial`led here
into the live sandbox of the principal the forward reaches (the person's, a bot's grant), through
its supervisor, which connects inside the sandbox's network namespace and hands the socket over
(LiveSandboxService.connect: the descriptor is checked before use). Nothing of the forward runs in
the sandbox. Which sandbox is looked up per connection: one that stopped idle and was started again
is reached as well. A forward stops once its workspace is no longer ready (archived, suspended,
destroyed), and its opening and closing are audited (`forward.open`, `forward.close`, with what it
counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from warden.core.errors import Conflict, NotFound, Unavailable
from warden.core.forwards import ForwardCounts, Reach, check_port
from warden.core.live import NotListening

if TYPE_CHECKING:
    from warden.core.forwards import Connection
    from warden.core.ports import Registry
    from warden.services.audit import AuditLog
    from warden.services.live import LiveSandboxService

__all__ = ["Forward", "ForwardService"]


@dataclass(frozen=True)
class Forward:
    """One open forward: the workspace (by id, so one destroyed and made again is not reached),
    the sandbox port, whose sandbox, and where the host side listens."""

    workspace: str
    workspace_id: str
    port: int
    reach: Reach
    listen: str  # HOST:PORT as bound

    def to_json(self) -> dict[str, object]:
        return {"workspace": self.workspace, "port": self.port, "as": self.reach.said, "listen": self.listen}


class ForwardService:
    def __init__(self, *, registry: Registry, audit: AuditLog, live: LiveSandboxService,
                 ports: tuple[range, ...]) -> None:
        self._registry = registry
        self._audit = audit
        self._live = live
        self._ports = ports

    def check(self, workspace: str, port: int, reach: Reach) -> str:
        """Refused (before anything listens) unless `port` is allowed, the workspace is ready and
        `reach`'s live sandbox runs in it; the workspace's id."""
        check_port(port, self._ports)
        with self._registry.transaction(write=False) as tx:
            record = tx.workspaces.get(workspace)
            grants = tx.grants.of_workspace(workspace) if record is not None and reach.said != "user" else []
        if record is None:
            raise NotFound(f"no workspace {workspace!r}; `warden list` shows them")
        if record.status != "ready":
            raise Conflict(f"workspace {workspace!r} is {record.status}: only a ready workspace has live sandboxes "
                           f"to forward to")
        if not self._live.usable(workspace, reach.matches):
            if reach.said != "user" and not any(reach.matches(f"bot:{g.bot}@{g.accessor}") for g in grants):
                # A mistyped --as was told to "start the server first", which no bot of that name could.
                raise NotFound(f"{reach.who()} holds no grant on {workspace!r}, so it has no live sandbox there: "
                               f"`warden grants {workspace}` lists who does (`--as BOT` or `--as acc_…`)",
                               rule="forward.no_sandbox")
            raise NotFound(f"no live sandbox of {reach.who()} runs in {workspace!r}: "
                           f"{self._others(workspace, reach) or 'start the server first'} "
                           f"(`warden run {workspace} --detach -- …`, or the bot's background exec)",
                           rule="forward.no_sandbox")
        return record.id

    def _others(self, workspace: str, reach: Reach) -> str:
        """Whose live sandboxes do run there, as the `--as` that reaches each: a newcomer forwarding
        to a bot's dev server without `--as` is told the flag, not to start a server of their own."""
        principals = {s.principal for s in self._live.usable(workspace, lambda p: not reach.matches(p))}
        names = sorted({"user" if p == "user" else p.removeprefix("bot:").partition("@")[0] for p in principals})
        if not names:
            return ""
        return "one runs for " + ", ".join(f"`--as {n}`" for n in names) + ", or start the server first"

    def open(self, forward: Forward) -> None:
        """Audit the forward's start (`forward.open`), once it listens."""
        self._audit.record(actor="user", action="forward.open", target=forward.workspace, decision="allow",
                           rule="forward", result="listening", detail=forward.to_json())

    def dial(self, forward: Forward) -> Connection:
        """A connection to the forward's port in the live sandbox it reaches (the most recently
        used first, when a principal has several: one for each network policy). NotFound, with
        why, when none accepts it; Unavailable when a supervisor cannot be asked."""
        sandboxes = self._live.usable(forward.workspace, forward.reach.matches)
        if not sandboxes:
            raise NotFound(f"no live sandbox of {forward.reach.who()} runs in {forward.workspace!r} now",
                           rule="forward.no_sandbox")
        failed: Unavailable | None = None
        for sandbox in sandboxes:
            try:
                return self._live.connect(sandbox, forward.port)
            except NotListening:
                continue
            except Unavailable as exc:
                failed = exc
        if failed is not None:
            raise failed
        # The usual cause after a while: the detached server ended at its timeout (10 minutes of
        # sandbox.timeout unless it was given --timeout), which `warden ps` shows as `timed out`.
        raise NotFound(f"nothing listens on port {forward.port} in the live sandbox of {forward.reach.who()} "
                       f"in {forward.workspace!r}; `warden ps {forward.workspace}` shows whether the server still "
                       f"runs (a detached one ends at its --timeout, sandbox.timeout by default)",
                       rule="forward.not_listening")

    def ended(self, forward: Forward) -> str | None:
        """Why the forward must stop now (its workspace destroyed, archived, suspended), or None."""
        with self._registry.transaction(write=False) as tx:
            record = tx.workspaces.get(forward.workspace)
        if record is None or record.id != forward.workspace_id:
            return "destroyed"
        return None if record.status == "ready" else record.status

    def close(self, forward: Forward, counts: ForwardCounts, reason: str) -> None:
        """Audit the forward's end (`forward.close`) with what it relayed."""
        self._audit.record(actor="user", action="forward.close", target=forward.workspace, decision="none",
                           rule="forward", result="closed",
                           detail={**forward.to_json(), **counts.to_json(), "reason": reason})
