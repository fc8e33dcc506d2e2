"""What a node needs to speak to the other nodes and to trust what they send (core/nodes.py).

Shared by the three ways a request reaches the node that holds its workspace: plain HTTP
(nodes.py), the PTY WebSocket (node_ws.py) and MCP tool calls (interfaces/mcp/forward.py). One
object per server, so they read the registry as rarely as one would: the cluster's node keys,
where workspaces are and which node's server answers where are used again for PLACES_S.
"""

from __future__ import annotations

import os
import ssl
import time
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool

from warden.adapters.node_link import LinkBroken
from warden.core import nodes
from warden.core.errors import Denied, Unavailable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from warden.bootstrap import App

__all__ = ["PLACES_S", "Peers", "unreachable", "untrusted"]

# How long an answer of the registry about where workspaces are and which node's server answers
# where is used again: a request for one of this node's own workspaces (on one machine, every
# request) then costs no registry read. A stale answer is safe: this node's services refuse a
# workspace that is not theirs (`unavailable`), and a forwarded request goes no further.
PLACES_S = 1.0


class Peers:
    """The other nodes as this node sees them, and the node-to-node signature both ways."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._keys: tuple[float, list[bytes]] = (0.0, [])  # (good until, node keys: the current first)
        self._places: tuple[float, dict[str, str]] = (0.0, {})  # (good until, workspace -> its node)
        self._urls: dict[str, tuple[float, str]] = {}  # node -> (good until, its server's URL)
        self._tls: ssl.SSLContext | None = None  # made once: each shell's upgrade read the CA file again

    @property
    def node(self) -> str:
        return self.app.node

    def keys(self) -> list[bytes]:
        """The node-to-node keys, from the cluster's peppers (the current one first), read again
        after PLACES_S: a pepper rotated on another node reaches this one without a restart, and
        requests signed with the pepper a rotation keeps are still taken meanwhile."""
        until, keys = self._keys
        if until <= time.monotonic():
            keys = [nodes.node_key(pepper) for pepper in self.app.keystore.peppers()]
            self._keys = (time.monotonic() + PLACES_S, keys)
        return keys

    async def node_of(self, name: str) -> str | None:
        """The node of workspace `name` when it is another node's, else None (see PLACES_S)."""
        until, places = self._places
        if until <= time.monotonic():
            places = await run_in_threadpool(self._elsewhere)
            self._places = (time.monotonic() + PLACES_S, places)
        return places.get(name)

    def _elsewhere(self) -> dict[str, str]:
        with self.app.registry.transaction(write=False) as tx:
            return tx.workspaces.elsewhere(self.app.node)

    async def url_of(self, node: str) -> str:
        """The API URL of `node`'s live server, or Unavailable naming the node."""
        known = self._urls.get(node)
        if known is not None and known[0] > time.monotonic():
            return known[1]
        url = await run_in_threadpool(self.app.instances.api_of, node)  # Unavailable when it is down
        if len(self._urls) > 1024:
            self._urls.clear()
        self._urls[node] = (time.monotonic() + PLACES_S, url)
        return url

    def tls(self) -> ssl.SSLContext:
        """How the other nodes' `https://` servers are verified: node.ca_file's CAs, or the system's
        (one context for every client of this server: HTTP, PTY and MCP forwarding)."""
        if self._tls is not None:
            return self._tls
        ca = self.app.settings.get_str("node.ca_file")
        try:
            self._tls = ssl.create_default_context(cafile=os.path.expanduser(ca) if ca else None)
            return self._tls
        except (OSError, ssl.SSLError) as exc:  # tried again next request: the file may be fixed
            raise Unavailable(f"node.ca_file {ca!r} cannot be used ({exc}); give the PEM file of the "
                              "CA that signed the other nodes' certificates", rule="node.tls") from None

    async def sign(self, *, method: str, path: str, query: str, body: bytes, target: str) -> dict[str, str]:
        """The node-to-node headers of a request this node sends to `target`."""
        until, keys = self._keys  # read again (in a thread: the registry) once a second
        if until <= time.monotonic():
            keys = await run_in_threadpool(self.keys)
        key = keys[0]
        signed = nodes.sign(key, method=method, path=path, query=query, body=body, origin=self.app.node,
                            target=target, timestamp=int(self.app.clock().timestamp()), nonce=os.urandom(16).hex())
        return signed.headers()

    def verify(self, *, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes) -> nodes.Signed:
        """A signed request addressed to this node, checked (signature, age, receiver, nonce never
        seen, which it remembers), or Denied, audited as `node.request` (blocking: call in a thread)."""
        try:
            signed = nodes.verify(self.keys(), headers, method=method, path=path, query=query, body=body,
                                  node=self.app.node, now=self.app.clock())
            with self.app.registry.transaction() as tx:
                fresh = tx.instances.remember_nonce(signed.nonce, self.app.clock().isoformat())
            if not fresh:
                raise Denied("node-to-node request replayed (its nonce was seen before): refused", rule="node.replay")
        except Denied as exc:
            self.app.audit.record(actor=f"node:{headers.get('x-warden-node', '?')[:63]}", action="node.request",
                                  target=path[:200], decision="deny", rule=exc.rule or "node.mac",
                                  result="refused", detail={"method": method})
            raise
        return signed


def untrusted(exc: BaseException) -> bool:
    """Whether a failed connection failed on the other node's certificate (an unknown CA, a name
    it was not issued for, expired): the client library wraps the ssl module's error, or says its reason."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def unreachable(node: str, url: str, exc: BaseException, *, sent: bool | None = None) -> Unavailable:
    """What a request for `node`'s workspace answers when its server at `url` could not be
    reached (`exc`, from whichever client sent it): its certificate not trusted, it is down, or
    it went away after the request had gone out (`sent`; by default what a LinkBroken says)."""
    if untrusted(exc):
        return Unavailable(f"node {node!r} is unavailable: its certificate at {url} was not trusted "
                           "(set node.ca_file to the CA that signed it, on this node)", rule="node.tls")
    reason = str(exc) if isinstance(exc, LinkBroken) else type(exc).__name__
    if sent is None:
        sent = isinstance(exc, LinkBroken) and exc.sent
    if sent:
        # Not "try again": a command sent before its node died may have run (or run on, in a
        # sandbox that outlived its server), and a bot that simply sends it again runs it twice.
        return Unavailable(f"node {node!r} gave no whole answer ({reason} at {url}): what was asked "
                           "may have been done there; look (its processes, its files, its audit log once it "
                           "is back) before asking again", rule="node.lost")
    return Unavailable(f"node {node!r} is unavailable ({reason} at {url}); try again when it is back",
                       rule="node.down")
