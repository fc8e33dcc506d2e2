"""Kept-alive HTTP/1.1 connections to other nodes' servers, for requests forwarded to them.

A forwarded request costs two trips through an HTTP stack, and the budget for the hop is a few
milliseconds (issue #16). httpx spent about half a millisecond of its own on each request here
(its client, pool and h11 parser in Python); this link writes the request head itself (every
part of it comes from a request the local server has already parsed and the forwarder has
checked) and parses the answer with httptools, the C parser the server side already uses, so
a forwarded request costs little more than the other node's own work.

Connections are kept per (scheme, host, port) and reused while the other node keeps them open.
A kept connection the other end closed meanwhile fails on first use; the request is then sent
once more on a new connection, but only when nothing of an answer arrived: a node-signed
request carries a nonce, so should the first copy have been acted on after all, the other node
refuses the second as a replay rather than running it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

__all__ = ["Answer", "LinkBroken", "NodeLink"]

_READ = 65536
_MAX_HEAD = 64 * 1024  # an answer's status line and headers; the server side bounds its own alike


class LinkBroken(Exception):
    """The other node could not be reached, or its answer broke off or was malformed.

    `sent`: the request had gone out (its answer broke off, or never came), so the other node
    may have carried it out; False when no connection was made, and nothing reached it."""

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass
class Answer:
    """The other node's answer: its status and headers at once, its body as it comes."""

    status: int
    headers: list[tuple[bytes, bytes]]
    _conn: _Connection
    _release: Callable[[_Connection], None]
    _done: bool = False
    _settled: bool = False

    def content_length(self) -> bytes | None:
        for name, value in self.headers:
            if name.lower() == b"content-length":
                return value
        return None

    async def body(self) -> AsyncIterator[bytes]:
        """The body, de-chunked, piece by piece until its end; LinkBroken when it breaks off."""
        conn = self._conn
        while True:
            while conn.chunks:
                yield conn.chunks.pop(0)
            if conn.complete:
                self._done = True
                return
            await conn.feed()

    def close(self) -> None:
        """Keep the connection for the next request when the answer was read to its end and the
        other node keeps it open; else close it."""
        if self._settled:
            return
        self._settled = True
        if self._done and self._conn.keep_alive and not self._conn.chunks:
            self._release(self._conn)
        else:
            self._conn.close()


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    timeout: float
    chunks: list[bytes] = field(default_factory=list)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    head_done: bool = False
    complete: bool = False
    keep_alive: bool = False
    got_any: bool = False
    head_size: int = 0
    head_only: bool = False
    dropped: bool = False  # the other end closed or reset the connection
    parser: httptools.HttpResponseParser | None = None

    def start(self, method: str) -> None:
        self.head_only = method == "HEAD"
        self.chunks, self.headers = [], []
        self.head_done = self.complete = self.got_any = self.dropped = False
        self.head_size = 0
        self.parser = httptools.HttpResponseParser(self)

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value)
        if self.head_size > _MAX_HEAD:
            raise LinkBroken("the other node's answer has headers over 64 KiB")
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True
        if self.head_only:  # the answer to HEAD has headers alone, whatever its length says
            self.complete, self.keep_alive = True, False

    def on_body(self, body: bytes) -> None:
        self.chunks.append(bytes(body))

    def on_message_complete(self) -> None:
        self.complete = True
        assert self.parser is not None
        self.keep_alive = self.parser.should_keep_alive()

    async def feed(self) -> None:
        """Read what the other node sent next and parse it."""
        assert self.parser is not None
        try:
            data = await asyncio.wait_for(self.reader.read(_READ), self.timeout)
        except (OSError, TimeoutError) as exc:
            self.dropped = isinstance(exc, ConnectionError)
            raise LinkBroken(f"reading the other node's answer: {type(exc).__name__}") from exc
        if not data:
            self.dropped = True
            raise LinkBroken("the other node closed the connection before its answer ended")
        self.got_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise LinkBroken("the other node answered with a protocol upgrade") from None
        except httptools.HttpParserError as exc:
            raise LinkBroken(f"the other node's answer is not HTTP/1.1 ({exc})") from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class NodeLink:
    """Requests to other nodes' servers over kept-alive connections (see the module's docstring)."""

    def __init__(self, *, ssl_context: Callable[[], ssl.SSLContext], connect_timeout: float, timeout: float,
                 keep: int = 32) -> None:
        self._ssl_context = ssl_context  # called once, at the first https:// request
        self._context: ssl.SSLContext | None = None
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.keep = keep
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def request(self, base: str, method: str, target: str, headers: list[tuple[bytes, bytes]],
                      body: bytes) -> Answer:
        """Send `method target` with `headers` and `body` to the server at `base`
        (`http://host:port` or `https://…`); its answer once its head has arrived.
        `target` and `headers` must be what a server already accepted (no CR, LF or NUL)."""
        parts = urlsplit(base)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        where = (scheme, host, port)
        authority = parts.netloc.rpartition("@")[2].encode("ascii")
        head = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), b"host: ", authority, b"\r\n"]
        for name, value in headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        message = b"".join(head) + body
        reused = self._take(where)
        if reused is not None:
            try:
                return await self._exchange(reused, where, method, message)
            except LinkBroken:
                if reused.got_any or not reused.dropped:
                    raise  # an answer began, or it is slow rather than gone: not sent again
                # Closed by the other end while it sat idle: once more on a new connection.
        conn = await self._connect(scheme, host, port)
        return await self._exchange(conn, where, method, message)

    def _take(self, where: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(where)
        while idle:
            conn = idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()
        return None

    def _release(self, where: tuple[str, str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(where, [])
        if len(idle) < self.keep:
            idle.append(conn)
        else:
            conn.close()

    async def _connect(self, scheme: str, host: str, port: int) -> _Connection:
        context = None
        if scheme == "https":
            if self._context is None:
                self._context = self._ssl_context()
            context = self._context
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None,
                                        limit=_MAX_HEAD), self.connect_timeout)
        except ssl.SSLCertVerificationError:
            raise  # the forwarder says which setting trusts the other node
        except (OSError, TimeoutError) as exc:
            raise LinkBroken(f"{type(exc).__name__} connecting to {host}:{port}", sent=False) from exc
        return _Connection(reader, writer, self.timeout)

    async def _exchange(self, conn: _Connection, where: tuple[str, str, int], method: str,
                        message: bytes) -> Answer:
        conn.start(method)
        try:
            conn.writer.write(message)
            await asyncio.wait_for(conn.writer.drain(), self.timeout)
            while not conn.head_done:
                await conn.feed()
        except (OSError, TimeoutError) as exc:
            conn.dropped = isinstance(exc, ConnectionError)
            conn.close()
            raise LinkBroken(f"sending to the other node: {type(exc).__name__}") from exc
        except BaseException:
            conn.close()
            raise
        assert conn.parser is not None
        return Answer(conn.parser.get_status_code(), conn.headers, conn,
                      lambda done: self._release(where, done))

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
