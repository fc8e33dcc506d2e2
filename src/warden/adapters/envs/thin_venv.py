"""A workspace's own thin venv on top of a read-only Python layer.

The venv holds `pyvenv.cfg`, `bin/python` linking to the base interpreter, and an empty
`site-packages` with one `.pth` file that adds the layer's `site-packages` through
`site.addsitedir` (so `.pth` files inside the layer work too). The workspace's own
`site-packages` comes first on `sys.path`, so a package a bot installs shadows the layer's.
Nothing here is a hard link: every file is written fresh, and the layer is only named.
Writing one takes about a millisecond.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from warden.adapters.safefs.fdtree import open_tree

__all__ = ["LAYER_PTH", "read_layer_site", "write_thin_venv"]

LAYER_PTH = "_warden_layer.pth"

_ACTIVATE = """\
# Source this file from bash or zsh: `. .venv/bin/activate` (written by Warden)
deactivate () {
    if [ -n "${_OLD_VIRTUAL_PATH:-}" ]; then PATH="$_OLD_VIRTUAL_PATH"; export PATH; unset _OLD_VIRTUAL_PATH; fi
    unset VIRTUAL_ENV
    if [ "${1:-}" != "nondestructive" ]; then unset -f deactivate; fi
}
deactivate nondestructive
VIRTUAL_ENV="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export VIRTUAL_ENV
_OLD_VIRTUAL_PATH="$PATH"
PATH="$VIRTUAL_ENV/bin:$PATH"
export PATH
hash -r 2>/dev/null || true
"""


def write_thin_venv(workspace: Path, *, interpreter: str, version: str, layer_site: str | None,
                    scripts: Mapping[str, str] | None = None, name: str = ".venv") -> Path:
    """Write (or repair) the thin venv `workspace/name`; packages already installed in it stay.

    Every write goes through `fdtree`, so links a bot planted in the venv are replaced,
    never followed.
    """
    xy = ".".join(version.split(".")[:2])
    with open_tree(workspace) as ws, ws.subdir(name) as venv:
        venv.write("pyvenv.cfg",
                   f"home = {os.path.dirname(interpreter)}\n"
                   "include-system-site-packages = false\n"
                   f"version = {version}\n"
                   f"executable = {interpreter}\n"
                   "warden-thin = true\n")
        venv.write(".gitignore", "*\n")
        if not venv.exists("lib64"):
            venv.symlink("lib", "lib64")
        with venv.path("lib", f"python{xy}", "site-packages") as site:
            if layer_site:
                site.write(LAYER_PTH, f"import site; site.addsitedir({layer_site!r})\n")
            else:
                site.unlink(LAYER_PTH)
        with venv.subdir("bin") as bin_dir:
            bin_dir.symlink(interpreter, "python")
            bin_dir.symlink("python", "python3")
            bin_dir.symlink("python", f"python{xy}")
            bin_dir.write("activate", _ACTIVATE)
            for script, text in (scripts or {}).items():
                bin_dir.write(script, text, 0o755, exclusive=True)
    return workspace / name


def read_layer_site(workspace: Path) -> str | None:
    """The layer site-packages the workspace's thin venv names, or None (no .pth, or not
    Warden's form). Read beneath the workspace without following links: the bot writes it."""
    from warden.adapters.safefs import read_small, regular_dirs

    for lib in regular_dirs(workspace, ".venv/lib", ""):
        if not lib.startswith("python3."):
            continue
        raw = read_small(workspace, f".venv/lib/{lib}/site-packages/{LAYER_PTH}", 64 * 1024)
        if raw is None:
            return None
        text = raw.decode("utf-8", "replace").strip()
        prefix = "import site; site.addsitedir("
        if text.startswith(prefix) and text.endswith(")"):
            import ast

            try:
                value = ast.literal_eval(text[len(prefix):-1])
            except (ValueError, SyntaxError):
                return None
            return value if isinstance(value, str) else None
    return None
