"""`warden serve`: the HTTP API for bots, on the embedded SQLite registry by default."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import TYPE_CHECKING, Any

from warden.core.errors import InvalidInput, Unavailable
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output

if TYPE_CHECKING:  # socket and the settings module load when a server starts, not for `warden --help`
    import socket


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help="serve the bot API over HTTP (FastAPI + uvicorn)")
    p.add_argument("--host", help="address to listen on (default: api.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default: api.port, 8787; 0 picks a free one)")
    p.add_argument("--workers", type=int, help="worker processes (default: api.workers, 1); one per core "
                   "serves the most requests")
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate chain (PEM; default: "
                   "api.tls_cert); other nodes verify it with node.ca_file")
    p.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM; default: api.tls_key)")
    p.add_argument("--no-access-log", dest="access_log", action="store_false",
                   help="do not log one line per request")
    p.set_defaults(handler=_serve)


def _bind(host: str, port: int) -> socket.socket:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Unavailable(f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port "
                          "or stop what uses it") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def tls_files(cert: str, key: str) -> tuple[str, str] | None:
    """The certificate and key `serve` answers HTTPS with (None: plain HTTP), checked before it
    listens: both or neither, readable, and a key that matches the certificate; else one line."""
    if not cert and not key:
        return None
    if not (cert and key):
        raise InvalidInput("give both --tls-cert and --tls-key (or api.tls_cert and api.tls_key), or neither")
    import ssl

    cert, key = os.path.expanduser(cert), os.path.expanduser(key)
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except OSError as exc:
        raise InvalidInput(f"bad --tls-cert/--tls-key: {exc.strerror or exc} ({exc.filename or cert})") from None
    except ssl.SSLError as exc:
        raise InvalidInput(f"bad --tls-cert/--tls-key: not a PEM certificate chain and its matching key "
                           f"({exc.reason or exc})") from None
    return cert, key


def connect_help(url: str, database: str, python: str = "python") -> str:
    """What `warden serve` prints: where it listens and how a bot connects. `python`: an interpreter
    that has the SDK, this one: a newcomer who pasted step 2 into the system's `python3` got
    "No module named 'warden'", and nothing said which Python has it."""
    return f"""Warden API listening on {url}  (registry: {database})

How a bot connects:
  1. register it once (prints its identity token; keep it secret):
       warden bot register my-bot
  2. from Python ({python} has the SDK), with the token in WARDEN_TOKEN:
       from warden.client import Client
       ws = Client("{url}").create_workspace("demo")      # asks for a workspace of its own
       print(ws.run(["python", "-c", "print(42)"]).stdout)
  3. or over plain HTTP (the token never goes on a command line):
       printf 'Authorization: Bearer %s' "$WARDEN_TOKEN" | curl -sS -H @- -H 'content-type: application/json' \\
         -d '{{"bot": "my-bot", "request": "workspace", "params": {{"name": "demo"}}}}' {url}/v1/workspaces
  4. or as MCP tools (streamable HTTP, `Authorization: Bearer <token>`): {url}/mcp

API reference: {url}/docs   OpenAPI: {url}/openapi.json   Press Ctrl+C to stop."""


def _serve(ctx: Context, args: argparse.Namespace) -> Output:
    import uvicorn

    from warden.core.settings import MAX_WORKERS, check_port
    from warden.interfaces.http import create_app
    from warden.interfaces.http.protocol import BoundedHttpToolsProtocol, DeniedHandshakeProtocol

    app = ctx.app
    app.serving = True  # its requests are bots': no terminal's lock is theirs (set before anything is built)
    host = args.host or app.settings.get_str("api.host")
    port = app.settings.get_int("api.port") if args.port is None else args.port
    check_port(port)
    workers = app.settings.get_int("api.workers") if args.workers is None else args.workers
    if not 1 <= workers <= MAX_WORKERS:
        raise InvalidInput(f"bad --workers {workers}: use 1-{MAX_WORKERS}")
    tls = tls_files(args.tls_cert or app.settings.get_str("api.tls_cert"),
                    args.tls_key or app.settings.get_str("api.tls_key"))
    app.root_dir.mkdir(parents=True, exist_ok=True)
    app.keystore.ensure()
    database = app.registry.url.split("@")[-1]
    api = create_app(app)  # built here too, so a broken setting fails before listening
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if tls else 'http'}://{shown}:{bound}"
    # What a killed server or run left behind: cgroups, temp files, runs never finished (lost).
    swept = app.sweeper.sweep().to_json()
    app.audit.record(actor="user", action="serve.start", target=url,
                     detail={"swept": {k: v for k, v in swept.items() if v and k != "dry_run"}})
    _watch_live_sandboxes(app)
    _keep_clean(app)
    # Registered with its API's URL (node.url when set: behind a proxy or TLS), so other nodes
    # forward requests for this node's workspaces here; the heartbeat says it is up.
    advertised = app.settings.get_str("node.url").rstrip("/") or url
    if not advertised.startswith(("http://", "https://")) or any(c.isspace() for c in advertised):
        raise InvalidInput(f"bad node.url {advertised!r}: give http://HOST:PORT or https://HOST:PORT")
    instance = app.instances.registered("serve", url=advertised)
    instance.__enter__()
    if ctx.json:
        import json

        # stdout holds one document, written when the server stops; the address goes to stderr.
        sys.stderr.write(json.dumps({"event": "listening", "url": url, "database": database}) + "\n")
        sys.stderr.flush()
    else:
        sys.stdout.write(connect_help(url, database, sys.executable or "python") + "\n")
        sys.stdout.flush()
    head_timeout = app.settings.get_seconds("api.request_timeout")
    options: dict[str, Any] = {"log_level": "info", "access_log": args.access_log, "lifespan": "off",
                               "timeout_graceful_shutdown": 5, "server_header": False,
                               "proxy_headers": False,  # no proxy in front by default: trust no X-Forwarded-*
                               # request line and headers bounded (414/431), and timed (408)
                               "http": functools.partial(BoundedHttpToolsProtocol, head_timeout_s=head_timeout,
                                                         max_connections=app.settings.get_int("api.max_connections")),
                               # a refused PTY handshake is no server error; a client's unread bytes bounded
                               "ws": functools.partial(DeniedHandshakeProtocol, drain_timeout_s=head_timeout),
                               "log_config": _log_config(args.access_log)}
    if tls:
        options.update(ssl_certfile=tls[0], ssl_keyfile=tls[1])
    # uvicorn hands a SIGTERM it caught back to the handler before it once it has stopped; the
    # default one would end the process before the `finally` below (instance, audit) runs.
    import signal

    stopped_by: list[int] = []  # a SIGHUP uvicorn stopped on as on a SIGTERM: the status is its

    def _terminated(signum: int, _frame: object) -> None:
        raise SystemExit(128 + (stopped_by[0] if stopped_by else signum))

    signal.signal(signal.SIGTERM, _terminated)
    try:
        if workers > 1:
            from uvicorn.supervisors import Multiprocess

            # Workers are fresh processes that build their own App from the environment.
            os.environ["WARDEN_HOME"] = str(app.home.root)
            config = uvicorn.Config("warden.interfaces.http.worker:app_from_environment", factory=True,
                                    workers=workers, **options)
            Multiprocess(config, sockets=[sock]).run()  # its own SIGHUP: its workers restarted
        else:
            server = uvicorn.Server(uvicorn.Config(api, **options))

            def _hung_up(signum: int, frame: Any) -> None:
                # uvicorn stops gracefully on SIGINT and SIGTERM only. The CLI's Terminated for a
                # SIGHUP (a closed terminal) was raised inside uvloop's signal callback, which
                # logged it as an error and served on, SIGTERM passed over from then on: only a
                # SIGKILL ended the server, with no serve.stop and its instance left registered.
                stopped_by.append(signum)
                server.handle_exit(signal.SIGTERM, frame)

            signal.signal(signal.SIGHUP, _hung_up)
            server.run(sockets=[sock])
    finally:
        sock.close()
        instance.__exit__(None, None, None)
        app.audit.record(actor="user", action="serve.stop", target=url)
    return Output({"url": url, "stopped": True}, streamed=True)


def _log_config(calls: bool) -> dict[str, Any]:
    """uvicorn's logging, plus Warden's line per API call (who, what, how it ended; http/calls.py)
    on the same stream, as long as the access log is on."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["warden"] = {"handlers": ["default"], "level": "INFO" if calls else "WARNING",
                                   "propagate": False}
    # uvicorn logs a WebSocket's path with its query, where a browser client (which cannot set
    # headers on one) may have put its token: no line of the server's shows a token.
    config.setdefault("filters", {})["tokens"] = {"()": "warden.interfaces.http.protocol.HideTokens"}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("tokens")
    return config


LIVE_SWEEP_S = 15.0
UNDONE_LOOK_S = 1.0


def _every(seconds: float, name: str, what: str, work: Any) -> None:
    """Run `work` every `seconds` in a daemon thread while the server runs; a failed round (a
    locked registry, a full disk) is said on stderr and the next one tries again."""
    import threading
    import time

    def loop() -> None:
        while True:
            time.sleep(seconds)
            try:
                work()
            except Exception as exc:
                sys.stderr.write(f"warden: {what} failed: {type(exc).__name__}: {exc}\n")

    threading.Thread(target=loop, name=name, daemon=True).start()


def _keep_clean(app: Any) -> None:
    """The janitor (services/janitor.py) every janitor.interval while the server runs; 0: never.
    Its leader lease keeps several servers (or a person's `warden janitor`) from acting twice."""
    interval = app.settings.get_seconds("janitor.interval")
    if interval > 0:
        _every(interval, "warden-janitor", "janitor pass", app.janitor.run)


def _watch_live_sandboxes(app: Any) -> None:
    """While the server runs, look at this machine's live sandboxes every LIVE_SWEEP_S seconds:
    ended background processes get their outcome audited, and a sandbox whose grant expired or
    that sits idle is stopped without waiting for someone to ask (services/live.py `sweep`)."""
    _every(LIVE_SWEEP_S, "warden-live-sweep", "live sandbox sweep", app.live.sweep)
    # A mask undone on the host (an editor's save over a denied file) left it readable to the
    # background processes until the next sweep: looked for every second (a few stats).
    _every(UNDONE_LOOK_S, "warden-live-masks", "live sandbox mount check", app.live.stop_undone)
