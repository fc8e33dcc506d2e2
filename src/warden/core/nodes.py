"""Nodes and instances (pure): which Warden processes live where, and who may speak for a node.

A node is one machine of a cluster (`WARDEN_NODE`, default the host name). An instance is one
running Warden front end on a node — a server, the home's daemon, a shell session, a long
command — registered in the registry with its pid and the pid's start time, and a heartbeat it
renews every `node.heartbeat_interval`. An instance is dead when its heartbeat is older than
`node.heartbeat_window`, or (seen from its own node) when its process is gone; a node is live
while one of its instances is. The `nodes` view is derived from the instances: no row of its own.

Node-to-node requests (a server forwarding a bot's request to the node that holds the
workspace) carry an HMAC-SHA256 over the method, path, query, body digest, both node names, a
timestamp and a random nonce, under a key every node of a cluster derives from the shared token
pepper (HKDF, info b"warden node-to-node"). The timestamp bounds how long a nonce must be
remembered; the receiving node remembers each nonce it accepted, so a request is taken once.
This module decides; it does no I/O and reads no clock.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

from warden.core.errors import Denied
from warden.core.names import check_node_name, is_name

__all__ = ["KINDS", "MAC_INFO", "NODE_HEADERS", "Instance", "NodeView", "Signed", "check_node_name",
           "dead_instances", "mac_of", "node_key", "nodes_view", "sign", "verify"]

KINDS = ("serve", "daemon", "shell", "command")
MAC_INFO = b"warden node-to-node"
# Headers of a forwarded request (lower case, as ASGI gives them).
NODE_HEADERS = ("x-warden-node", "x-warden-node-to", "x-warden-node-time", "x-warden-node-nonce",
                "x-warden-node-mac")
# How far a forwarded request's timestamp may be from the receiver's clock (both ways).
SKEW = timedelta(seconds=30)

_NONCE = re.compile(r"[0-9a-f]{32}\Z")
_STAMP = re.compile(r"[0-9]{1,12}\Z")  # ASCII digits only (str.isdigit takes other scripts' too)
_MAC = re.compile(r"[0-9a-f]{64}\Z")


class Instance(NamedTuple):
    """One registered Warden process."""

    id: str
    node: str
    kind: str          # one of KINDS
    pid: int
    pid_start: int     # so a reused pid is not mistaken for it
    started_at: str    # ISO-8601 UTC
    heartbeat_at: str  # ISO-8601 UTC
    url: str | None    # the API a server answers on (for forwarding); None for the others
    terminal: str | None = None  # the terminal a shell or command acts for (its locks)

    def to_json(self) -> dict[str, object]:
        return self._asdict()


def _beat(instance: Instance) -> datetime:
    return datetime.fromisoformat(instance.heartbeat_at)


def dead_instances(instances: Iterable[Instance], now: datetime, window: timedelta, node: str,
                   alive: Callable[[Instance], bool]) -> list[Instance]:
    """The instances found dead: heartbeat older than `window`, or on `node` (ours) with their
    process gone (`alive` is asked only about our own node's)."""
    return [i for i in instances
            if _beat(i) < now - window or (i.node == node and not alive(i))]


class NodeView(NamedTuple):
    """One line of `warden nodes`."""

    node: str
    live: bool
    last_heartbeat: str | None
    url: str | None       # the newest live server's API
    instances: int        # live ones

    def to_json(self) -> dict[str, object]:
        return self._asdict()


def nodes_view(instances: Iterable[Instance], now: datetime, window: timedelta,
               known: Iterable[str] = ()) -> list[NodeView]:
    """Every node that has instances (or is `known`, e.g. named by a workspace), by name."""
    by_node: dict[str, list[Instance]] = {name: [] for name in known}
    for instance in instances:
        by_node.setdefault(instance.node, []).append(instance)
    out = []
    for name in sorted(by_node):
        rows = by_node[name]
        live = [i for i in rows if _beat(i) >= now - window]
        servers = sorted((i for i in live if i.kind == "serve" and i.url), key=_beat, reverse=True)
        last = max((i.heartbeat_at for i in rows), default=None, key=lambda s: datetime.fromisoformat(s))
        out.append(NodeView(name, bool(live), last, servers[0].url if servers else None, len(live)))
    return out


# -- node-to-node authentication --------------------------------------------------------------

def node_key(pepper: bytes) -> bytes:
    """The cluster's node-to-node key: HKDF-SHA256 (RFC 5869) over the shared token pepper, so
    the pepper itself never signs anything but tokens (a zero salt, as the RFC allows)."""
    prk = hmac.new(b"\0" * 32, pepper, hashlib.sha256).digest()
    return hmac.new(prk, MAC_INFO + b"\x01", hashlib.sha256).digest()


class Signed(NamedTuple):
    """The node-to-node headers of one forwarded request."""

    origin: str
    target: str
    timestamp: int
    nonce: str
    mac: str

    def headers(self) -> dict[str, str]:
        return dict(zip(NODE_HEADERS, (self.origin, self.target, str(self.timestamp), self.nonce, self.mac),
                        strict=True))


def mac_of(key: bytes, *, method: str, path: str, query: str, body_sha256: str, origin: str, target: str,
           timestamp: int, nonce: str) -> str:
    """The HMAC-SHA256 binding every part of a forwarded request that changes what it does. Each
    field goes in with its length first: a path may hold a newline (ASGI decodes `%0A` into it),
    and no text may move from one field to the next under the same MAC."""
    fields = ("warden-node-v2", method.upper(), path, query, body_sha256, origin, target, str(timestamp), nonce)
    message = b"".join(len(b).to_bytes(4, "big") + b for b in (f.encode("utf-8", "surrogateescape") for f in fields))
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(key: bytes, *, method: str, path: str, query: str, body: bytes, origin: str, target: str,
         timestamp: int, nonce: str) -> Signed:
    digest = hashlib.sha256(body).hexdigest()
    return Signed(origin, target, timestamp, nonce,
                  mac_of(key, method=method, path=path, query=query, body_sha256=digest, origin=origin,
                         target=target, timestamp=timestamp, nonce=nonce))


def verify(keys: Iterable[bytes], headers: Mapping[str, str], *, method: str, path: str, query: str, body: bytes,
           node: str, now: datetime) -> Signed:
    """The checked node-to-node headers of a request addressed to `node`, signed with one of `keys`
    (the current key and those of peppers a rotation keeps), or Denied (one reason a line, never a
    key or the expected MAC). The caller still refuses a nonce seen before."""
    values = [headers.get(h, "") for h in NODE_HEADERS]
    origin, target, stamp, nonce, mac = values
    if not (is_name(origin) and is_name(target) and _STAMP.match(stamp)
            and _NONCE.match(nonce) and _MAC.match(mac)):
        raise Denied("malformed node-to-node request: refused", rule="node.mac")
    if target != node:
        raise Denied(f"node-to-node request addressed to {target!r}, not this node: refused", rule="node.mac")
    timestamp = int(stamp)
    if abs(now.timestamp() - timestamp) > SKEW.total_seconds():
        raise Denied("node-to-node request too old or from the future (check the nodes' clocks): refused",
                     rule="node.mac")
    digest = hashlib.sha256(body).hexdigest()
    if not any(hmac.compare_digest(mac_of(key, method=method, path=path, query=query, body_sha256=digest,
                                          origin=origin, target=target, timestamp=timestamp, nonce=nonce), mac)
               for key in keys):
        raise Denied("node-to-node request with a wrong signature (do the nodes hold the cluster's key? "
                     "`warden keys show` on each): refused", rule="node.mac")
    return Signed(origin, target, timestamp, nonce, mac)
