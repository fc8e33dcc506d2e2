"""The thin venv: sees the layer, shadows it with its own installs, never follows planted links."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warden.adapters.envs.interpreters import find_python
from warden.adapters.envs.thin_venv import read_layer_site, write_thin_venv


def _layer(tmp_path: Path) -> Path:
    site = tmp_path / "layer" / "site-packages"
    (site / "layered").mkdir(parents=True)
    (site / "layered" / "__init__.py").write_text("WHERE = 'layer'\n")
    (site / "shadowed.py").write_text("WHERE = 'layer'\n")
    # A .pth inside the layer must work too (addsitedir, not a bare path line).
    (site / "extra.pth").write_text(str(tmp_path / "extra") + "\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "viapth.py").write_text("OK = True\n")
    return site


def test_thin_venv_sees_layer_and_own_packages_win(tmp_path: Path) -> None:
    interp = find_python(None, os.environ)
    site = _layer(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    venv = write_thin_venv(ws, interpreter=interp.executable, version=interp.version, layer_site=str(site),
                           scripts={"hello": "#!/bin/sh\necho hi\n"})
    own = venv / "lib" / f"python{interp.xy}" / "site-packages"
    (own / "shadowed.py").write_text("WHERE = 'workspace'\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sys, layered, shadowed, viapth; print(layered.WHERE, shadowed.WHERE, sys.prefix)"],
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["layer", "workspace", str(venv)]
    assert read_layer_site(ws) == str(site)
    assert os.access(venv / "bin" / "hello", os.X_OK)
    # Nothing in the venv is a hard link to anything.
    for path in venv.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert path.stat().st_nlink == 1


def test_rewrite_replaces_planted_links_without_following(tmp_path: Path) -> None:
    interp = find_python(None, os.environ)
    ws = tmp_path / "ws"
    ws.mkdir()
    target = tmp_path / "host-dir"
    target.mkdir()
    (target / "precious").write_text("keep")
    venv = write_thin_venv(ws, interpreter=interp.executable, version=interp.version, layer_site=None)
    # A bot swaps the venv's bin for a link to a host folder and pyvenv.cfg for a link to a file.
    bin_dir = venv / "bin"
    for entry in bin_dir.iterdir():
        entry.unlink()
    bin_dir.rmdir()
    bin_dir.symlink_to(target)
    (venv / "pyvenv.cfg").unlink()
    (venv / "pyvenv.cfg").symlink_to(target / "precious")
    write_thin_venv(ws, interpreter=interp.executable, version=interp.version, layer_site=None)
    assert sorted(p.name for p in target.iterdir()) == ["precious"]
    assert (target / "precious").read_text() == "keep"
    assert not bin_dir.is_symlink() and (bin_dir / "python").is_symlink()
    assert not (venv / "pyvenv.cfg").is_symlink()
    subprocess.run([str(bin_dir / "python"), "-c", "pass"], check=True)


def test_missing_python_version_says_how_to_get_one() -> None:
    try:
        find_python("3.99", os.environ)
    except Exception as exc:
        message = getattr(exc, "message", "")
        assert "Python 3.99 is not installed" in message
        assert "pyenv install 3.99" in message
        # Each way of creating a workspace is told its own spelling (the SDK's too: a bot's author
        # who met this through create_workspace was shown only the CLI's and the HTTP API's).
        for spelling in ("`--python X.Y`", "`python=\"X.Y\"` in the SDK's create_workspace",
                         "`\"python\": \"X.Y\"` in the HTTP API"):
            assert spelling in message, message
        assert "apt-get install python3.99" not in message  # no such package anywhere
        assert getattr(exc, "code", "") == "not_found"
    else:
        raise AssertionError("3.99 was found")


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="no apt here")
def test_the_apt_package_is_named_only_where_apt_has_it() -> None:
    """Debian 12 has no python3.12: the hint must not send the person to `apt-get install python3.12`."""
    from warden.adapters.envs.interpreters import _apt_has

    known = subprocess.run(["apt-cache", "show", "--no-all-versions", "python3.12"], capture_output=True,
                           check=False).returncode == 0
    assert _apt_has("python3.12") is known
    assert _apt_has("python3.99") is False
    assert _apt_has("python3.12; rm -rf /") is False


def test_a_slow_apt_costs_the_refusal_at_most_a_moment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where apt keeps no binary cache, apt-cache takes seconds: the hint is dropped, not waited for."""
    from warden.adapters.envs.interpreters import _apt_has

    slow = tmp_path / "apt-cache"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    assert _apt_has("python3.12") is False
    assert time.monotonic() - started < 5


def test_own_interpreter_is_found() -> None:
    interp = find_python(f"{sys.version_info[0]}.{sys.version_info[1]}", os.environ)
    assert interp.version.startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    assert os.path.isabs(interp.executable) and not os.path.islink(interp.executable)
