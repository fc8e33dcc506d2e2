"""API exec: a bot's command through the sandboxed run, with the secrets its grant names."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from warden.core.errors import InvalidInput, Unavailable

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.runs import RunResult
    from warden.core.workspaces import WorkspaceRecord
    from warden.interfaces.http.calls import Call
    from warden.interfaces.http.models import ExecRequest
    from warden.services.auth import Principal

__all__ = ["ExecSlots", "run_in_workspace"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _check_request(app: App, body: ExecRequest) -> None:
    limit = app.settings.get_seconds("sandbox.timeout")
    if body.timeout is not None and body.timeout > limit:
        raise InvalidInput(f"timeout {body.timeout:g} s is over this server's limit of {limit:g} s "
                           "(sandbox.timeout); ask for less")
    for name, value in body.env.items():
        if not _ENV_NAME.match(name):
            raise InvalidInput(f"bad environment variable name {name!r}: use letters, digits and '_'")
        if "\0" in value:
            raise InvalidInput(f"environment variable {name} holds a NUL byte, which cannot be passed")
    if any("\0" in arg for arg in body.cmd):
        raise InvalidInput("an argument of cmd holds a NUL byte, which cannot be passed to a program")
    if not body.cmd[0]:
        raise InvalidInput("cmd[0] is empty: name the program to run")


class ExecSlots:
    """How many API commands run at once, in all and per bot.

    Each exec holds a server thread for as long as its command runs (up to sandbox.timeout);
    without a bound one bot could hold every thread and stall the API for all the others.
    A request over the bound is refused at once (503) rather than queued, so nothing piles up.
    The bot counted is the minter of the token (`Principal.minter`), not the bot it names: a
    bot holding tokens it minted for others shares its own slots among all of them.
    """

    @classmethod
    def from_settings(cls, app: App) -> ExecSlots:
        return cls(app.settings.get_int("api.max_execs"), app.settings.get_int("api.max_execs_per_bot"))

    def __init__(self, total: int, per_bot: int) -> None:
        self.total = total
        self.per_bot = per_bot
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()

    @contextmanager
    def take(self, bot: str) -> Iterator[None]:
        with self._lock:
            if self._running[bot] >= self.per_bot:
                raise Unavailable(f"the bot this grant comes from already runs {self.per_bot} commands at once, "
                                  "through its own grants and those it minted (api.max_execs_per_bot); "
                                  "retry when one ends", rule="api.max_execs_per_bot")
            if self._running.total() >= self.total:
                raise Unavailable(f"the server already runs {self.total} commands at once (api.max_execs); "
                                  "retry when one ends", rule="api.max_execs")
            self._running[bot] += 1
        try:
            yield
        finally:
            with self._lock:
                self._running[bot] -= 1
                if self._running[bot] <= 0:
                    del self._running[bot]


def run_in_workspace(app: App, call: Call, principal: Principal, record: WorkspaceRecord,
                     body: ExecRequest, slots: ExecSlots) -> RunResult:
    """Run `body.cmd` in the workspace's sandbox; secrets override same-named request variables."""
    _check_request(app, body)
    injection = app.secrets.environment(app.auth.secret_names(principal))
    env = {**body.env, **injection.env}
    # Names only: values (the bot's and the secrets) never reach the audit log. `bot` presents
    # the token, `minted_by` holds its chain's root: a bot's slots hold the runs of every token
    # it minted, for whichever bot, so minting grants for others wins it no extra slots.
    call.note(bot=principal.bot, minted_by=principal.minter, program=body.cmd[0], argc=len(body.cmd),
              env_names=sorted(body.env), secret_names=sorted(injection.env),
              missing_secrets=list(injection.missing))
    with slots.take(principal.minter):
        result: RunResult = app.runs.run(record.name, list(body.cmd), timeout=body.timeout, env=env,
                                     stdin=body.stdin.encode("utf-8") if body.stdin is not None else None,
                                     actor=call.actor, max_output=app.settings.get_size("api.max_output"))
    call.note(exit_code=result.exit_code, timed_out=result.timed_out)
    return result
