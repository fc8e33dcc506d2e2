"""API exec: a bot's command through the sandboxed run, with the secrets its grant names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from warden.core.errors import InvalidInput, Unavailable

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.runs import RunResult
    from warden.core.workspaces import WorkspaceRecord
    from warden.interfaces.http.calls import Call
    from warden.interfaces.http.models import ExecRequest
    from warden.services.auth import Principal

__all__ = ["run_in_workspace"]

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


def run_in_workspace(app: App, call: Call, principal: Principal, record: WorkspaceRecord,
                     body: ExecRequest) -> RunResult:
    """Run `body.cmd` in the workspace's sandbox; secrets override same-named request variables."""
    _check_request(app, body)
    injection = app.secrets.environment(app.auth.secret_names(principal))
    env = {**body.env, **injection.env}
    # Names only: values (the bot's and the secrets) never reach the audit log.
    call.note(program=body.cmd[0], argc=len(body.cmd), env_names=sorted(body.env),
              secret_names=sorted(injection.env), missing_secrets=list(injection.missing))
    runs = getattr(app, "runs", None)
    if runs is None:
        raise Unavailable("running commands is not available on this server (the sandbox runner is "
                          "missing); update Warden")
    result: RunResult = runs.run(record.name, list(body.cmd), timeout=body.timeout, env=env,
                                 stdin=body.stdin.encode("utf-8") if body.stdin is not None else None,
                                 actor=call.actor)
    call.note(exit_code=result.exit_code, timed_out=result.timed_out)
    return result
