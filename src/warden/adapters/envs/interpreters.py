"""Finding a Python interpreter installed on this machine, and the Node.js runtime.

uv's own discovery (`uv python find 3.12`) stops at the first `python3.12` on PATH; with
pyenv that is a shim which fails unless that version is globally selected, so uv reports
an error although pyenv has the interpreter. Warden therefore looks itself, in this order:
the interpreter running Warden, `pythonX.Y` on PATH (shim folders skipped), pyenv's
`versions/*`, then uv's discovery (its managed installs). Interpreter downloads are never
attempted: they are not reachable here and a broker must not fetch toolchains silently.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from warden.core import layers
from warden.core.errors import NotFound, Unavailable
from warden.core.layers import NodeRuntime

__all__ = ["Interpreter", "NodeRuntime", "find_node", "find_python", "installed_pythons", "uv_binary"]

_QUERY = ("import json, sys, sysconfig, os, platform; print(json.dumps({"
          "'version': platform.python_version(), 'implementation': sys.implementation.name,"
          "'executable': os.path.realpath(sys.executable), 'prefix': sys.base_prefix,"
          "'stdlib': sysconfig.get_paths()['stdlib'], 'machine': platform.machine(),"
          "'libc': '-'.join(platform.libc_ver()), 'platform': sys.platform}))")


@dataclass(frozen=True)
class Interpreter(layers.Interpreter):
    """A base interpreter (core/layers), with where its bundled pip wheel lies."""

    @property
    def pip_wheel(self) -> str | None:
        """The pip wheel bundled with the interpreter (ensurepip), for an offline pip in layers."""
        found = sorted(glob.glob(os.path.join(self.stdlib, "ensurepip", "_bundled", "pip-*.whl")))
        return found[-1] if found else None


def uv_binary() -> str:
    """uv's binary from the `uv` Python package Warden depends on."""
    try:
        import uv

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError) as exc:
        raise Unavailable("uv is missing from Warden's environment; reinstall Warden "
                          "(`pip install --force-reinstall warden`)") from exc


