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
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import time
from typing import TYPE_CHECKING
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool

from warden.core import nodes
from warden.core.errors import Denied, InvalidInput, TooLarge, Unavailable, WardenError
from warden.core.names import name_pattern
from warden.interfaces.http.limits import ASGIApp, Message, Receive, Scope, Send, error_bytes

if TYPE_CHECKING:
    from warden.adapters.node_link import NodeLink
    from warden.bootstrap import App

__all__ = ["NodeForwarding"]

log = logging.getLogger("warden.http")

# A workspace's own requests; group 1 is its name.
WORKSPACE_PATH = re.compile(rf"^/v1/workspaces/({name_pattern()})(?:/.*)?$")
_SIGNED = (b"x-warden-node-mac", b"x-warden-node")  # a request another node signed (or claims to)
_DOT_SEGMENT = re.compile(r"(?:^|/)\.{1,2}(?:/|$)")
_PATH_SAFE = "/:@!$&'()*+,;=-._~"  # RFC 3986 pchar and '/': kept as they are, the rest percent-encoded
_PRINTABLE = re.compile(r"[\x21-\x7e]+")  # a request target: no space, control character or non-ASCII
# How long an answer of the registry about where workspaces are and which node's server answers
# where is used again: a request for one of this node's own workspaces (on one machine, every
# request) then costs no registry read. A stale answer is safe: this node's services refuse a
# workspace that is not theirs (`unavailable`), and a forwarded request goes no further.
PLACES_S = 1.0
# Hop-by-hop headers (RFC 9110 §7.6.1), those the forwarder sets itself, and `expect` (the body is
# sent at once; an interim 100 answer has nothing to tell the client).
_HOP = {b"expect", b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
        b"upgrade", b"host", b"content-length", *(h.encode() for h in nodes.NODE_HEADERS)}


