"""Runs INSIDE the sandbox, before the command, when the network is allowed.

The sandbox has its own network namespace with only a loopback device, so nothing inside
can reach the host's network, and the filtering proxy lives outside, behind a Unix socket
bound into the sandbox. Most programs only speak HTTP(S)_PROXY over TCP, so this small
stdlib script listens on 127.0.0.1 (a free port of the sandbox's own loopback), forks a
child that relays each connection to the Unix socket, and executes the command with the
proxy variables set — the role socat plays in Anthropic's sandbox-runtime, done with the
system python3 so nothing extra is installed. It is started as
`python3 -I -S -c SOURCE SOCKET -- COMMAND...`; the relay dies with the sandbox.
"""

import contextlib
import os
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold none of the command's pipes open
        os.dup2(null, fd)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def main() -> None:
    path, sep, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sep != "--" or not command:
        sys.stderr.write("warden forwarder: usage: SOCKET -- COMMAND...\n")
        sys.exit(126)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    url = "http://127.0.0.1:{}".format(listener.getsockname()[1])  # noqa: UP032 (runs on any python3)
    if os.fork() == 0:
        try:
            _serve(listener, path)
        finally:
            os._exit(0)
    listener.close()
    env = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
                 "npm_config_proxy", "npm_config_https_proxy"):
        env[name] = url
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 (argv, never a shell string)
    except OSError as exc:
        # In the launchers' words (core.runs._EXEC_FAILED), so that Warden's line for a program that
        # could not start ("not in the sandbox: did you mean python?") follows, as without network;
        # never "warden:", which is Warden's own voice outside the sandbox.
        sys.stderr.write(f"warden-forwarder: failed to execute {command[0]}: {exc.strerror}\n")
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
