"""Seccomp filter generation and the doctor's probes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warden.adapters.sandbox import doctor, seccomp


def test_filter_compiles_to_bpf() -> None:
    program = seccomp.filter_bpf()
    assert program and len(program) % 8 == 0  # struct sock_filter is 8 bytes
    assert seccomp.libseccomp_version()


def test_doctor_reports_each_piece() -> None:
    checks = {c.name: c for c in doctor.run_checks()}
    assert {"bubblewrap", "user namespaces", "cgroups", "seccomp", "landlock"} <= set(checks)
    assert checks["bubblewrap"].ok and "bubblewrap" in checks["bubblewrap"].detail
    assert checks["user namespaces"].ok
    assert checks["seccomp"].ok
    for check in checks.values():
        assert check.ok or check.fix


def test_missing_bwrap_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "bwrap_path", lambda: None)
    checks = {c.name: c for c in doctor.run_checks()}
    assert not checks["bubblewrap"].ok and "apt-get install bubblewrap" in checks["bubblewrap"].fix
    assert not checks["user namespaces"].ok


def test_userns_fix_reads_the_ubuntu_sysctl(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"kernel.apparmor_restrict_unprivileged_userns": "1"}
    monkeypatch.setattr(doctor, "_sysctl", values.get)
    fix = doctor.userns_fix()
    assert fix and "kernel.apparmor_restrict_unprivileged_userns=0" in fix
    monkeypatch.setattr(doctor, "_sysctl", {"kernel.unprivileged_userns_clone": "0"}.get)
    assert "unprivileged_userns_clone=1" in (doctor.userns_fix() or "")


def test_as_root_without_a_pids_cgroup_doctor_says_commands_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from warden.adapters.sandbox import cgroups

    monkeypatch.setattr(cgroups, "detect", lambda: cgroups.CgroupSupport(None, None, ("pids not delegated",)))
    check = {c.name: c for c in doctor.run_checks()}["cgroups"]
    assert not check.ok
    if os.getuid() == 0:
        assert check.required and "every command is refused" in check.detail
    else:
        assert not check.required and "falling back to rlimits" in check.detail


def test_the_cgroup_fix_names_systemd_run_only_where_a_user_manager_answers(tmp_path: Path) -> None:
    # Without a systemd user session `systemd-run --user` fails ("Failed to connect to bus"):
    # the fix says what it needs instead of sending a normal user into that error.
    runtime = tmp_path / "run-user"
    runtime.mkdir()
    none = doctor.delegation_fix({"XDG_RUNTIME_DIR": str(runtime)})
    assert "needs a systemd user session" in none and "run Warden as root" in none
    (runtime / "systemd").mkdir()
    (runtime / "systemd" / "private").touch()
    present = doctor.delegation_fix({"XDG_RUNTIME_DIR": str(runtime)})
    assert "systemd-run --user --scope -p Delegate=yes" in present and "needs" not in present


def test_doctor_says_how_live_sandbox_commands_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from warden.adapters.sandbox import live

    python = "/usr/bin/python3"
    launcher = tmp_path / "warden-rlimit-exec"
    launcher.write_bytes(b"")
    launcher.chmod(0o755)
    monkeypatch.setattr(live, "HOST_RLIMIT_EXEC", str(launcher))
    assert f"commands start through Warden's sealed launcher ({launcher})" in doctor._live_check(python, True).detail
    launcher.unlink()  # scripts/setup found no C compiler
    if os.access(live.HOST_PRLIMIT, os.X_OK):
        slower = doctor._live_check(python, True).detail
        assert "sealed copy of prlimit, ~1 ms slower each" in slower and "install gcc" in slower, slower
    monkeypatch.setattr(live, "HOST_PRLIMIT", str(tmp_path / "prlimit"))
    missing = doctor._live_check(python, True)
    assert f"no {tmp_path / 'prlimit'} (util-linux): each command is forked" in missing.detail
    assert missing.ok  # still works, only slower
