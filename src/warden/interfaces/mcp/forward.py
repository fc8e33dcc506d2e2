"""MCP tool calls (and resource reads) for another node's workspace, carried out on that node.

A tool that names a workspace of another node is sent, whole, to that node's `/mcp` as one
JSON-RPC request: the same tool, the same arguments, the bot's own bearer token, signed as a
node (core/nodes.py, method POST, path `/mcp`, the body's digest). That node runs the very tool
code it would run for the bot (its grants, policy, approvals, audit), so the answer is the one
it would have given: no tool is translated into other API calls, and none answers differently
through another node. An exec's output streams back as progress notifications when the client
asked for them. A signed request arriving here is checked like any node's (signature, age,
nonce), and a tool call in it is never forwarded again. The node down, unreachable or refusing
the signature: the tool's error `unavailable`, naming the node; nothing runs anywhere.
Tools that name no workspace (list_workspaces, create_workspace) are this node's own.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from warden.core.errors import Unavailable, WardenError

if TYPE_CHECKING:
    import httpx

    from warden.interfaces.http.peers import Peers

__all__ = ["FORWARDED", "PROTOCOL_VERSION", "McpForwarding", "RemoteError"]

# Set (True) while a request another node signed is served: its calls are never forwarded again.
FORWARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("warden_mcp_forwarded", default=False)
PROTOCOL_VERSION = "2025-06-18"
# What of another node's answer is read at most (a tool result is bounded well below it).
MAX_ANSWER = 8 << 20

Progress = Callable[[float, str], Awaitable[None]]


class RemoteError(Exception):
    """The other node answered with a JSON-RPC error (a bad resource URI, say): its code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class McpForwarding:
    """Sends one JSON-RPC request to another node's `/mcp` and reads its answer."""

    def __init__(self, peers: Peers, *, timeout: float) -> None:
        self.peers = peers
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def node_for(self, workspace: object, token: str | None) -> str | None:
        """The node a call on `workspace` goes to: another node's name, or None (carried out here:
        this node's workspace, no such workspace, no token to pass on, or itself forwarded)."""
        if not isinstance(workspace, str) or not token or FORWARDED.get():
            return None
        return await self.peers.node_of(workspace)

    async def request(self, node: str, method: str, params: dict[str, Any], token: str,
                      progress: Progress | None = None) -> dict[str, Any]:
        """The `result` of JSON-RPC `method` on `node`; RemoteError for its error, Unavailable when
        it cannot be asked (down, unreachable, its answer not a JSON-RPC one)."""
        import httpx

        from warden.interfaces.http.peers import unreachable

        if progress is not None:
            params = {**params, "_meta": {"progressToken": 1}}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        url = await self.peers.url_of(node)  # Unavailable when it is down
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
                   "accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL_VERSION,
                   **await self.peers.sign(method="POST", path="/mcp", query="", body=body, target=node)}
        try:
            async with self._http().stream("POST", url.rstrip("/") + "/mcp", content=body, headers=headers) as answer:
                if answer.headers.get("content-type", "").startswith("text/event-stream"):
                    return await _from_events(node, answer, progress)
                data = await _bounded(answer)
                return _result_of(node, answer.status_code, data)
        except httpx.TransportError as exc:
            # Only a connection never made kept the call from reaching the node.
            not_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
            raise unreachable(node, url, exc, sent=not not_sent) from None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(verify=self.peers.tls(), follow_redirects=False, trust_env=False,
                                             timeout=httpx.Timeout(self.timeout, connect=5.0),
                                             limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
        return self._client


async def _bounded(answer: httpx.Response) -> bytes:
    parts, size = [], 0
    async for chunk in answer.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER:
            raise Unavailable("the other node's answer is too large", rule="node.answer")
        parts.append(chunk)
    return b"".join(parts)


def _result_of(node: str, status: int, data: bytes) -> dict[str, Any]:
    """The result of one JSON-RPC answer (or the API's error body, for a refusal at its door)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):  # a node's answer nested too deep is no answer either
        message = None
    if not isinstance(message, dict):
        raise Unavailable(f"node {node!r} gave no MCP answer (HTTP {status})", rule="node.answer")
    if isinstance(message.get("error"), dict) and "jsonrpc" not in message:  # the API's own error body
        error = message["error"]
        raise _warden_error(str(error.get("code", "internal")), str(error.get("message", "")))
    if isinstance(message.get("error"), dict):
        error = message["error"]
        code = error.get("code")
        raise RemoteError(code if isinstance(code, int) else -32603, str(error.get("message", "")))
    result = message.get("result")
    if not isinstance(result, dict):
        raise Unavailable(f"node {node!r} gave no MCP result (HTTP {status})", rule="node.answer")
    return result


async def _from_events(node: str, answer: httpx.Response, progress: Progress | None) -> dict[str, Any]:
    """An event-stream answer: progress notifications passed on as they come, then the result."""
    data: list[str] = []
    size = 0
    async for line in answer.aiter_lines():
        size += len(line)
        if size > MAX_ANSWER * 4:  # progress included: an exec streams at most 16 MiB (mcp/calls.py)
            raise Unavailable("the other node's answer is too large", rule="node.answer")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line or not data:
            continue
        event, data = "\n".join(data), []
        try:
            message = json.loads(event)
        except (ValueError, RecursionError):
            continue
        if not isinstance(message, dict):
            continue
        if message.get("method") == "notifications/progress":
            params = message.get("params") or {}
            if progress is not None and isinstance(params, dict):
                done = params.get("progress")
                await progress(float(done) if isinstance(done, int | float) else 0.0, str(params.get("message") or ""))
            continue
        if message.get("id") == 1:
            return _result_of(node, answer.status_code, event.encode())
    raise Unavailable(f"node {node!r} ended its answer without a result: what was asked may have been done "
                      "there; look before asking again", rule="node.answer")


def _warden_error(code: str, message: str) -> WardenError:
    from warden.core import errors

    kinds: dict[str, type[WardenError]] = {"invalid": errors.InvalidInput, "not_found": errors.NotFound,
                                           "conflict": errors.Conflict, "locked": errors.Locked,
                                           "denied": errors.Denied, "timeout": errors.TimedOut,
                                           "unavailable": errors.Unavailable}
    return kinds.get(code, WardenError)(message[:2000])
