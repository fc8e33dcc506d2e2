"""The filtering HTTP proxy that sandboxed commands reach through a Unix socket.

It runs in a helper thread of the Warden process (asyncio), outside the sandbox, and
speaks the two forms clients use with HTTP(S)_PROXY: `CONNECT host:port` (TLS is tunnelled
end to end, never inspected) and plain HTTP with an absolute URL. A plain request is
forwarded alone: its Host header is rewritten to the URL's host (the server must not route
it to another site than the one decided, as a CDN would by Host), exactly its
Content-Length body follows, nothing after it (no second, pipelined request to another
Host), and heads with bare line feeds or folded lines, which servers split differently,
are refused. The number of open connections is capped, so a command cannot use up
Warden's descriptors, and so are the decisions kept in memory (`events`): a command asking
again and again must not grow Warden's memory, nor the run's audit, without end.
Every target is decided by core.network twice: on the name (deny list, IP literals, allow
list), then on the addresses it resolves to (loopback, private, metadata ...); the checked
address is the one dialled, so the name cannot be rebound between check and connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from warden.core.decisions import Decision
from warden.core.errors import InvalidInput
from warden.core.network import NetworkPolicy, check_addresses, check_host, parse_target

__all__ = ["MAX_EVENTS", "FilteringProxy", "NetEvent"]

_HEAD_LIMIT = 64 * 1024
_MAX_CONNECTIONS = 64
MAX_EVENTS = 1000  # decisions kept for one run (a fresh sandbox's; a live one's between two reads)
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
               "proxy-authenticate", "te", "trailer", "upgrade", "host"}
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class NetEvent:
    """One decision of the proxy: what was asked and what was decided."""

    method: str
    host: str
    port: int
    allowed: bool
    rule: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"method": self.method, "host": self.host, "port": self.port,
                "allowed": self.allowed, "rule": self.rule, "reason": self.reason}


class FilteringProxy:
    """Start with `start()`, stop with `stop()`; `events` lists the decisions (the first
    `max_events`), `on_event` is told each."""

    def __init__(self, policy: NetworkPolicy, socket_path: str,
                 on_event: Callable[[NetEvent], None] | None = None,
                 connect_timeout: float = 15.0, max_connections: int = _MAX_CONNECTIONS,
                 max_events: int = MAX_EVENTS) -> None:
        self.policy = policy
        self.socket_path = socket_path
        self.events: list[NetEvent] = []  # the first `max_events` decisions; `dropped` counts the rest
        self.dropped = 0
        self._max_events = max_events
        self._on_event = on_event
        self._connect_timeout = connect_timeout
        self._max_connections = max_connections
        self._active = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="warden-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(5)
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced to start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_unix_server(self._handle, path=self.socket_path)
        os.chmod(self.socket_path, 0o600)
        self._ready.set()
        async with server:
            await self._stopping.wait()
            server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one connection ------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._active >= self._max_connections:
            writer.close()  # over the cap: refused at once, before anything is read
            return
        self._active += 1
        try:
            await self._serve_one(reader, writer)
        finally:
            self._active -= 1

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        try:
            if len(head) > _HEAD_LIMIT:
                await self._reply(writer, 431, "request head too large")
                return
            lines = head.decode("latin-1").split("\r\n")[:-2]
            if any("\r" in line or "\n" in line or "\0" in line for line in lines):
                await self._reply(writer, 400, "bare CR, LF or NUL in the request head")
                return
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN \
                    or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
                await self._reply(writer, 400, "bad request line")
                return
            method, target, version = parts
            if method == "CONNECT":
                await self._connect(method, target, reader, writer)
            else:
                await self._forward(method, target, version, lines[1:], reader, writer)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._reply(writer, 502, f"proxy error: {type(exc).__name__}")
        finally:
            writer.close()

    async def _decide(self, method: str, host: str, port: int) -> tuple[Decision, list[str]]:
        decision = check_host(self.policy, host, port)
        addresses: list[str] = []
        if decision.allowed:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM)
                found = list(dict.fromkeys(str(info[4][0]) for info in infos))
            except OSError:
                found = []
            decision, addresses = check_addresses(self.policy, host, port, found)
        event = NetEvent(method, host, port, decision.allowed, decision.rule, decision.reason)
        if len(self.events) < self._max_events:
            self.events.append(event)
        else:
            self.dropped += 1
        if self._on_event is not None:
            with contextlib.suppress(Exception):
                self._on_event(event)
        return decision, addresses

    async def _open_upstream(self, writer: asyncio.StreamWriter, method: str, host: str,
                             port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Decide `host:port` and connect to the checked address; None once the client was answered."""
        decision, addresses = await self._decide(method, host, port)
        if not decision.allowed:
            await self._reply(writer, 403, f"warden: network refused: {decision.reason}")
            return None
        try:
            return await self._dial(addresses, port)
        except (OSError, TimeoutError) as exc:
            await self._reply(writer, 502, f"cannot reach {host}:{port}: {exc}")
            return None

    async def _dial(self, addresses: list[str], port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        last: Exception = OSError("no address")
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port),
                                              self._connect_timeout)
            except (OSError, TimeoutError) as exc:
                last = exc
        raise last

    async def _connect(self, method: str, target: str, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        try:
            host, port = parse_target(target)
        except InvalidInput:
            await self._reply(writer, 400, f"bad CONNECT target {target!r}")
            return
        upstream = await self._open_upstream(writer, method, host, port)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await writer.drain()
        await _splice(reader, writer, up_reader, up_writer)

    async def _forward(self, method: str, target: str, version: str, headers: list[str],
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            await self._reply(writer, 400, "only absolute http:// URLs and CONNECT are proxied")
            return
        try:
            port = url.port or 80
        except ValueError:
            await self._reply(writer, 400, "bad port")
            return
        fields: list[tuple[str, str]] = []
        for line in headers:
            name, sep, value = line.partition(":")
            if not sep or not name or not set(name) <= _TOKEN:  # also folded (indented) lines
                await self._reply(writer, 400, f"bad header line {line[:60]!r}")
                return
            fields.append((name.lower(), value.strip()))
        if any(name == "transfer-encoding" for name, _ in fields):
            await self._reply(writer, 411, "chunked request bodies are not proxied for plain http; "
                                           "send a Content-Length or use https")
            return
        lengths = {value for name, value in fields if name == "content-length"}
        if len(lengths) > 1 or any(not v.isdigit() for v in lengths):
            await self._reply(writer, 400, "bad Content-Length")
            return
        body_length = int(lengths.pop()) if lengths else 0
        upstream = await self._open_upstream(writer, method, url.hostname, port)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        authority = host if url.port is None else f"{host}:{url.port}"
        kept = [h for h, (name, _) in zip(headers, fields, strict=True) if name not in _HOP_BY_HOP]
        head = "\r\n".join([f"{method} {path} {version}", f"Host: {authority}", *kept,
                             "Connection: close", "", ""])
        try:
            up_writer.write(head.encode("latin-1"))
            await up_writer.drain()
            await _copy_exactly(reader, up_writer, body_length)
            # The request is complete: what the client sends after it is never forwarded,
            # only the answer comes back.
            await _splice_one_way(up_reader, writer)
        finally:
            up_writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        reasons = {400: "Bad Request", 403: "Forbidden", 411: "Length Required",
                   431: "Request Header Fields Too Large", 502: "Bad Gateway"}
        body = (text + "\n").encode()
        writer.write(f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain"
                     f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        with contextlib.suppress(OSError):
            await writer.drain()


async def _copy_exactly(src: asyncio.StreamReader, dst: asyncio.StreamWriter, length: int) -> None:
    """Copy `length` bytes of a request body (IncompleteReadError when the client stops short)."""
    while length > 0:
        data = await src.readexactly(min(length, 65536))
        dst.write(data)
        await dst.drain()
        length -= len(data)


async def _splice_one_way(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()


async def _splice(a_reader: asyncio.StreamReader, a_writer: asyncio.StreamWriter,
                  b_reader: asyncio.StreamReader, b_writer: asyncio.StreamWriter) -> None:
    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                if dst.can_write_eof():
                    dst.write_eof()

    try:
        await asyncio.gather(pump(a_reader, b_writer), pump(b_reader, a_writer))
    finally:
        b_writer.close()
