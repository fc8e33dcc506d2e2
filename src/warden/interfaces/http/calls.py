"""One API call: authenticate, authorize, operate, and leave exactly one audit event.

Routes open a `Call` as a context manager; whatever happens inside (success, a refusal, an
error), leaving it records actor (bot and accessor, never the token), action, target,
decision, the rule that decided and the result. A `Call` is the `Trail` the bot-request
service (services/bot_requests.py) reports its rule and details to.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from starlette.concurrency import run_in_threadpool

from warden.core.errors import Denied, WardenError
from warden.services.audit import unaudited
from warden.services.auth import AuthDenied, Principal

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.ports import Tx
    from warden.core.workspaces import WorkspaceRecord

__all__ = ["Call", "Unauthenticated", "threaded"]

# One line a call in the server's log, beside uvicorn's access line (which knows neither the
# bot nor how a command ended): who asked, for what, and what came of it.
log = logging.getLogger("warden.http")

P = ParamSpec("P")
T = TypeVar("T")


def threaded(fn: Callable[P, T]) -> Callable[P, Awaitable[T]]:
    """Make a blocking route body an async route that runs it in the threadpool, once.

    FastAPI runs a plain `def` route's dependencies, body and response serialisation as
    separate thread hops (eight per request here); one hop is enough. The signature is
    resolved here, as FastAPI would otherwise look the annotations up in this module.
    """
    signature = inspect.signature(fn, eval_str=True)

    @functools.wraps(fn)
    async def route(*args: P.args, **kwargs: P.kwargs) -> T:
        return await run_in_threadpool(fn, *args, **kwargs)

    route.__signature__ = signature  # type: ignore[attr-defined]
    return route


class Unauthenticated(Denied):
    """No credentials at all (HTTP 401); a wrong one is a plain Denied (403)."""


class Call:
    # The front end the event names (`api.exec`); the MCP server's calls are `mcp.…`.
    channel = "api"

    def __init__(self, app: App, action: str, target: str) -> None:
        self.app = app
        self.action = action
        self.target = target
        self.principal: Principal | None = None
        self.known_actor: str | None = None
        self.rule = ""
        self.detail: dict[str, Any] = {}
        # Set when the operation went to a service that audits it itself, with this actor.
        self.audited_by_service = False
        self._recorded = False  # the event written already, in the run's transaction (record_in)

    @property
    def actor(self) -> str:
        if self.principal is not None:
            return self.principal.actor
        return self.known_actor or "anonymous"

    def authenticate(self, token: str | None) -> Principal:
        """The caller behind `token`; Unauthenticated without one, Denied for a bad one."""
        if not token:
            raise Unauthenticated("authentication required: send `Authorization: Bearer <token>`",
                                  rule="token.missing")
        try:
            self.principal = self.app.auth.authenticate(token)
        except AuthDenied as exc:
            self.known_actor = exc.actor  # an expired or revoked grant: still say whose it was
            raise
        return self.principal

    def authorize(self, workspace: str, permission: str, *, zone: str | None = None,
                  whole_workspace: bool = False) -> WorkspaceRecord:
        """The workspace, when the authenticated caller may use `permission` on it."""
        assert self.principal is not None, "authenticate first"
        record = self.app.auth.authorize(self.principal, workspace, permission, zone=zone,
                                         whole_workspace=whole_workspace)
        self.allow("grant.allow")
        return record

    def allow(self, rule: str) -> None:
        """The call passed the check named `rule` (the event's rule, unless an error names another)."""
        self.rule = rule

    def note(self, **detail: Any) -> None:
        """Add fields to the audit event (never a token or a secret value)."""
        self.detail.update(detail)

    def __enter__(self) -> Call:
        return self

    def record_in(self, tx: Tx) -> None:
        """Write the call's event now, as a call that ends well writes it, in `tx`: the transaction
        that records its command's outcome, so that the call costs no commit of its own. Leaving
        the call then writes none, unless an error comes after it (its event then follows)."""
        self._record(None, tx)
        self._recorded = True

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._log(exc)
        if self.audited_by_service and (exc is None or isinstance(exc, WardenError)):
            return  # one event per call: the service's, which names this caller
        if self._recorded and exc is None:
            return
        if exc is None and isinstance(self.detail.get("exit_code"), int):
            # Its command ran, and its outcome's write (with this event) failed on a full disk:
            # the bot is answered its command's result, not 503 (it would run it again), and the
            # server's log says what the audit lacks (services/runs.py, _outcome_written).
            try:
                self._record(None, None)
            except WardenError as failed:
                unaudited(f"{self.channel}.{self.action} on {self.target!r} by {self.actor} is done", failed.message)
            return
        self._record(exc, None)

    def _record(self, exc: BaseException | None, tx: Tx | None) -> None:
        if exc is None:
            decision, rule, result = "allow", self.rule or "none", "ok"
        elif isinstance(exc, Denied):
            decision, rule, result = "deny", exc.rule or "denied", exc.code
        elif isinstance(exc, WardenError):
            decision, rule, result = ("allow" if self.rule else "none"), exc.rule or self.rule, exc.code
        else:
            decision, rule, result = ("allow" if self.rule else "none"), self.rule, "internal"
        detail: Mapping[str, Any] = self.detail
        if self.principal is not None and self.principal.minter != self.principal.bot:
            detail = {**detail, "minted_by": self.principal.minter}  # whose grant this one came from
        self.app.audit.record(actor=self.actor, action=f"{self.channel}.{self.action}", target=self.target,
                              decision=decision, rule=rule, result=result, detail=detail, tx=tx)

    def _log(self, exc: BaseException | None) -> None:
        """The call's line in the server log: `bot helper: api.exec notes: ok, exit 0`."""
        if exc is None:
            outcome = "ok"
        elif isinstance(exc, WardenError):
            outcome = f"{exc.code} ({exc.rule})" if exc.rule else exc.code
        else:
            outcome = "internal"
        exit_code = self.detail.get("exit_code")
        if isinstance(exit_code, int):
            outcome += f", exit {exit_code}" + (", timed out" if self.detail.get("timed_out") else "")
        who = f"bot {self.principal.bot}" if self.principal is not None else self.actor
        # %r: a target is a workspace name or a bot's path, which may hold anything.
        log.info("%s: %s.%s %r: %s", who, self.channel, self.action, self.target, outcome)
