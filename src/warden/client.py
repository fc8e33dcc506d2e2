"""The SDK for bots: talk to `warden serve` over HTTP with a token.

    from warden.client import Client
    client = Client("http://127.0.0.1:8787", token)        # token defaults to $WARDEN_TOKEN
    ws = client.create_workspace("demo")                     # needs the bot's identity token
    ws.run(["python", "-c", "print(1)"]).stdout
    ws.files.write("notes/a.txt", b"hi"); ws.files.read("notes/a.txt")
    child = ws.grant("helper-bot", ["read"], ttl="1h")       # needs admin; never wider

API errors come back as Warden's own exceptions (`warden.core.errors`), chosen by the stable
`code` of the error body: `Denied`, `NotFound`, `InvalidInput`, `TooLarge`, ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

from warden.core.errors import (
    Conflict,
    Denied,
    InvalidInput,
    Locked,
    NotFound,
    TimedOut,
    TooLarge,
    Unavailable,
    WardenError,
)
from warden.core.runs import RunResult

__all__ = ["Client", "CreatedWorkspace", "IssuedGrant", "RemoteFiles", "RemoteWorkspace", "error_from"]

# One table: the API's error code → the exception raised here.
ERRORS: dict[str, type[WardenError]] = {
    "invalid": InvalidInput, "not_found": NotFound, "conflict": Conflict, "locked": Locked,
    "denied": Denied, "timeout": TimedOut, "unavailable": Unavailable, "internal": WardenError,
}


def error_from(response: httpx.Response) -> WardenError:
    """The Warden exception an error response stands for."""
    code, message = "internal", f"HTTP {response.status_code}"
    try:
        body = response.json()
        code = str(body["error"]["code"])
        message = str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        if response.text:
            message = f"HTTP {response.status_code}: {response.text[:200]}"
    if response.status_code == 413:
        return TooLarge(message)
    return ERRORS.get(code, WardenError)(message)


@dataclass(frozen=True)
class IssuedGrant:
    """A grant minted through the API: its token (shown once) and what it allows."""

    token: str
    accessor: str
    expires: str
    permissions: tuple[str, ...]
    zones: tuple[str, ...] | None
    secrets: tuple[str, ...]
    bot: str
    workspace: str
    parent: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # keep the token out of logs and tracebacks
        return (f"IssuedGrant(accessor={self.accessor!r}, bot={self.bot!r}, workspace={self.workspace!r}, "
                f"permissions={self.permissions!r}, expires={self.expires!r})")


class Client:
    """A connection to one Warden server with one token (a bot identity or a grant token)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self._token = token if token is not None else os.environ.get("WARDEN_TOKEN")
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)
        self._transport = transport
        self._timeout = timeout
        self._bot: str | None = None

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # -- plumbing --------------------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One HTTP call; an error response raises the matching Warden exception."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise TimedOut(f"{method} {path}: no answer from {self.url} in time ({exc})") from None
        except httpx.TransportError as exc:
            raise Unavailable(f"cannot reach Warden at {self.url}: {exc}; is `warden serve` running?") from None
        if response.status_code >= 400:
            raise error_from(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def with_token(self, token: str) -> Client:
        """Another client on the same server with another token."""
        return Client(self.url, token, timeout=self._timeout, transport=self._transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- calls -----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/v1/health")
        return result

    def whoami(self) -> dict[str, Any]:
        """What the token stands for: the bot, and for a grant its workspace and permissions."""
        result: dict[str, Any] = self._json("GET", "/v1/whoami")
        return result

    @property
    def bot(self) -> str:
        if self._bot is None:
            self._bot = str(self.whoami()["bot"])
        return self._bot

    def create_workspace(self, name: str, *, python: str | None = None, requirements: Sequence[str] = (),
                         template: str | None = None, project_blob: str | bytes | None = None,
                         bot: str | None = None) -> CreatedWorkspace:
        """The bot protocol's request: a new workspace and a grant token for it (needs an identity token)."""
        import base64

        params: dict[str, Any] = {"name": name, "requirements": list(requirements)}
        if python is not None:
            params["python"] = python
        if template is not None:
            params["template"] = template
        if project_blob is not None:
            params["project_blob"] = (base64.b64encode(project_blob).decode("ascii")
                                      if isinstance(project_blob, bytes) else project_blob)
        body = {"bot": bot or self.bot, "request": "workspace", "params": params}
        data = self._json("POST", "/v1/workspaces", json=body)
        info = data["workspace"]
        return CreatedWorkspace(self.with_token(info["access_token"]), info["name"], path=info["path"],
                                venv=info.get("venv"), expires=info["expires"], accessor=info["accessor"],
                                sandbox=dict(data.get("sandbox") or {}), access_token=info["access_token"])

    def list_workspaces(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._json("GET", "/v1/workspaces")
        return result

    def workspace(self, name: str) -> RemoteWorkspace:
        """A handle on a workspace this client's (grant) token opens."""
        return RemoteWorkspace(self, name)

    def grant(self, workspace: str, bot: str, permissions: Sequence[str], *,
              zones: Sequence[str] | None = None, secrets: Sequence[str] = (),
              ttl: str | None = None, max_ttl: str | None = None) -> IssuedGrant:
        """Mint a child grant on `workspace` for `bot` (needs admin; clamped to this token's grant)."""
        return self.workspace(workspace).grant(bot, permissions, zones=zones, secrets=secrets, ttl=ttl,
                                               max_ttl=max_ttl)

    def revoke(self, workspace: str, accessor: str) -> list[str]:
        """Revoke a grant this token minted (and everything minted from it)."""
        return self.workspace(workspace).revoke(accessor)


class RemoteFiles:
    """File operations in one remote workspace; paths are workspace-relative."""

    def __init__(self, workspace: RemoteWorkspace) -> None:
        self._ws = workspace

    def _path(self, suffix: str = "") -> str:
        return f"/v1/workspaces/{self._ws.name}/files{suffix}"

    def read(self, path: str) -> bytes:
        return self._ws.client.request("GET", self._path("/content"), params={"path": path}).content

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: bytes | str) -> int:
        """Replace the file at `path` with `data`; returns the size written."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        result = self._ws.client.request("PUT", self._path("/content"), params={"path": path}, content=payload,
                                         headers={"content-type": "application/octet-stream"}).json()
        return int(result["size"])

    def write_text(self, path: str, text: str) -> int:
        return self.write(path, text)

    def stat(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = self._ws.client.request("GET", self._path(), params={"path": path}).json()
        return result

    def list(self, path: str = "/") -> list[dict[str, Any]]:
        result = self.stat(path)
        if result.get("entries") is None:
            raise InvalidInput(f"{path} is a {result.get('type')}, not a directory")
        entries: list[dict[str, Any]] = result["entries"]
        return entries

    def delete(self, path: str) -> None:
        self._ws.client.request("DELETE", self._path(), params={"path": path})

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except NotFound:
            return False
        return True


class RemoteWorkspace:
    """One workspace on a Warden server, reached with the client's token."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self.files = RemoteFiles(self)

    def __repr__(self) -> str:
        return f"RemoteWorkspace({self.name!r}, url={self.client.url!r})"

    def info(self) -> dict[str, Any]:
        result: dict[str, Any] = self.client.request("GET", f"/v1/workspaces/{self.name}").json()
        return result

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            stdin: str | None = None) -> RunResult:
        """Run `argv` in the workspace's sandbox (needs execute)."""
        if isinstance(argv, str):
            raise InvalidInput("argv is a list of arguments, not a shell string: ['python', '-c', 'print(1)']")
        body: dict[str, Any] = {"cmd": list(argv), "env": dict(env or {})}
        if timeout is not None:
            body["timeout"] = timeout
        if stdin is not None:
            body["stdin"] = stdin
        read_timeout = (timeout or self.client._timeout) + 30.0
        data = self.client.request("POST", f"/v1/workspaces/{self.name}/exec", json=body,
                                   timeout=httpx.Timeout(self.client._timeout, read=read_timeout)).json()
        return RunResult(exit_code=int(data["exit_code"]), stdout=data["stdout"], stderr=data["stderr"],
                         duration_s=float(data["duration_s"]), timed_out=bool(data["timed_out"]),
                         signal=data.get("signal"))

    def grant(self, bot: str, permissions: Sequence[str], *, zones: Sequence[str] | None = None,
              secrets: Sequence[str] = (), ttl: str | None = None, max_ttl: str | None = None) -> IssuedGrant:
        """Mint a child grant for `bot` (needs admin); it is never wider than this token's grant."""
        body: dict[str, Any] = {"bot": bot, "permissions": list(permissions), "secrets": list(secrets)}
        if zones is not None:
            body["zones"] = list(zones)
        if ttl is not None:
            body["ttl"] = ttl
        if max_ttl is not None:
            body["max_ttl"] = max_ttl
        data = self.client.request("POST", f"/v1/workspaces/{self.name}/grants", json=body).json()
        return IssuedGrant(token=data["token"], accessor=data["accessor"], expires=data["expires"],
                           permissions=tuple(data["permissions"]),
                           zones=tuple(data["zones"]) if data.get("zones") is not None else None,
                           secrets=tuple(data["secrets"]), bot=data["bot"], workspace=data["workspace"],
                           parent=data.get("parent"), raw={k: v for k, v in data.items() if k != "token"})

    def revoke(self, accessor: str) -> list[str]:
        """Revoke a grant minted from this token's grant (its children go too)."""
        data = self.client.request("DELETE", f"/v1/workspaces/{self.name}/grants/{accessor}").json()
        return list(data["revoked"])

    def destroy(self) -> list[str]:
        """Destroy the workspace and revoke every grant on it (needs admin)."""
        data = self.client.request("DELETE", f"/v1/workspaces/{self.name}").json()
        return list(data["revoked"])


class CreatedWorkspace(RemoteWorkspace):
    """The answer to a workspace request: a handle that uses the new grant token."""

    def __init__(self, client: Client, name: str, *, path: str, venv: str | None, expires: str, accessor: str,
                 sandbox: dict[str, Any], access_token: str) -> None:
        super().__init__(client, name)
        self.path = path
        self.venv = venv
        self.expires = expires
        self.accessor = accessor
        self.sandbox = sandbox
        self.access_token = access_token

    def __repr__(self) -> str:
        return f"CreatedWorkspace({self.name!r}, path={self.path!r}, accessor={self.accessor!r})"
