"""`scripts/setup` for a normal user behind a TLS-intercepting network: uv is told to use the
system's certificate authorities under both of its names, and a certificate failure ends with
what to set, not only "failed". uv itself is a stand-in here (no network, no install)."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

# The script installs what is missing with apt-get when it runs as root: only run it where
# nothing is missing, so it only checks.
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or ctypes.util.find_library("seccomp") is None,
                                reason="needs bubblewrap and libseccomp already installed")

FAILING_UV = """#!/bin/sh
echo "UV_SYSTEM_CERTS=$UV_SYSTEM_CERTS UV_NATIVE_TLS=$UV_NATIVE_TLS" >&2
echo "error: Request failed after 3 retries" >&2
echo "  Caused by: invalid peer certificate: UnknownIssuer" >&2
exit 2
"""


def _checkout(tmp_path: Path, uv: str) -> Path:
    """A copy of scripts/setup beside a venv whose python and uv are stand-ins."""
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "setup", tmp_path / "scripts" / "setup")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", "#!/bin/sh\nexit 0\n"), ("uv", uv)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755 | stat.S_IXUSR)
    return tmp_path


def _setup(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "HOME", "TMPDIR"}}
    return subprocess.run(["bash", str(folder / "scripts" / "setup")], capture_output=True, text=True,
                          env={**keep, **env}, timeout=120, check=False)


def test_a_certificate_failure_says_what_to_set(tmp_path: Path) -> None:
    done = _setup(_checkout(tmp_path, FAILING_UV))
    assert done.returncode == 1
    assert "UV_SYSTEM_CERTS=1 UV_NATIVE_TLS=1" in done.stderr  # both names: no uv warns, every uv reads one
    assert "export SSL_CERT_FILE=/path/to/company-ca.pem" in done.stderr
    assert "update-ca-certificates" in done.stderr
    assert done.stderr.rstrip().endswith("could not install Warden's dependencies (uv sync failed; see above)")


def test_the_user_s_choice_of_uv_certificates_is_kept(tmp_path: Path) -> None:
    done = _setup(_checkout(tmp_path, FAILING_UV), UV_NATIVE_TLS="0")
    assert "UV_SYSTEM_CERTS=0 UV_NATIVE_TLS=0" in done.stderr


def test_other_failures_get_no_certificate_advice(tmp_path: Path) -> None:
    done = _setup(_checkout(tmp_path, "#!/bin/sh\necho 'error: no space left on device' >&2\nexit 2\n"))
    assert done.returncode == 1 and "SSL_CERT_FILE" not in done.stderr
    ok = _setup(_checkout(tmp_path / "ok", "#!/bin/sh\nexit 0\n"))
    assert ok.returncode == 0 and "ready: .venv/bin/warden" in ok.stderr


def test_ready_says_how_to_type_warden_unless_the_shell_finds_this_one(tmp_path: Path) -> None:
    folder = _checkout(tmp_path, "#!/bin/sh\nexit 0\n").resolve()
    elsewhere = _setup(folder)  # the test's PATH holds no .venv/bin of this copy
    assert elsewhere.returncode == 0
    assert f'export PATH="{folder}/.venv/bin:$PATH"' in elsewhere.stderr.splitlines()[-1], elsewhere.stderr
    (folder / ".venv" / "bin" / "warden").write_text("#!/bin/sh\nexit 0\n")
    (folder / ".venv" / "bin" / "warden").chmod(0o755)
    found = _setup(folder, PATH=f"{folder}/.venv/bin:{os.environ['PATH']}")
    assert found.returncode == 0 and found.stderr.splitlines()[-1] == "warden setup: ready: .venv/bin/warden"


def test_the_first_setup_says_what_it_installs_before_minutes_of_quiet(tmp_path: Path) -> None:
    first = _checkout(tmp_path, "")
    (first / ".venv" / "bin" / "uv").unlink()  # a fresh venv: uv and the dependencies still to come
    done = _setup(first)
    said = "warden setup: installing uv and Warden's Python dependencies into .venv"
    assert done.stderr.startswith(said), done.stderr
    again = _setup(_checkout(tmp_path / "again", "#!/bin/sh\nexit 0\n"))
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr
