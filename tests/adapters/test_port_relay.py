"""The host side of a forward (adapters/port_relay.py): whose connections it relays, where it listens."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from warden.adapters import port_relay
from warden.adapters.port_relay import listen, peer_uid
from warden.core.errors import Denied


def _both_ways(accepted: socket.socket, tables: str) -> tuple[int | None, int | None]:
    """The owner as sock_diag's exact lookup finds it, and as the text tables do."""
    peer, ours = accepted.getpeername(), accepted.getsockname()
    return port_relay._diag_uid(accepted.family, peer, ours), peer_uid(accepted, table=tables)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_owner_of_a_loopback_connection_is_read_from_the_kernels_table(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, 0), family=family) as server:
        with socket.create_connection(server.getsockname()[:2]):
            accepted, _ = server.accept()
            with accepted:
                assert peer_uid(accepted) == os.getuid()
                # The exact lookup is what is used (a table read costs a line per TCP socket of the
                # host, 17 ms with 5,000 of them, for every connection); refused, the tables answer.
                assert _both_ways(accepted, "/proc/self/net") == (os.getuid(), os.getuid())
        # A client's IPv6 socket reaching 127.0.0.1 is listed as ::ffff:127.0.0.1.
        if family == socket.AF_INET:
            with socket.socket(socket.AF_INET6) as mapped:
                mapped.connect(("::ffff:127.0.0.1", server.getsockname()[1]))
                accepted, _ = server.accept()
                with accepted:
                    assert _both_ways(accepted, "/proc/self/net") == (os.getuid(), os.getuid())


def test_a_connection_gone_from_the_table_has_no_owner(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()):
        accepted, _ = server.accept()
        with accepted:
            (tmp_path / "tcp").write_text("  sl  local_address rem_address   st\n")
            assert peer_uid(accepted, table=str(tmp_path)) is None


def _unprivileged_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, ValueError):
        return 1024


@pytest.mark.skipif(os.geteuid() == 0 or _unprivileged_start() <= 80,
                    reason="root (or this kernel's setting) may listen on port 80")
def test_a_privileged_port_names_the_fix() -> None:
    with pytest.raises(Denied) as refused:
        listen("127.0.0.1", 80)
    assert "needs root" in refused.value.message and "--listen" in refused.value.message


def test_a_connection_its_client_closed_has_no_owner() -> None:
    # Closed, the client's socket is listed as uid 0 (root's) with inode 0 while it finishes
    # closing: another account sent its bytes, closed, and was relayed as root.
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()) as client:
            client.sendall(b"bytes before the lookup")
        accepted, _ = server.accept()
        with accepted:
            assert peer_uid(accepted) is None
            assert _both_ways(accepted, "/proc/self/net") == (None, None)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None or not Path("/usr/bin/python3").exists(),
                    reason="another account's connection needs root to make one as `nobody`")
def test_another_accounts_connection_is_named_by_its_account() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = subprocess.Popen(  # holds its connection open until told (its stdin closes)
            [str(shutil.which("runuser")), "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c",
             f"import socket, sys; s = socket.create_connection(('127.0.0.1', {port})); sys.stdin.read()"],
            stdin=subprocess.PIPE)
        try:
            server.settimeout(30)
            accepted, _ = server.accept()
            with accepted:
                nobody = 65534
                assert peer_uid(accepted) == nobody
                assert _both_ways(accepted, "/proc/self/net") == (nobody, nobody)
        finally:
            assert client.stdin is not None
            client.stdin.close()
            client.wait(timeout=30)
