"""The `SandboxBackend` and `SandboxRunner` ports (core/ports) on this host: bubblewrap, built by
`host.build_spec` and run by `runner.run_sandboxed`; its live sandboxes are `live.HostLiveSandboxes`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from warden.adapters.sandbox.host import build_spec
from warden.adapters.sandbox.runner import run_sandboxed
from warden.core.errors import Unavailable
from warden.core.runs import RunResult, SandboxRequest

if TYPE_CHECKING:
    from warden.adapters.sandbox.live import HostLiveSandboxes

__all__ = ["BubblewrapBackend", "BubblewrapSandbox"]


class BubblewrapBackend:
    """The `bubblewrap` backend (`sandbox.backend`): sandboxes on this host. `run_dir` holds the
    live sandboxes' supervisor sockets; `environ` is Warden's own environment."""

    name = "bubblewrap"

    def __init__(self, environ: Mapping[str, str], run_dir: Path) -> None:
        self._environ = environ
        self._run_dir = run_dir

    def runner(self) -> BubblewrapSandbox:
        return BubblewrapSandbox(self._environ)

    def live(self) -> HostLiveSandboxes:
        # Imported here: a plain `warden run` never loads the live sandboxes' machinery.
        from warden.adapters.sandbox.live import HostLiveSandboxes

        return HostLiveSandboxes(self._run_dir, self._environ)


class BubblewrapSandbox:
    """Bot commands in bubblewrap; `environ` is Warden's own environment (LANG, TERM and TZ
    pass into the sandbox from it)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def run(self, request: SandboxRequest) -> RunResult:
        spec = build_spec(request.workspace, request.argv, caller_env=self._environ, env=request.env,
                          ro_paths=request.ro_paths, extra_binds=request.binds, bind_fds=request.bind_fds,
                          ro_zones=request.ro_zones, keep_zones=request.keep_zones, denied=request.denied,
                          protected=request.protected,
                          network=request.network is not None, tmp_size=request.limits.memory,
                          cwd=request.cwd)
        caps = {"max_capture": request.max_capture} if request.max_capture is not None else {}
        try:
            return run_sandboxed(spec, request.limits, stdin=request.stdin, on_stdout=request.on_stdout,
                                 on_stderr=request.on_stderr, capture=request.capture, network=request.network,
                                 on_net_event=request.on_net_event, on_started=request.on_started,
                                 terminal=request.terminal, **caps)
        except Unavailable as exc:
            if exc.rule != "sandbox.setup_failed":
                raise
            # bwrap could not make its namespaces: most often a sysctl of this host forbids them.
            from warden.adapters.sandbox.doctor import userns_fix

            hint = userns_fix()
            if hint is None:
                raise
            raise Unavailable(f"{exc.message}; {hint}", rule=exc.rule) from None
