"""The `SandboxTools` port (core/ports): Warden's own tools (pip, uv, npm) run in the sandbox."""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Mapping, Sequence

from warden.adapters.sandbox.tools import TOOL_LIMITS, run_tool, trust_settings
from warden.core.errors import InvalidInput
from warden.core.limits import Limits
from warden.core.runs import RunResult

__all__ = ["NpmTarballFiles", "SandboxedTools"]


# package.json is a few KiB; a bigger one is not read into memory.
_MAX_PACKAGE_JSON = 1 << 20


class SandboxedTools:
    """`run_tool` with the caller's environment bound (for its TLS trust settings)."""

    def __init__(self, caller_env: Mapping[str, str]) -> None:
        self._caller_env = caller_env

    def available(self) -> bool:
        try:
            from warden.adapters.sandbox.host import bwrap_path
        except ImportError:
            return False
        return bwrap_path() is not None

    def trust(self) -> tuple[dict[str, str], list[str]]:
        return trust_settings(self._caller_env)

    def uv(self) -> str:
        from warden.adapters.envs.interpreters import uv_binary

        return os.path.realpath(uv_binary())  # mounted at its own path: never a link to follow inside

    def run(self, folder: str, argv: Sequence[str], *, env: Mapping[str, str], ro_paths: Sequence[str] = (),
            rw_paths: Sequence[str] = (), domains: Sequence[str] = (), limits: Limits | None = None,
            ) -> RunResult:
        return run_tool(folder, argv, env=env, caller_env=self._caller_env, ro_paths=ro_paths, rw_paths=rw_paths,
                        domains=domains, limits=limits or TOOL_LIMITS)


class NpmTarballFiles:
    """Reads npm package tarballs the person names (`warden install --node /path/pkg.tgz`)."""

    def package_name(self, tarball: str) -> str:
        refusal = f"{tarball} is not an npm package tarball (package/package.json with a name)"
        try:
            with tarfile.open(tarball) as tar:
                member = tar.extractfile("package/package.json")
                if member is None:
                    raise InvalidInput(refusal)
                data = member.read(_MAX_PACKAGE_JSON + 1)  # a bot may have made the tarball
                if len(data) > _MAX_PACKAGE_JSON:
                    raise InvalidInput(refusal)
                name = json.loads(data)["name"]
        except (KeyError, TypeError, ValueError, EOFError, tarfile.TarError) as exc:
            raise InvalidInput(refusal) from exc
        if not isinstance(name, str) or not name:
            raise InvalidInput(refusal)
        return name