def _query(executable: str) -> Interpreter | None:
    try:
        proc = subprocess.run([executable, "-I", "-S", "-c", _QUERY], capture_output=True,
                              timeout=20, check=False, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return None
    return Interpreter(executable=data["executable"], version=data["version"],
                       implementation=data["implementation"], prefix=data["prefix"],
                       stdlib=data["stdlib"],
                       platform=f"{data['platform']}-{data['machine']}-{data['libc'] or 'unknown'}")


def _pyenv_roots(environ: Mapping[str, str]) -> list[Path]:
    roots: list[Path] = []
    if environ.get("PYENV_ROOT"):
        roots.append(Path(environ["PYENV_ROOT"]))
    for entry in environ.get("PATH", "").split(os.pathsep):
        if entry.rstrip("/").endswith(os.path.join(".pyenv", "shims")):
            roots.append(Path(entry).parent)
    with contextlib.suppress(KeyError):
        roots.append(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pyenv")
    unique: list[Path] = []
    for root in roots:
        try:
            usable = root not in unique and (root / "versions").is_dir()
        except OSError:  # another user's pyenv (a PYENV_ROOT we may not read): not ours to use
            usable = False
        if usable:
            unique.append(root)
    return unique


def _candidates(xy: str | None, environ: Mapping[str, str]) -> Iterator[str]:
    yield os.path.realpath(sys.executable if sys.prefix == sys.base_prefix else
                           os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}"))
    names = [f"python{xy}"] if xy else ["python3"]
    for entry in environ.get("PATH", "").split(os.pathsep):
        if not entry or "shims" in Path(entry).parts:
            continue
        for name in names:
            path = os.path.join(entry, name)
            if os.access(path, os.X_OK):
                yield os.path.realpath(path)
    for root in _pyenv_roots(environ):
        pattern = f"{xy}.*" if xy else "3.*"
        for version_dir in sorted(glob.glob(str(root / "versions" / pattern)), key=_version_key, reverse=True):
            for path in sorted(glob.glob(os.path.join(version_dir, "bin", "python3.*"))):
                if re.search(r"python3\.\d+$", path):
                    yield os.path.realpath(path)


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", os.path.basename(path))[:3])


def installed_pythons(environ: Mapping[str, str]) -> list[Interpreter]:
    """Every CPython 3 found by the rules above, one per X.Y (the first found wins)."""
    found: dict[str, Interpreter] = {}
    seen: set[str] = set()
    for path in _candidates(None, environ):
        if path in seen:
            continue
        seen.add(path)
        interp = _query(path)
        if interp is not None and interp.xy not in found:
            found[interp.xy] = interp
    return sorted(found.values(), key=lambda i: _version_key(i.version))


def find_python(xy: str | None, environ: Mapping[str, str], *, at_least: bool = False) -> Interpreter:
    """The interpreter for Python `xy` (or Warden's own when None); NotFound says how to get one.

    With `at_least`, a newer X.Y is accepted when `xy` itself is missing (a template's
    version is a floor, as the workspace's pyproject.toml says: `requires-python = ">=X.Y"`).
    """
    seen: set[str] = set()
    for path in _candidates(xy, environ):
        if path in seen:
            continue
        seen.add(path)
        interp = _query(path)
        if interp is not None and (xy is None or interp.xy == xy):
            return interp
    uv_found = _uv_find(xy, environ) if xy else None
    if uv_found is not None:
        return uv_found
    others = installed_pythons(environ)
    if at_least and xy:
        wanted = _version_key(xy)
        newer = [i for i in others if _version_key(i.xy) >= wanted]
        if newer:
            return newer[0]
    listed = ", ".join(i.xy for i in others) or "none"
    apt = f", `apt-get install python{xy}`" if xy and _apt_has(f"python{xy}") else ""
    raise NotFound(f"Python {xy} is not installed on this machine (installed: {listed}); install it "
                   f"(`pyenv install {xy}`{apt}, or `uv python install {xy}` "
                   "where downloads are reachable) or pick an installed version: `--python X.Y` on the command "
                   "line, `python=\"X.Y\"` in the SDK's create_workspace, `\"python\": \"X.Y\"` in the HTTP "
                   "API's create params")


_APT_WAIT_S = 2.0  # past it, the refusal names no apt package rather than keep the person waiting


def _apt_has(package: str) -> bool:
    """Whether this machine's apt knows `package` (Debian 12 has no python3.12: naming it would send
    the person to a command that fails). Only on the way to an error, so a subprocess is fine, but a
    short one: where apt keeps no binary cache (Debian's container images set `Dir::Cache::pkgcache ""`)
    apt-cache parses every package list each time, seconds on a busy machine, and the refusal waited."""
    apt_cache = shutil.which("apt-cache")
    if apt_cache is None or not re.fullmatch(r"python3\.\d+", package):
        return False
    try:
        proc = subprocess.run([apt_cache, "show", "--no-all-versions", package], capture_output=True,
                              timeout=_APT_WAIT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _uv_find(xy: str, environ: Mapping[str, str]) -> Interpreter | None:
    env = {k: v for k, v in environ.items() if k in {"HOME", "XDG_DATA_HOME", "UV_PYTHON_INSTALL_DIR"}}
    env["PATH"] = os.pathsep.join(p for p in environ.get("PATH", "").split(os.pathsep)
                                  if p and "shims" not in Path(p).parts)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    try:
        proc = subprocess.run([uv_binary(), "python", "find", "--no-config", xy], capture_output=True,
                              text=True, timeout=30, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired, Unavailable):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return _query(os.path.realpath(proc.stdout.strip()))


def find_node(major: str | None, environ: Mapping[str, str]) -> NodeRuntime:
    """`node` (and `npm`) on PATH, checked against the wanted major version."""
    import shutil

    path = environ.get("PATH", os.defpath)
    node = shutil.which("node", path=path)
    if node is None:
        raise NotFound("Node.js is not installed on this machine; install it (`apt-get install nodejs npm`) "
                       "or use a template without a nodejs section")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"cannot run {node} --version: {exc}") from exc
    version = out.strip().lstrip("v")
    runtime = NodeRuntime(os.path.realpath(node), shutil.which("npm", path=path), version)
    if major and runtime.major != major:
        raise NotFound(f"Node.js {major} is not installed here (found {version} at {node}); install it "
                       f"(e.g. with nvm or NodeSource packages) or pick --node {runtime.major}")
    return runtime