class NodeForwarding:
    def __init__(self, inner: ASGIApp, *, app: App, max_body: int, timeout: float) -> None:
        self.inner = inner
        self.app = app
        self.max_body = max_body
        self.timeout = timeout
        self._client: NodeLink | None = None
        self._keys: tuple[float, list[bytes]] = (0.0, [])  # (good until, node keys: the current first)
        self._places: tuple[float, dict[str, str]] = (0.0, {})  # (good until, workspace -> its node)
        self._urls: dict[str, tuple[float, str]] = {}  # node -> (good until, its server's URL)

    def keys(self) -> list[bytes]:
        """The node-to-node keys, from the cluster's peppers (the current one first), read again
        after PLACES_S: a pepper rotated on another node reaches this one without a restart, and
        requests signed with the pepper a rotation keeps are still taken meanwhile."""
        until, keys = self._keys
        if until <= time.monotonic():
            keys = [nodes.node_key(pepper) for pepper in self.app.keystore.peppers()]
            self._keys = (time.monotonic() + PLACES_S, keys)
        return keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
                await self._local(found.group(1), scope, _replay(body, receive), send, forwarded=True)
                return
            node = await self._node_of(found.group(1))
            if node is None:  # this node's, or no such workspace (answered here)
                await self.inner(scope, receive, send)
                return
            url = await self._url_of(node)
            body = await self._body(receive)
            await self._forward(node, url, scope, body, send)
        except WardenError as exc:
            await _answer(send, exc)

    async def _node_of(self, name: str) -> str | None:
        """The node of workspace `name` when it is another node's, else None (see PLACES_S)."""
        until, places = self._places
        if until <= time.monotonic():
            places = await run_in_threadpool(self._elsewhere)
            self._places = (time.monotonic() + PLACES_S, places)
        return places.get(name)

    def _elsewhere(self) -> dict[str, str]:
        with self.app.registry.transaction(write=False) as tx:
            return tx.workspaces.elsewhere(self.app.node)

    async def _url_of(self, node: str) -> str:
        known = self._urls.get(node)
        if known is not None and known[0] > time.monotonic():
            return known[1]
        url = await run_in_threadpool(self.app.instances.api_of, node)  # Unavailable when it is down
        if len(self._urls) > 1024:
            self._urls.clear()
        self._urls[node] = (time.monotonic() + PLACES_S, url)
        return url

    async def _local(self, name: str, scope: Scope, receive: Receive, send: Send, *, forwarded: bool) -> None:
        node = await self._node_of(name)
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
        try:
            signed = nodes.verify(self.keys(), headers, method=scope["method"], path=scope["path"], query=query,
                                  body=body, node=self.app.node, now=self.app.clock())
            with self.app.registry.transaction() as tx:
                fresh = tx.instances.remember_nonce(signed.nonce, self.app.clock().isoformat())
            if not fresh:
                raise Denied("node-to-node request replayed (its nonce was seen before): refused", rule="node.replay")
        except Denied as exc:
            self.app.audit.record(actor=f"node:{headers.get('x-warden-node', '?')[:63]}", action="node.request",
                                  target=scope["path"][:200], decision="deny", rule=exc.rule or "node.mac",
                                  result="refused", detail={"method": scope["method"]})
            raise

    def _link(self) -> NodeLink:
        if self._client is None:
            from warden.adapters.node_link import NodeLink

            self._client = NodeLink(ssl_context=self._tls, connect_timeout=5.0, timeout=self.timeout)
        return self._client

    def _tls(self) -> ssl.SSLContext:
        ca = self.app.settings.get_str("node.ca_file")
        try:
            return ssl.create_default_context(cafile=os.path.expanduser(ca) if ca else None)
        except (OSError, ssl.SSLError) as exc:  # tried again next request: the file may be fixed
            raise Unavailable(f"node.ca_file {ca!r} cannot be used ({exc}); give the PEM file of the "
                              "CA that signed the other nodes' certificates", rule="node.tls") from None

    async def _forward(self, node: str, url: str, scope: Scope, body: bytes, send: Send) -> None:
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
        until, keys = self._keys  # the registry is read again (in a thread) once a second
        if until <= time.monotonic():
            keys = await run_in_threadpool(self.keys)
        signed = nodes.sign(keys[0], method=scope["method"], path=path, query=query, body=body,
                            origin=self.app.node, target=node, timestamp=int(self.app.clock().timestamp()),
                            nonce=os.urandom(16).hex())
        headers: list[tuple[bytes, bytes]] = [(k, v) for k, v in scope.get("headers", ()) if k.lower() not in _HOP]
        headers += [(k.encode(), v.encode()) for k, v in signed.headers().items()]
        try:
            answer = await self._link().request(url, scope["method"], target, headers, body)
        except (LinkBroken, ssl.SSLError) as exc:
            if _untrusted(exc):
                raise Unavailable(f"node {node!r} is unavailable: its certificate at {url} was not trusted "
                                  "(set node.ca_file to the CA that signed it, on this node)",
                                  rule="node.tls") from None
            raise Unavailable(f"node {node!r} is unavailable ({exc} at {url}); "
                              "try again when it is back", rule="node.down") from None
        try:
            out = [(k.lower(), v) for k, v in answer.headers if k.lower() not in _HOP]
            length = answer.content_length()
            if length is not None:
                out.append((b"content-length", length))
            await send({"type": "http.response.start", "status": answer.status, "headers": out})
            async for chunk in answer.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except LinkBroken as exc:
            log.warning("forwarding to node %s broke off: %s", node, exc)
        finally:
            answer.close()


def _untrusted(exc: BaseException) -> bool:
    """Whether a failed connection failed on the other node's certificate (an unknown CA, a name
    it was not issued for, expired): the ssl module's error, itself or as the cause of another."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _replay(body: bytes, original: Receive) -> Receive:
    """A `receive` that gives `body` (already read) once, then the client's own messages (its
    disconnect, which a streaming answer waits for)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await original()

    return receive


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

