"""The HTTP/1.1 protocol `warden serve` runs: uvicorn's httptools protocol with a bounded head.

Neither httptools nor uvicorn bounds a request's head: httptools joins the pieces of a header
value as they arrive (each join a copy) and uvicorn joins the URL's, so one unauthenticated
request with a 64 MiB header made the server hold 64 MiB or more and answered 200. Here the
parser is fed at most `MAX_HEAD` bytes while a head is being read, and the URL and each header
are checked as the parser reports them; a head over a limit is answered 414 (the request line)
or 431 (the headers) with the API's error envelope, and the connection closed, so what is
still being sent is never read. The header limits are those of common servers (nginx's
large_client_header_buffers allows 8 KiB a line; Node's 16 KiB cap on a whole head is tighter).

A head must also arrive in time (`head_timeout_s`, api.request_timeout): uvicorn times only the
keep-alive wait between requests, so a client that sent half a head, or nothing, and then waited
held its connection and a descriptor for ever: a few thousand such connections (no token needed)
take every descriptor the server may open, and then every bot's request fails. A head not
complete in time is answered 408 and the connection closed, as nginx's client_header_timeout
does; a body has its own deadline (limits.py).

Connections are capped too (`max_connections`, api.max_connections, per server process): each
holds a descriptor, and a local client opening thousands within the head timeout (no token
needed) would still take them all. At the cap a new connection closes the one that has waited
longest for a head (idle between requests, or a head still coming), else the one whose body has
been coming longest, unless a token let that body in (no token is needed to send a head and hold
a small body back for its deadline, so such a connection cannot be allowed to hold a place; a
bot's upload, screened before it is read, can); when every
one is busy (a request received and in flight, a streaming exec, a WebSocket), the new one is
answered 503 and closed at once. uvicorn's own `limit_concurrency` is not used: it answers 503
to requests, not connections, so idle connections still pile up, and once they reach it every
bot's request is refused too.

Answers a client does not read are bounded too. uvicorn parses every request in a socket read
and queues those behind the one in flight (HTTP/1.1 pipelining): a client sending small requests
and reading no answers (no token needed) made the server hold 1.5 GB within 20 s, its queue and
its answers growing for as long as it sent. Here, while a request is in flight, the parser is
given small pieces and stops at the first request it queues; what follows is kept unparsed (one
socket read at most: reading is paused) until the queue is empty. While the connection's write
buffer is over the transport's high-water mark no more is read at all; if it has not drained for
`head_timeout_s` (api.request_timeout) the connection is aborted, its unsent answer dropped, as
nginx's send_timeout does, so a client that reads nothing holds neither memory nor a connection
(and never the place of a bot's under api.max_connections) for longer than that.

Why not uvicorn's h11 protocol with `h11_max_incomplete_event_size`: it answers 400, not 431,
and parses in Python, which costs the small requests (a file read, an exec) most of their time.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from warden.interfaces.http.limits import ADMITTED, error_bytes

__all__ = ["BODY_PIECE", "HEAD_PIECE", "HEAD_TIMEOUT_S", "MAX_CONNECTIONS", "MAX_HEAD", "MAX_HEADER", "MAX_HEADERS",
           "MAX_HEADERS_SIZE", "MAX_REQUEST_LINE",
           "BoundedHttpToolsProtocol", "DeniedHandshakeProtocol", "HideTokens"]

# The request target (path and query); longer → 414. A file path may be PATH_MAX (4096) bytes,
# 12 KiB once percent-encoded, so the usual 8 KiB would refuse some valid file requests.
MAX_REQUEST_LINE = 16 * 1024
MAX_HEADER = 8 * 1024  # one header, name and value; larger → 431
MAX_HEADERS_SIZE = 64 * 1024  # all headers of a request together → 431
MAX_HEADERS = 100  # headers in one request → 431
# What the parser may be given of one head: the request line, the headers, and their
# separators (": ", CRLF) with room to spare; past it the head is refused, unparsed.
MAX_HEAD = MAX_REQUEST_LINE + MAX_HEADERS_SIZE + 4 * MAX_HEADERS + 1024
HEAD_TIMEOUT_S = 60.0  # a head's time from its first byte (or the connection) to its end; api.request_timeout
MAX_CONNECTIONS = 256  # connections one server process keeps open at once; api.max_connections


# What the parser is given at once: a head's bytes, and a body's. It stops after a piece that
# queued a request behind the one in flight, so at most one piece's worth of requests waits in
# the queue (1 KiB holds some 50 of the smallest heads; 16 KiB after a chunked body, 900). A body
# of a known length is given whole.
HEAD_PIECE = 1024
BODY_PIECE = 16 * 1024


class _Flow(FlowControl):
    """uvicorn's flow control, reading nothing while the connection's answers are not drained or
    requests are held back (`held`): uvicorn resumes reading at each answer's end and at each
    `receive`, whatever is unsent or queued, one socket read more each time."""

    def __init__(self, transport: asyncio.Transport, held: Callable[[], bool]) -> None:
        super().__init__(transport)
        self._held = held

    def resume_reading(self) -> None:
        if not self.write_paused and not self._held():
            super().resume_reading()


class _HeadTooLarge(Exception):
    """Raised in a parser callback to stop the parser; it becomes the `__context__` of the
    HttpParserCallbackError that httptools raises from feed_data. (A head too late is refused
    with one too, never raised: 408.)"""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_TOO_LARGE = (f"the request's headers are over the limit ({MAX_HEADERS} headers, {MAX_HEADER} bytes each, "
              f"{MAX_HEADERS_SIZE} bytes in all); send fewer or smaller headers")


class _DrainDeadline:
    """A connection whose write buffer has not drained for `seconds` is aborted, its unsent bytes
    dropped (nginx's send_timeout): a client that reads nothing holds neither memory nor a
    connection for longer. `still_held()` says, as the deadline comes, whether it is still over
    its high-water mark; `said` is the warning logged then (with the seconds). `even_closing`: a
    transport already closing is aborted too (a WebSocket keepalive's close() waits, for ever,
    for the buffer to be sent)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float, still_held: Callable[[], bool],
                 transport: Callable[[], asyncio.Transport], logger: logging.Logger, said: str, *,
                 even_closing: bool = False) -> None:
        self._loop, self.seconds, self._still_held = loop, seconds, still_held
        self._transport, self._logger, self._said = transport, logger, said
        self._even_closing = even_closing
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = self._loop.call_later(self.seconds, self._due)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        transport = self._transport()
        if (transport.is_closing() and not self._even_closing) or not self._still_held():
            return
        self._logger.warning(self._said, self.seconds)
        transport.abort()  # close() would wait, for ever, for the buffer to be sent


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request line or headers over the limits above.

    While the parser reads a head (or a chunked body's trailers, which httptools gathers the
    same way) it is given at most MAX_HEAD bytes, HEAD_PIECE at a time; a body BODY_PIECE at a
    time (LimitsMiddleware bounds bodies). A head that starts inside a body's piece (a pipelined
    request behind a body) may get that piece's rest more before it is counted.
    """

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, head_timeout_s: float = HEAD_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._max_connections = max_connections
        self._waiting_since = 0.0  # when it last began to wait for a request's head
        self._bounded = True  # reading a head or trailers: fed at most MAX_HEAD bytes
        self._bounded_bytes = 0  # fed since the head (or trailers) began
        self._headers_count = 0
        self._headers_size = 0
        self._in_head = True  # the next bytes are a request's head (not a body, not trailers)
        self._head_timeout_s = head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._drain = _DrainDeadline(self.loop, head_timeout_s, lambda: self.flow.write_paused,
                                     lambda: self.transport, self.logger,
                                     "closed a connection whose client read none of its answers for %g s "
                                     "(api.request_timeout)")
        self._unparsed = b""  # received behind a queued request, parsed once the queue is empty
        self._running: RequestResponseCycle | None = None  # the request in flight
        self._body_left = 0  # bytes of the body being read still to come (its Content-Length)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # counted in server_state.connections from here
        self.flow = _Flow(transport, lambda: bool(self.pipeline or self._unparsed))
        self._waiting_since = self.loop.time()
        if len(self.connections) > self._max_connections and not self._make_room():
            self._refuse(_HeadTooLarge(503, f"the server has {self._max_connections} connections open, each "
                                            "busy with a request; retry soon, or raise api.max_connections"))
            return
        self._arm_head_timer()  # a connection that never sends a byte is timed too

    def _waiting(self) -> bool:
        """Whether it only waits for a request's head (idle keep-alive, or a head still coming)."""
        return (self._in_head and (self.cycle is None or self.cycle.response_complete)
                and not self.transport.is_closing())

    def _receiving(self) -> bool:
        """Whether its request's head came but not yet all of its body, and no token let that body
        in (limits.py: an upload is screened, a body past 64 KiB meets the door, before they are
        read): a bot's slow upload is busy, never stalled, whatever a flood of stalled ones does."""
        return (not self._in_head and self.cycle is not None and self.cycle.more_body
                and not self.cycle.response_started and not self.cycle.scope.get(ADMITTED)
                and not self.transport.is_closing())

    def _make_room(self) -> bool:
        """At the cap: close the connection that has waited longest for a head, else the one
        whose body has been coming longest, so a client holding idle connections, sending heads
        a byte at a time or holding bodies back (none needs a token) never shuts bots out for a
        timeout's length. A request received, a streaming exec or a WebSocket (another protocol
        once upgraded) is never closed; with none of the others, False: the new one is refused."""
        mine = [c for c in self.connections if c is not self and isinstance(c, BoundedHttpToolsProtocol)]
        for kind, which in ((BoundedHttpToolsProtocol._waiting, "idle longest"),
                            (BoundedHttpToolsProtocol._receiving, "whose body has been coming longest")):
            found = [c for c in mine if kind(c)]
            if found:
                oldest = min(found, key=lambda c: c._waiting_since)
                self.logger.warning("api.max_connections (%d) reached: closed the connection %s",
                                    self._max_connections, which)
                oldest.transport.close()
                return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._drain.disarm()
        self._unparsed = b""
        self.pipeline.clear()  # queued requests never start
        # uvicorn tells only the last request parsed that the client left; with requests queued
        # behind it, the one in flight went on to write to a closed transport (a RuntimeError).
        running = self._running
        if running is not None and not running.response_complete:
            running.disconnected = True
            running.message_event.set()
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    # Called by the transport when its write buffer passes its high-water mark, and when it is
    # back under the low-water mark.
    def pause_writing(self) -> None:
        super().pause_writing()
        self.flow.pause_reading()  # no more requests while their answers would only pile up
        self._drain.arm()

    def resume_writing(self) -> None:
        self._drain.disarm()
        super().resume_writing()
        self.flow.resume_reading()  # (paused again at once if a request is queued or a body waits)

    def on_response_complete(self) -> None:
        answered = self._running
        if answered is not None and answered.more_body and not self.transport.is_closing():
            # Answered before its body came whole (a 413 for the length it declared, a refusal):
            # what is still to come is never read, and nothing would time it (uvicorn's keep-alive
            # wait ends at the first byte that comes), so a client sending a byte of it now and
            # then held a busy connection for ever; `api.max_connections` of them (no token
            # needed) had every bot's new connection refused 503.
            self.transport.close()
        super().on_response_complete()  # the next queued request, if any, starts
        if self._unparsed and not self.pipeline:
            self.loop.call_soon(self._parse_unparsed)  # not inside the answer's `send`

    def _parse_unparsed(self) -> None:
        if self._unparsed and not self.pipeline and self.parser is not None and not self.transport.is_closing():
            self.data_received(b"")
            self.flow.resume_reading()  # (not while it queued a request again)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind a response still being sent (a long exec): that response
            # is not cut; the head is timed again after it.
            self._arm_head_timer()
            return
        self._refuse(_HeadTooLarge(408, f"the request's head did not arrive within {self._head_timeout_s:g} s; "
                                        "send it at once, or raise api.request_timeout"))

    def data_received(self, data: bytes) -> None:
        # uvicorn's own, but a head goes to the parser in pieces, within MAX_HEAD in all.
        # And no more than a piece once a request is queued behind the one in flight.
        self._unset_keepalive_if_required()
        if self._unparsed:
            data, self._unparsed = self._unparsed + data, b""
        if self._in_head and self._head_timer is None and data:
            self._arm_head_timer()  # the next request's head starts: its time from now
        while data:
            if self.pipeline:  # requests wait for the one in flight: the rest is parsed after them
                self._unparsed = data
                self.flow.pause_reading()
                return
            if self._bounded:
                room = MAX_HEAD - self._bounded_bytes
                if room <= 0:
                    self._refuse(_HeadTooLarge(431, _TOO_LARGE))
                    return
                piece, data = data[:min(room, HEAD_PIECE)], data[min(room, HEAD_PIECE):]
                self._bounded_bytes += len(piece)
            else:
                # A body of a known length is given whole (an upload pays no more parser calls);
                # past its end, or a chunked one, BODY_PIECE at a time.
                size = self._body_left if self._body_left > 0 else BODY_PIECE
                piece, data = data[:size], data[size:]
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, _HeadTooLarge):
                    self._refuse(exc.__context__)
                    return
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
                return
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            if self.transport.is_closing():
                return

    def _refuse(self, refusal: _HeadTooLarge) -> None:
        """Answer 414, 431 (`invalid`) or 408 (`timeout`, as a late body is) with the API's error
        envelope and close the connection."""
        code = {408: "timeout", 503: "unavailable"}.get(refusal.status, "invalid")
        body = error_bytes(code, refusal.message)
        head = [STATUS_LINE[refusal.status]]
        head.extend(name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers)
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                    % len(body))
        self.logger.warning("refused a request whose head is over the limits or too late, or a connection "
                            "past api.max_connections (%d)", refusal.status)
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _bound(self) -> None:
        self._bounded = True
        self._bounded_bytes = 0

    # Parser callbacks (httptools calls them during feed_data; raising stops the parser).
    def on_message_begin(self) -> None:
        self._headers_count = 0
        self._headers_size = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > MAX_REQUEST_LINE:
            raise _HeadTooLarge(414, f"the request's URL is over the limit of {MAX_REQUEST_LINE} bytes; "
                                    "send a shorter one")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # Trailers come here too, and count with the headers.
        size = len(name) + len(value)
        self._headers_count += 1
        self._headers_size += size
        if size > MAX_HEADER or self._headers_count > MAX_HEADERS or self._headers_size > MAX_HEADERS_SIZE:
            raise _HeadTooLarge(431, _TOO_LARGE)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._bounded = False
        self._in_head = False
        lengths = [v for k, v in self.headers if k == b"content-length"]
        chunked = any(k == b"transfer-encoding" for k, _ in self.headers)
        known = len(lengths) == 1 and lengths[0].isdigit() and len(lengths[0]) < 19 and not chunked
        self._body_left = int(lengths[0]) if known else 0
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_chunk_header(self) -> None:
        self._bound()  # the last chunk's header is followed by trailers

    def on_body(self, body: bytes) -> None:
        self._bounded = False
        self._body_left = max(self._body_left - len(body), 0)
        super().on_body(body)

    def on_chunk_complete(self) -> None:
        self._bounded = False

    def on_message_complete(self) -> None:
        self._body_left = 0
        self._bound()  # the next request on this connection starts its own head
        self._in_head = True  # timed from its first byte (until then, uvicorn's keep-alive wait)
        self._waiting_since = self.loop.time()
        super().on_message_complete()


class DeniedHandshakeProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, quiet about a handshake answered with an HTTP denial, and
    bounded for a client that reads nothing (below `pause_writing`).

    A refused PTY handshake (no token, another bot's workspace, no exec slot) is answered with
    the API's error response through the ASGI denial-response extension. uvicorn's sans-I/O
    protocol sends it but never counts the handshake as over, so when the route returns it logs
    "ASGI callable returned without completing handshake." at ERROR level for every refusal: an
    operator would read a server fault into a client's mistake. Once the denial's body is sent
    the handshake is over (the connection is closed), and it is marked so; an app that really
    returns without answering is still logged.
    """

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, drain_timeout_s: float = HEAD_TIMEOUT_S) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._write_held = False  # the transport's buffer is over its high-water mark
        # (a keepalive's close() may have come first: it too waits for the buffer)
        self._drain = _DrainDeadline(self.loop, drain_timeout_s, lambda: self._write_held, lambda: self.transport,
                                     self.logger, "closed a WebSocket whose client read nothing of it for %g s "
                                     "(api.request_timeout)", even_closing=True)

    async def send(self, message: Any) -> None:
        await super().send(message)
        if (message.get("type") == "websocket.http.response.body" and not message.get("more_body", False)
                and self.close_sent):
            self.handshake_complete = True

    # A client that never reads: uvicorn answers each ping with a pong written straight to the
    # transport, whose buffer has no bound, and reads on (it pauses reading only for data frames
    # the app has not taken). A bot flooding its PTY WebSocket with pings and reading nothing made
    # the server hold ~12 MB more each second, ~400 MB when the keepalive gave up at 40 s, and
    # that keepalive's close() kept it for as long as the bot kept its socket open. So, as the
    # HTTP protocol does: nothing is read while the buffer is over its high-water mark (the
    # pings wait in the kernel's buffers), and a buffer that has not drained for `drain_timeout_s`
    # (api.request_timeout) has its connection aborted, its unsent bytes dropped.

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_held = True
        self.transport.pause_reading()
        self._drain.arm()

    def resume_writing(self) -> None:
        self._drain.disarm()
        self._write_held = False
        super().resume_writing()
        if not self.read_paused:  # (uvicorn's own pause: a data frame the app has not taken yet)
            self.transport.resume_reading()

    async def receive(self) -> Any:
        message = await super().receive()
        if self._write_held:  # uvicorn resumed reading as the app took a frame: not while unsent bytes pile up
            self.transport.pause_reading()
        return message

    def connection_lost(self, exc: Exception | None) -> None:
        self._drain.disarm()
        super().connection_lost(exc)


class HideTokens(logging.Filter):
    """A logging filter that writes every Warden token in a record (its message and arguments)
    as `wdn_…`: uvicorn logs a request's path with its query string, where a client may have put
    its token (`?token=wdn_…`, refused, but logged as sent)."""

    _TOKEN = re.compile(r"wdn_[A-Za-z0-9_-]{8,}")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "wdn_" in record.msg:
            record.msg = self._TOKEN.sub("wdn_…", record.msg)
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "wdn_" in a for a in record.args):
            record.args = tuple(self._TOKEN.sub("wdn_…", a) if isinstance(a, str) else a for a in record.args)
        return True
