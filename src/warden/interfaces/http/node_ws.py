"""The PTY WebSocket of another node's workspace, relayed to that node (nodes.py does plain HTTP).

A client opens `/v1/workspaces/{name}/pty` on any node. When the workspace is another node's,
this node opens a WebSocket to that node's server, signed as a node (core/nodes.py: the MAC
binds the method `WEBSOCKET` — no HTTP request is signed with it, so a signed HTTP request
never opens a shell, nor a signed upgrade runs anything else — the path, the query, an empty
body, both node names, the time and a nonce), with the client's own bearer token, so the owning
node applies its grants, policy and audit and starts the shell there. The client's upgrade is
accepted only once the other node has accepted (its shell runs): every refusal is an HTTP
response before upgrading, as on one node — the other node's own answer (400, 401, 403...)
relayed as it came, or `unavailable` (503) naming the node when it is down or cannot be reached.
Then frames go both ways as they are (binary: terminal bytes; text: resizes, the exit frame)
until one side closes: the other node's close code reaches the client, and a client that goes
away closes the other node's side, which kills its shell. A signed upgrade arriving here is
checked (signature, age, receiver, nonce never seen) and is never forwarded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from warden.core import nodes
from warden.core.errors import InvalidInput, Unavailable, WardenError
from warden.core.names import name_pattern
from warden.interfaces.http.calls import Unauthenticated
from warden.interfaces.http.limits import error_bytes
from warden.interfaces.http.peers import unreachable

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

    from warden.interfaces.http.limits import ASGIApp, Receive, Scope, Send
    from warden.interfaces.http.peers import Peers

__all__ = ["METHOD", "PTY_PATH", "serve_socket"]

PTY_PATH = re.compile(rf"^/v1/workspaces/({name_pattern()})/pty$")
# What the signature of a forwarded upgrade names as its method (see the docstring).
METHOD = "WEBSOCKET"
# The largest frame taken from the other node (as uvicorn's default bounds the client's).
MAX_FRAME = 16 * 1024 * 1024
_SIGNED = (b"x-warden-node-mac", b"x-warden-node")
# Not passed on: hop-by-hop and the handshake's own (the relay makes its own handshake), and
# the node headers a client may have sent (this node signs instead).
_DROP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade",
         b"host", b"content-length", b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
         b"sec-websocket-protocol", b"sec-websocket-accept", *(h.encode() for h in nodes.NODE_HEADERS)}
# A query passed on as it came must mean the same to the other node: printable ASCII, no fragment.
_QUERY = re.compile(r"[!$&'()*+,\-./0-9:;=?@A-Z_a-z~%]*\Z")
# Close codes a server may not send (RFC 6455 §7.4.1: they only say why a connection ended).
_UNSENDABLE = {1004, 1005, 1006, 1015}


class _Refusal(Exception):
    """The other node answered the upgrade with an HTTP response: relayed to the client as it came."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(status)
        self.status, self.body, self.content_type = status, body, content_type


async def serve_socket(peers: Peers, inner: ASGIApp, name: str, scope: Scope, receive: Receive, send: Send, *,
                       open_timeout: float) -> None:
    """One PTY WebSocket for workspace `name`: this node's (or a signed one from another node)
    goes to `inner`; another node's is relayed there."""
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    try:
        if any(k.lower() in _SIGNED for k, _ in scope.get("headers", ())):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
            await run_in_threadpool(peers.verify, method=METHOD, path=scope["path"], query=query, headers=headers,
                                    body=b"")
            node = await peers.node_of(name)
            if node is not None:
                raise Unavailable(f"workspace {name!r} is on node {node!r}, not on {peers.node!r} that was asked "
                                  "(a forwarded request goes no further)", rule="node.elsewhere")
            await inner(scope, receive, send)
            return
        node = await peers.node_of(name)
        if node is None:  # this node's, or no such workspace (answered here)
            await inner(scope, receive, send)
            return
        if (await receive())["type"] != "websocket.connect":
            return  # the client left before its handshake was read
        if not _QUERY.match(query):
            raise InvalidInput("the query of a PTY WebSocket takes cols, rows, term and timeout (plain ASCII)",
                               rule="node.path")
        if not _has_bearer(scope):  # no hop for a client that names no token at all
            raise Unauthenticated("authentication required: send `Authorization: Bearer <token>`",
                                  rule="token.missing")
        url = await peers.url_of(node)
        upstream = await _open(peers, node, url, scope, query, open_timeout)
    except WardenError as exc:
        from warden.interfaces.http.statuses import status_for

        await _deny(send, scope, status_for(exc), error_bytes(exc.code, exc.message), "application/json")
        return
    except _Refusal as refusal:
        await _deny(send, scope, refusal.status, refusal.body, refusal.content_type)
        return
    try:
        await send({"type": "websocket.accept", "headers": []})
        await _relay(upstream, receive, send)
    finally:
        await upstream.close()


