"""Warden's native `warden` program (src/warden/interfaces/cli/client.c), built for a test by the
script scripts/setup builds it with. It execs the `python` beside it for what it does not do
itself, so it is built into a venv of the test's own: that `python` is this one's, in a venv
whose `lib` and `libexec` are this one's (so the same Warden, the same launcher). A copy of it
beside a `python` that is no Python (`strict_copy`) tells when the client handed a command to
Python. A test that needs it is skipped only where there is no C compiler."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build-warden-client"
_NO_COMPILER = 3  # scripts/build-warden-client's status without cc or gcc

FELL_BACK = 99  # the status of a strict copy's stand-in for Python
FELL_BACK_SAID = b"the native client handed this command to Python\n"


def build_client(folder: Path) -> Path:
    """The native client built as `folder`/bin/warden, `folder` a venv that is this one's."""
    prefix = Path(sys.prefix)
    if not (prefix / "pyvenv.cfg").exists():
        pytest.skip("the tests run outside a venv: the native client finds Warden's Python in one")
    (folder / "bin").mkdir(parents=True)
    shutil.copy2(prefix / "pyvenv.cfg", folder / "pyvenv.cfg")
    (folder / "bin" / "python").symlink_to(sys.executable)
    for shared in ("lib", "libexec"):
        if (prefix / shared).exists():
            (folder / shared).symlink_to(prefix / shared)
    return _build_into(folder)


def strict_copy(client: Path, folder: Path) -> Path:
    """A copy of `client` (a copy: it finds its `python` beside its own file, links resolved) whose
    `python` says it ran and exits FELL_BACK: a command this copy ran as the real one does went
    through the daemon. The stand-in notes what its descriptors are (`handed_over`)."""
    (folder / "bin").mkdir(parents=True)
    stand_in = folder / "bin" / "python"
    stand_in.write_text("#!/bin/sh\n"
                        'readlink /proc/$$/fd/* >"${0%/*}/descriptors" 2>/dev/null\n'
                        f"printf '{FELL_BACK_SAID.decode().strip()}\\n' >&2\n"
                        f"exit {FELL_BACK}\n")
    stand_in.chmod(0o755)
    copy = folder / "bin" / "warden"
    shutil.copy2(client, copy)
    return copy


def handed_over(strict: Path) -> list[str]:
    """What the descriptors of the strict copy's last Python stand-in were (readlink's words)."""
    return (strict.parent / "descriptors").read_text().split()


def build_client_for_another_user(folder: Path) -> Path:
    """The native client built as `folder`/bin/warden for a user other than root: its `python`
    the system's (this one's may be under /root, out of their reach), of this one's version, in
    a venv that finds this one's packages and Warden's sources. `folder` must be reachable by them."""
    system = Path("/usr/bin/python3")
    probe = subprocess.run([str(system), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                           text=True, check=False) if system.exists() else None
    if probe is None or probe.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip(f"no system Python {sys.version_info[0]}.{sys.version_info[1]} for another user to run Warden with")
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
    import site

    import warden

    found = [p for p in site.getsitepackages() if Path(p).is_dir()] + [str(Path(warden.__file__).parents[1])]
    [packages] = (folder / "lib").glob("python*/site-packages")
    (packages / "warden-tests.pth").write_text("\n".join(found) + "\n")
    if (Path(sys.prefix) / "libexec").exists():
        (folder / "libexec").symlink_to(Path(sys.prefix) / "libexec")
    return _build_into(folder)


def _build_into(folder: Path) -> Path:
    """The native client built as `folder`/bin/warden (skipped without a C compiler)."""
    output = folder / "bin" / "warden"
    built = subprocess.run([str(BUILD), str(output)], capture_output=True, text=True, check=False)
    if built.returncode == _NO_COMPILER:
        pytest.skip("no C compiler: `warden` is the Python client")
    assert built.returncode == 0, built.stderr
    return output
