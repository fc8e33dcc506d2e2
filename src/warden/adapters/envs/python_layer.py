"""Building a Python env layer with uv: lock, relocatable venv, copied install, bytecode.

Why `--link-mode=copy`: uv's default here hard-links files from its cache, so an in-place
edit of an installed file by one workspace would change the cache and every other
environment built from it (cross-bot poisoning). Copies share no inode with anything.
Why `--compile-bytecode`: the layer is read-only afterwards, so Python could never write
the `.pyc` files itself and would recompile on every import.
Why an `execute` port: uv may build sdists, which runs their code; the layer service hands
in a sandboxed runner, so nothing of a template's dependencies runs on the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from warden.adapters.envs.installer_output import UV_LOG, InstallerOutput, is_log_line
from warden.adapters.envs.interpreters import Interpreter
from warden.adapters.envs.layer_store import LayerStore, dir_size
from warden.adapters.envs.progress import Progress, counted
from warden.core.errors import Unavailable
from warden.core.layers import IndexOptions

__all__ = ["Execute", "IndexOptions", "build_python_layer", "uv_env"]

BUILDER_VERSION = "1"



class Execute(Protocol):
    """Runs argv in a folder with an environment; returns (exit status, stdout, stderr).
    `on_stderr` is given stderr as it comes (all of it is in the result too)."""

    def __call__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], /, *,
                 on_stderr: Callable[[bytes], None] | None = None) -> tuple[int, str, str]: ...


def uv_env(cache_dir: Path) -> dict[str, str]:
    """The whole environment uv builds in: no interpreter downloads, no user or project config
    (a bot-writable uv.toml must not steer it), and Warden's own cache."""
    return {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1",
            "UV_CACHE_DIR": str(cache_dir)}


def _run(execute: Execute, argv: list[str], *, cwd: Path, env: Mapping[str, str], what: str,
         on_stderr: Callable[[bytes], None] | None = None) -> None:
    code, out, err = execute(argv, cwd, env, on_stderr=on_stderr)
    if code != 0:
        detail = [line for line in (err or out).strip().splitlines() if not is_log_line(line)]
        tail = " | ".join(line.strip() for line in detail[-6:] if line.strip())
        raise Unavailable(f"{what} failed: {tail or f'exit status {code}'}; "
                          "check the template's dependencies and the package index (envs.* settings)")


def build_python_layer(store: LayerStore, layer_id: str, *, dependencies: Sequence[str],
                       interpreter: Interpreter, uv: str, index: IndexOptions,
                       execute: Execute, cache_dir: Path, progress: Progress,
                       meta: Mapping[str, Any], replace: bool = False) -> dict[str, Any]:
    """Build layer `layer_id` (no-op when it exists, unless `replace`: a rebuild); returns its layer.json."""
    with store.build_lock(layer_id):
        if store.exists(layer_id) and not replace:
            return store.read(layer_id) or {}
        cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = uv_env(cache_dir)
        started = time.time()
        with store.staging(layer_id) as build:
            (build / "requirements.in").write_text("".join(f"{d}\n" for d in dependencies))
            progress.step(counted(len(dependencies), "dependency", "dependencies", "resolving"))
            lock = build / "requirements.lock"
            if dependencies:
                _run(execute, [uv, "pip", "compile", "requirements.in", "-o", str(lock), "--python",
                      interpreter.executable, "--no-header", "--quiet", *index.uv_args()],
                     cwd=build, env=env, what="resolving the dependencies (uv pip compile)")
            else:
                lock.write_text("")
            progress.step("creating the layer venv")
            venv = build / "venv"
            _run(execute, [uv, "venv", "--relocatable", "--python", interpreter.executable, "--quiet", str(venv)],
                 cwd=build, env=env, what="creating the venv (uv venv)")
            python = str(venv / "bin" / "python")
            pinned = [line for line in lock.read_text().splitlines() if line and not line.startswith(("#", " "))]
            progress.step(counted(len(pinned), "package", "packages", "installing"))
            if pinned:
                # Per package, from uv's stderr: its log of each wheel prepared and installed
                # (UV_LOG), with the lock's names, so the bar moves through "installing 25".
                follow = InstallerOutput(progress.count(len(pinned), "installed"),
                                         (line.partition("==")[0] for line in pinned))
                try:
                    _run(execute, [uv, "pip", "sync", str(lock), "--python", python, "--link-mode=copy",
                          "--compile-bytecode", "--quiet", *index.uv_args()],
                         cwd=build, what="installing the packages (uv pip sync)",
                         # uv's log only for a bar that reads it: without one, uv runs as it always did
                         env={**env, "RUST_LOG": UV_LOG} if progress.enabled else env,
                         on_stderr=follow if progress.enabled else None)
                finally:
                    follow.close()
            pip_wheel = interpreter.pip_wheel
            if pip_wheel and not any(p.lower().startswith("pip==") for p in pinned):
                # pip from the interpreter's own ensurepip wheel (offline): `python -m pip`
                # sees the layer's packages through the .pth, uv does not.
                _run(execute, [uv, "pip", "install", "--python", python, "--link-mode=copy", "--compile-bytecode",
                      "--no-deps", "--offline", "--quiet", pip_wheel],
                     cwd=build, env=env, what="adding pip to the layer")
            progress.step("sealing the layer read-only")
            site = _site_packages(venv, interpreter.xy)
            info = {
                "id": layer_id, "kind": "python", "builder": BUILDER_VERSION,
                "dependencies": list(dependencies), "packages": pinned,
                "python": interpreter.to_json(),
                "site_packages": str(site.relative_to(build)),  # where the layer lies (core/layers.py)
                "scripts": _scripts(venv / "bin"),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.time() - started, 2),
                "size": dir_size(build), **dict(meta),
            }
            return store.commit(build, layer_id, info, replace=replace)


def _site_packages(venv: Path, xy: str) -> Path:
    path = venv / "lib" / f"python{xy}" / "site-packages"
    if not path.is_dir():
        raise Unavailable(f"the layer venv has no {path.relative_to(venv)}; the interpreter layout is unusual")
    return path


def _scripts(bin_dir: Path) -> dict[str, str]:
    """Console scripts of the layer, to copy into each thin venv's bin (their shebangs are relative)."""
    scripts: dict[str, str] = {}
    for entry in sorted(bin_dir.iterdir()):
        name = entry.name
        if name.startswith(("python", "activate", "deactivate")) or entry.is_symlink() or not entry.is_file():
            continue
        try:
            text = entry.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if text.startswith("#!") and len(text) < 64 * 1024:
            scripts[name] = text
    return scripts
