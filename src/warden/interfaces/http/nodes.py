"""Requests for another node's workspace, forwarded to that node's API (core/nodes.py).

A bot may send any request to any node. For `/v1/workspaces/{name}/…` this ASGI middleware
looks up the workspace's node: its own passes through; another's is sent on to that node's
live server (the URL its `serve` instance registered), signed with the cluster's node-to-node
key (HMAC over method, path, query, body digest, both node names, a timestamp and a nonce),
the bot's own bearer token passed through unchanged so the owning node applies its own grants,
policy and audit. The answer — streams included — is relayed as it comes. A node that is down
(no live heartbeat) or refuses the connection makes the request `unavailable` (503) naming it,
and nothing runs. A signed request arriving here is checked (signature, age, nonce never seen)
and is never forwarded again: a workspace that is not this node's then answers `unavailable`.
The PTY WebSocket is relayed by node_ws.py, MCP tool calls by interfaces/mcp/forward.py; what
the three share (keys, places, URLs, TLS, signing) is peers.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool

from warden.core import nodes
from warden.core.errors import InvalidInput, TooLarge, Unavailable, WardenError
from warden.core.names import name_pattern
from warden.core.run_stream import error_event, ndjson
from warden.interfaces.http.limits import ASGIApp, Receive, Scope, Send, disconnected, error_bytes, replay
from warden.interfaces.http.peers import PLACES_S, Peers, unreachable

if TYPE_CHECKING:
    from warden.adapters.node_link import NodeLink
    from warden.bootstrap import App

__all__ = ["PLACES_S", "NodeForwarding"]

log = logging.getLogger("warden.http")
_NDJSON = b"application/x-ndjson"

# A workspace's own requests; group 1 is its name.
WORKSPACE_PATH = re.compile(rf"^/v1/workspaces/({name_pattern()})(?:/.*)?$")
_SIGNED = (b"x-warden-node-mac", b"x-warden-node")  # a request another node signed (or claims to)
_DOT_SEGMENT = re.compile(r"(?:^|/)\.{1,2}(?:/|$)")
_PATH_SAFE = "/:@!$&'()*+,;=-._~"  # RFC 3986 pchar and '/': kept as they are, the rest percent-encoded
_PRINTABLE = re.compile(r"[\x21-\x7e]+")  # a request target: no space, control character or non-ASCII
# Hop-by-hop headers (RFC 9110 §7.6.1), those the forwarder sets itself, and `expect` (the body is
# sent at once; an interim 100 answer has nothing to tell the client).
_HOP = {b"expect", b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
        b"upgrade", b"host", b"content-length", *(h.encode() for h in nodes.NODE_HEADERS)}


class NodeForwarding:
    def __init__(self, inner: ASGIApp, *, app: App, max_body: int, timeout: float, peers: Peers | None = None,
                 open_timeout: float = 60.0) -> None:
        self.inner = inner
        self.app = app
        self.max_body = max_body
        self.timeout = timeout
        self.open_timeout = open_timeout
        self.peers = peers or Peers(app)
        self._client: NodeLink | None = None

    def keys(self) -> list[bytes]:
        """The node-to-node keys (peers.py), the current one first."""
        return self.peers.keys()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            from warden.interfaces.http.node_ws import PTY_PATH, serve_socket

            pty = PTY_PATH.match(scope["path"])
            if pty is None:
                await self.inner(scope, receive, send)
                return
            await serve_socket(self.peers, self.inner, pty.group(1), scope, receive, send,
                               open_timeout=self.open_timeout)
            return
        found = WORKSPACE_PATH.match(scope["path"]) if scope["type"] == "http" else None
        if found is None:
            await self.inner(scope, receive, send)
            return
        try:
            # The headers are read into a dict only for a request a node signed (or claims to).
            if any(k.lower() in _SIGNED for k, _ in scope.get("headers", ())):
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
                body = await self._body(receive)
                await run_in_threadpool(self._verify, scope, headers, body)
                await self._local(found.group(1), scope, replay(body, receive), send, forwarded=True)
                return
            node = await self.peers.node_of(found.group(1))
            if node is None:  # this node's, or no such workspace (answered here)
                await self.inner(scope, receive, send)
                return
            url = await self.peers.url_of(node)
            body = await self._body(receive)
            await self._forward(node, url, scope, body, send, receive)
        except WardenError as exc:
            await _answer(send, exc)

    async def _local(self, name: str, scope: Scope, receive: Receive, send: Send, *, forwarded: bool) -> None:
        node = await self.peers.node_of(name)
        if forwarded and node is not None:
            raise Unavailable(f"workspace {name!r} is on node {node!r}, not on {self.app.node!r} that was asked "
                              "(a forwarded request goes no further)", rule="node.elsewhere")
        await self.inner(scope, receive, send)

    async def _body(self, receive: Receive) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Unavailable("the client went away", rule="node.client_gone")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise TooLarge(f"request body over {self.max_body} bytes", rule="api.max_body")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _verify(self, scope: Scope, headers: dict[str, str], body: bytes) -> None:
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        self.peers.verify(method=scope["method"], path=scope["path"], query=query, headers=headers, body=body)

    def _link(self) -> NodeLink:
        if self._client is None:
            from warden.adapters.node_link import NodeLink

            self._client = NodeLink(ssl_context=self.peers.tls, connect_timeout=5.0, timeout=self.timeout)
        return self._client

    async def _forward(self, node: str, url: str, scope: Scope, body: bytes, send: Send, receive: Receive) -> None:
        """`body` sent on to `node`'s server at `url`, its answer passed back as it comes. Should the
        client go away first, the link's connection to that node is closed, so that node stops the
        command as it would for its own client (a plain exec's too: routes.py), and no more of the
        answer is read: else the command ran on to its timeout on the other node, holding a slot."""
        gone = asyncio.ensure_future(disconnected(receive))
        try:
            await self._forward_until(gone, node, url, scope, body, send)
        finally:
            gone.cancel()

    async def _forward_until(self, gone: asyncio.Future[bool], node: str, url: str, scope: Scope, body: bytes,
                             send: Send) -> None:
        from warden.adapters.node_link import LinkBroken

        path = scope["path"]
        if _DOT_SEGMENT.search(path) or "?" in path or "#" in path:
            # The path arrives percent-decoded: a `%2e%2e` segment or a `%3F` in it would make the
            # target sent name another path than the one this node matched (`…/wsa/%2e%2e/%2e%2e/mcp`
            # would reach the other node's /mcp wherever dot segments are resolved). No route of
            # the API has such a path: refused here.
            raise InvalidInput(f"request path {path[:200]!r} has '.' or '..' segments or a '?' or '#' "
                               "once decoded: no endpoint of the API has (see /openapi.json)", rule="node.path")
        # The query as the client sent it, which the other node reads as this one did; signed so.
        raw_query = bytes(scope.get("query_string", b""))
        query = raw_query.decode("latin-1")
        target = quote(path, safe=_PATH_SAFE) + (f"?{query}" if query else "")
        if not _PRINTABLE.fullmatch(target):
            raise InvalidInput("request target has characters a request line cannot carry", rule="node.path")
        signed = await self.peers.sign(method=scope["method"], path=path, query=query, body=body, target=node)
        headers: list[tuple[bytes, bytes]] = [(k, v) for k, v in scope.get("headers", ()) if k.lower() not in _HOP]
        headers += [(k.encode(), v.encode()) for k, v in signed.items()]
        asked = asyncio.ensure_future(self._link().request(url, scope["method"], target, headers, body))
        either: set[asyncio.Future[Any]] = {asked, gone}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not asked.done() and gone.result():
            asked.cancel()  # closes the link's connection (node_link: a cancelled exchange is not kept)
            with contextlib.suppress(BaseException):
                await asked
            log.info("the client of a request forwarded to node %s went away; the request was dropped", node)
            return
        try:
            answer = await asked  # (done, or the client sent something else than its going: waited for)
        except (LinkBroken, ssl.SSLError) as exc:
            raise unreachable(node, url, exc) from None
        events = False  # an NDJSON stream of events (a streamed exec, a followed process's logs)
        try:
            out = [(k.lower(), v) for k, v in answer.headers if k.lower() not in _HOP]
            length = answer.content_length()
            if length is not None:
                out.append((b"content-length", length))
            events = length is None and any(k == b"content-type" and v.split(b";")[0].strip() == _NDJSON
                                            for k, v in out)
            await send({"type": "http.response.start", "status": answer.status, "headers": out})
            held = b""  # an event stream's last line while its end has not come (sent whole or not at all)
            async for chunk in answer.body():
                if gone.done() and gone.result():
                    return  # the answer closed unread below: the other node sees its client go
                if events:
                    cut = (held + chunk).rfind(b"\n") + 1
                    chunk, held = (held + chunk)[:cut], (held + chunk)[cut:]
                    if not chunk:
                        continue
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": held, "more_body": False})
        except LinkBroken as exc:
            log.warning("forwarding to node %s broke off: %s", node, exc)
            if events:
                # A last line that says so, as a sandbox failing mid-run does: the client's stream
                # was cut short with no word, its SDK blaming the node it asked ("lost Warden at …").
                message = (f"node {node!r}, which holds the workspace, went away before its answer ended "
                           f"({exc}): how the command ended is not known here (that node's audit log "
                           "says, once it is back)")
                await send({"type": "http.response.body", "more_body": False,
                            "body": ndjson([error_event("unavailable", message)])})
        finally:
            answer.close()


async def _answer(send: Send, exc: WardenError) -> None:
    from warden.interfaces.http.statuses import status_for

    status = status_for(exc)
    body = error_bytes(exc.code, exc.message)
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

