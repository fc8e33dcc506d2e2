"""Warden's own tools run sandboxed: their folder and rw binds writable, the rest as for bots."""

from __future__ import annotations

from pathlib import Path

from warden.adapters.sandbox.tools import run_tool, trust_settings


def test_trust_settings_keep_existing_absolute_paths_only(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    env, paths = trust_settings({"SSL_CERT_FILE": str(bundle), "SSL_CERT_DIR": "certs",
                                 "PIP_CERT": str(tmp_path / "missing.pem"), "AWS_SECRET_ACCESS_KEY": "x"})
    # uv is told to trust the system's authorities (mounted), as pip does; the caller may say no.
    # Both of uv's names: the old one for an older uv, the new one so a newer uv does not warn.
    assert env == {"SSL_CERT_FILE": str(bundle), "UV_NATIVE_TLS": "1", "UV_SYSTEM_CERTS": "1"}
    assert paths == [str(bundle)]
    assert trust_settings({"UV_NATIVE_TLS": "false"})[0] == {"UV_NATIVE_TLS": "0", "UV_SYSTEM_CERTS": "0"}
    assert trust_settings({"UV_SYSTEM_CERTS": "0"})[0] == {"UV_NATIVE_TLS": "0", "UV_SYSTEM_CERTS": "0"}


def test_folder_and_rw_binds_are_writable_ro_paths_are_not(tmp_path: Path) -> None:
    folder, cache, shared = tmp_path / "build", tmp_path / "cache", tmp_path / "shared"
    for path in (folder, cache, shared):
        path.mkdir()
    (shared / "input").write_text("in")
    script = (f"echo a > out && echo b > {cache}/entry && cat {shared}/input && "
              f"(echo c > {shared}/input) 2>/dev/null || echo ro")
    outcome = run_tool(folder, ["sh", "-c", script], env={}, caller_env={},
                       ro_paths=[str(shared)], rw_paths=[str(cache)])
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.stdout == "inro\n"
    assert (folder / "out").read_text() == "a\n"
    assert (cache / "entry").read_text() == "b\n"
    assert (shared / "input").read_text() == "in"


def test_trust_settings_reach_networked_tools_only(tmp_path: Path) -> None:
    folder = tmp_path / "build"
    folder.mkdir()
    outside = tmp_path / "certs"
    outside.mkdir()
    bundle = outside / "ca.pem"
    bundle.write_text("site CA\n")
    caller = {"SSL_CERT_FILE": str(bundle), "WARDEN_TEST_SECRET": "s3cret"}
    script = 'echo "$SSL_CERT_FILE|$WARDEN_TEST_SECRET"; cat "$SSL_CERT_FILE" 2>/dev/null || echo unreadable'
    online = run_tool(folder, ["sh", "-c", script], env={}, caller_env=caller, domains=["pypi.org:443"])
    assert online.exit_code == 0, online.stderr
    assert online.stdout.splitlines() == [f"{bundle}|", "site CA"]
    offline = run_tool(folder, ["sh", "-c", script], env={}, caller_env=caller)
    assert offline.stdout.splitlines() == ["|", "unreadable"]
