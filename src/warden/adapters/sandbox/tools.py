"""Warden's own tools (uv building a layer, pip repairing a broken workspace) in the sandbox.

A template's dependencies are code from an index: building an sdist runs its `setup.py` or
build backend, and that must not run on the host with the user's files and Warden's keys in
reach. So the tools run in the same bubblewrap sandbox as a bot's command, in a folder of
their own (the "workspace" of the run: cwd, HOME, the only writable tree besides the binds
named here), with the network limited to the package indexes or off.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from warden.adapters.sandbox.host import build_spec
from warden.adapters.sandbox.runner import run_sandboxed
from warden.core.bwrap_argv import Bind
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy
from warden.core.runs import RunResult, Sink

__all__ = ["TOOL_LIMITS", "TRUST_VARIABLES", "run_tool", "trust_settings"]

# Where the user told TLS clients to find their certificate authorities (a site's own CA for
# an intercepting proxy or a private index). Paths to public certificates, never secrets: a
# tool that reaches an index must trust what the user's own uv, pip and npm trust.
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")

# Resolving and building wheels needs more than a bot's default run: room for compilers and
# big wheels, and time for a slow index. Still bounded: a build is code from the internet.
TOOL_LIMITS = Limits(memory=4096 << 20, cpu_seconds=3600, pids=1024, file_size=2048 << 20,
                     timeout_s=3600)


def trust_settings(caller_env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The caller's TLS trust variables that name an existing absolute path, and those paths
    (to mount read-only)."""
    env = {name: caller_env[name] for name in TRUST_VARIABLES
           if caller_env.get(name, "").startswith("/") and os.path.exists(caller_env[name])}
    paths = list(dict.fromkeys(env.values()))
    # uv trusts its own bundled roots unless told to use the system's (mounted: /etc/ssl), which
    # is what a TLS-intercepting network's authority is added to. Newer uv renamed UV_NATIVE_TLS
    # to UV_SYSTEM_CERTS (the old name warns); both are set, so every uv reads one, none warns.
    said = caller_env.get("UV_SYSTEM_CERTS", caller_env.get("UV_NATIVE_TLS", "1"))
    env["UV_SYSTEM_CERTS"] = env["UV_NATIVE_TLS"] = "0" if said.lower() in ("0", "false", "no") else "1"
    return env, paths


def run_tool(folder: str | os.PathLike[str], argv: Sequence[str], *, env: Mapping[str, str],
             caller_env: Mapping[str, str], ro_paths: Iterable[str] = (),
             rw_paths: Iterable[str] = (), domains: Sequence[str] = (),
             limits: Limits = TOOL_LIMITS, on_stderr: Sink | None = None) -> RunResult:
    """Run `argv` sandboxed in `folder` (read-write), seeing `ro_paths` read-only and `rw_paths`
    read-write; the network reaches `domains` through the filtering proxy (trusting the user's
    certificate authorities), or nothing. `on_stderr`: the tool's stderr as it comes (a
    progress bar following it), captured in the result all the same."""
    trust_env, trust_paths = trust_settings(caller_env) if domains else ({}, [])
    ro = [p for p in dict.fromkeys([*ro_paths, *trust_paths]) if os.path.exists(p)]
    binds = [Bind(p, "rw") for p in dict.fromkeys(rw_paths) if os.path.isdir(p)]
    spec = build_spec(os.fspath(folder), argv, caller_env=caller_env, env={**trust_env, **env}, ro_paths=ro,
                      extra_binds=binds, network=bool(domains))
    return run_sandboxed(spec, limits, network=NetworkPolicy.parse(list(domains)) if domains else None,
                         on_stderr=on_stderr)