def _has_bearer(scope: Scope) -> bool:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return scheme.lower() == "bearer" and bool(token.strip())
    return False


async def _open(peers: Peers, node: str, url: str, scope: Scope, query: str, open_timeout: float) -> ClientConnection:
    """The other node's PTY WebSocket, open (its shell started), or _Refusal / Unavailable."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidStatus

    target = ("wss://" + url[len("https://"):] if url.startswith("https://") else
              "ws://" + url.removeprefix("http://")).rstrip("/") + scope["path"] + (f"?{query}" if query else "")
    signed = await peers.sign(method=METHOD, path=scope["path"], query=query, body=b"", target=node)
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())
               if k.lower() not in _DROP]
    headers += list(signed.items())
    options: dict[str, Any] = {}
    if target.startswith("wss://"):
        options["ssl"] = peers.tls()
    try:
        return await connect(target, additional_headers=headers, user_agent_header=None, proxy=None,
                             compression=None, open_timeout=open_timeout, max_size=MAX_FRAME, **options)
    except InvalidStatus as exc:
        response = exc.response
        raise _Refusal(response.status_code, bytes(response.body or b""),
                       response.headers.get("content-type", "application/json")) from None
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        raise unreachable(node, url, exc) from None


async def _deny(send: Send, scope: Scope, status: int, body: bytes, content_type: str) -> None:
    """Answer the handshake with an HTTP response instead of upgrading (the ASGI extension
    uvicorn offers; without it, a close before accepting, which the server answers 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", content_type.encode("latin-1")), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body, "more_body": False})


async def _relay(upstream: ClientConnection, receive: Receive, send: Send) -> None:
    """Frames both ways until one side closes; then the other side is closed too."""
    down = asyncio.ensure_future(_downstream(upstream, send))
    up = asyncio.ensure_future(_upstream(upstream, receive))
    try:
        await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (down, up):
            task.cancel()
        for task in (down, up):
            with contextlib.suppress(BaseException):
                await task


async def _downstream(upstream: ClientConnection, send: Send) -> None:
    """The other node's frames to the client; its close (code and reason) after them."""
    from websockets.exceptions import ConnectionClosed

    with contextlib.suppress(ConnectionClosed):
        async for message in upstream:
            await send({"type": "websocket.send", "text": message} if isinstance(message, str) else
                       {"type": "websocket.send", "bytes": bytes(message)})
    code = upstream.close_code
    if code is None or code in _UNSENDABLE or not (1000 <= code < 5000):
        code, reason = 1011, "the node holding the workspace went away"
    else:
        reason = upstream.close_reason or ""
    with contextlib.suppress(Exception):  # the client may have left meanwhile
        await send({"type": "websocket.close", "code": code, "reason": reason[:120]})


async def _upstream(upstream: ClientConnection, receive: Receive) -> None:
    """The client's frames to the other node; a client that leaves closes the other side (whose
    shell is then killed there)."""
    from websockets.exceptions import ConnectionClosed

    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            with contextlib.suppress(Exception):
                await upstream.close()
            return
        try:
            if message.get("bytes") is not None:
                await upstream.send(message["bytes"])
            elif message.get("text") is not None:
                await upstream.send(message["text"])
        except ConnectionClosed:
            return  # the other side closed: _downstream says so to the client
