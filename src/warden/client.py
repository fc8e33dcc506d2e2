"""The SDK for bots: talk to `warden serve` over HTTP with a token.

    from warden.client import Client
    client = Client("http://127.0.0.1:8787", token)        # token defaults to $WARDEN_TOKEN
    ws = client.create_workspace("demo")                     # needs the bot's identity token
    ws.run(["python", "-c", "print(1)"]).stdout
    ws.run(["pytest", "-q"], cwd="src")                      # in a folder of the workspace
    ws.run(["pip", "download", "six"], network=["pypi.org:443", "files.pythonhosted.org:443"])
    ws.install(["six"])                                      # into .venv, recorded in pyproject.toml
    ws.run(["make"], on_stdout=print, on_stderr=print)       # output as it comes (streamed)
    for event in ws.stream(["pytest"]): ...                  # RunEvent: stdout/stderr data, then exit
    server = ws.run(["python", "-m", "http.server"], background=True)   # returns at once
    ws.processes.list(); server.logs().stderr; server.kill(); server.wait()
    ws.files.write("notes/a.txt", b"hi"); ws.files.read("notes/a.txt")
    try: ws.files.write("final/report.md", text)             # a zone whose writes are `ask`
    except Pending as waiting:                               # 202: a person answers it
        client.wait_for_approval(waiting.approval_id)        # → {"status": "approved", ...}
    ws.git.status(); ws.git.diff()["diff"]; ws.git.stage("Fix the parser")   # a proposal for the person
    for batch in ws.files.watch(timeout=60): ...             # file changes as they happen (SSE)
    child = ws.grant("helper-bot", ["read"], ttl="1h")       # needs admin; never wider

API errors come back as Warden's own exceptions (`warden.core.errors`), chosen by the stable
`code` of the error body: `Denied`, `NotFound`, `InvalidInput`, `TooLarge`, ...
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, overload

import httpx

from warden.core.errors import (
    Conflict,
    Denied,
    InvalidInput,
    Locked,
    NotFound,
    Pending,
    TimedOut,
    TooLarge,
    Unavailable,
    WardenError,
)
from warden.core.runs import RunResult, Usage
from warden.core.watching import Batch, Change

# Longest silence on a change stream before the SDK gives the server up (it heartbeats every 15 s).
_WATCH_SILENCE_S = 45.0
# How long past a command's own timeout the SDK waits for the server's answer (it kills the command then).
_ANSWER_MARGIN_S = 30.0

__all__ = ["Client", "CreatedWorkspace", "IssuedGrant", "ProcessInfo", "ProcessOutput", "RemoteFiles", "RemoteGit",
           "RemoteProcess", "RemoteProcesses", "RemoteWorkspace", "RunEvent", "error_from"]

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


def _not_unicode(method: str, path: str, exc: UnicodeEncodeError) -> InvalidInput:
    """A request holding text JSON cannot carry (a lone surrogate, as os.fsdecode makes of bytes
    that are not UTF-8), said as the caller's bad input rather than an encoder's traceback."""
    return InvalidInput(f"{method} {path}: the request holds text that is not valid Unicode "
                        f"({exc.object[exc.start:exc.end]!r}: {exc.reason}); pass UTF-8 text")


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
    domains: tuple[str, ...] = ()

    def __repr__(self) -> str:  # keep the token out of logs and tracebacks
        return (f"IssuedGrant(accessor={self.accessor!r}, bot={self.bot!r}, workspace={self.workspace!r}, "
                f"permissions={self.permissions!r}, expires={self.expires!r})")


@dataclass(frozen=True)
class RunEvent:
    """One line of a streamed run (`RemoteWorkspace.stream`): output as it came, then the exit.

    `type` is "stdout" or "stderr" (with `data`, the text) or, last, "exit" (with `exit_code`,
    `timed_out`, `signal`, `duration_s`), as the API's NDJSON lines say. What the run used is
    in a non-streamed `exec`'s `RunResult.usage`.
    """

    type: str
    data: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    signal: int | None = None
    duration_s: float | None = None


def _usage(used: object) -> Usage | None:
    """The `usage` object of an answer (None when absent or not an object)."""
    if not isinstance(used, dict):
        return None
    return Usage(used.get("cpu_s"), used.get("memory_peak_bytes"), used.get("memory_measured"),
                 used.get("measured_by"))


def _event(line: str) -> RunEvent | None:
    """The event of one NDJSON line; an error line raises its Warden exception; an unknown type: None."""
    import json

    try:
        item = json.loads(line)
        kind = str(item["type"])
    except (ValueError, KeyError, TypeError):
        raise WardenError(f"the server sent a line that is not an event: {line[:200]!r}") from None
    if kind in ("stdout", "stderr"):
        return RunEvent(kind, str(item.get("data", "")))
    if kind == "exit":
        signal = item.get("signal")
        return RunEvent("exit", exit_code=int(item["exit_code"]), timed_out=bool(item.get("timed_out")),
                        signal=int(signal) if signal is not None else None,
                        duration_s=float(item.get("duration_s") or 0.0))
    if kind == "error":
        error = item.get("error") or {}
        raise ERRORS.get(str(error.get("code")), WardenError)(str(error.get("message", "the run failed")))
    return None  # a kind this SDK does not know yet: skipped


def _exec_body(argv: Sequence[str], *, timeout: float | None, env: Mapping[str, str] | None, stdin: str | None,
               cwd: str | None, network: Sequence[str] | None) -> dict[str, Any]:
    """The JSON body of an exec request."""
    if isinstance(argv, str):
        raise InvalidInput("argv is a list of arguments, not a shell string: ['python', '-c', 'print(1)']")
    if isinstance(network, str):
        raise InvalidInput("network is a list of hosts, e.g. ['pypi.org:443']")
    body: dict[str, Any] = {"cmd": list(argv), "env": dict(env or {})}
    if timeout is not None:
        body["timeout"] = timeout
    if stdin is not None:
        body["stdin"] = stdin
    if cwd is not None:
        body["cwd"] = cwd
    if network is not None:
        body["network"] = {"allow": list(network)}
    return body


class Client:
    """A connection to one Warden server with one token (a bot identity or a grant token)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None, slot_wait: float = 60.0) -> None:
        """`slot_wait`: how long a command refused because its bot (or the server) already runs
        as many as it may at once (503 with Retry-After: it never started) is asked for again,
        as slots free up, before that refusal is raised; 0 raises it at once."""
        self.url = url.rstrip("/")
        self._slot_wait = slot_wait
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
            response = self._slotted(lambda: self._http.request(method, path, **kwargs))
        except UnicodeEncodeError as exc:
            raise _not_unicode(method, path, exc) from None
        except httpx.TimeoutException as exc:
            raise TimedOut(f"{method} {path}: no answer from {self.url} in time ({exc})") from None
        except httpx.TransportError as exc:
            raise Unavailable(f"cannot reach Warden at {self.url}: {exc}; is `warden serve` running?") from None
        if response.status_code >= 400:
            raise self._error_from(response, path)
        return response

    def _slotted(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        """`send()`'s answer, sent again while it is a 503 with Retry-After (no exec slot free: the
        command never started) and `slot_wait` seconds have not passed: ten calls at once from
        one bot allowed four then get their answers in turn, not six refusals."""
        deadline = time.monotonic() + self._slot_wait
        pause = 0.05
        while True:
            response = send()
            retry = response.headers.get("retry-after", "") if response.status_code == 503 else ""
            if not retry.isdigit() or time.monotonic() + pause > deadline:
                return response
            response.close()
            time.sleep(pause)
            pause = min(pause * 2, float(retry) or 1.0)

    def _error_from(self, response: httpx.Response, path: str) -> WardenError:
        """As error_from, and a refusal for want of a token says where this client would have
        found one: the server's words are about HTTP headers, which an SDK user never wrote."""
        error = error_from(response)
        if response.status_code == 401 and not self._token:
            return type(error)(f"{error.message}; this Client has none: pass it, Client(url, token), or set "
                               "WARDEN_TOKEN (`warden bot register NAME` prints a bot's)")
        if response.status_code == 403 and path.startswith("/v1/workspaces/") and self._holds_identity():
            return type(error)(f"{error.message}: this Client holds a bot's identity token, which only asks for "
                               "workspaces; a workspace's calls take its grant token: use the workspace "
                               "create_workspace returned, or Client(url, grant_token).workspace(name)")
        return error

    def _holds_identity(self) -> bool:
        """Whether this client's token is a bot's identity token. The server answers every refused
        token alike (nothing learned about others'); this asks only about its own, and only on the
        way to an error, so that `Client(url).workspace(name)` with the token `warden bot register`
        printed is told which token it needs rather than a bare "permission denied"."""
        try:
            answer = self._http.get("/v1/whoami")
            return answer.status_code == 200 and answer.json().get("kind") == "bot"
        except (httpx.HTTPError, ValueError, AttributeError):
            return False

    @contextlib.contextmanager
    def streaming(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """One HTTP call whose answer is read as it comes; an error response raises as `request` does."""
        try:
            # Built first, so that only the request's own text is said to be bad, never what the
            # caller's loop over the answer raises.
            request = self._http.build_request(method, path, **kwargs)
        except UnicodeEncodeError as exc:
            raise _not_unicode(method, path, exc) from None
        try:
            response = self._slotted(lambda: self._http.send(request, stream=True))
            try:
                if response.status_code >= 400:
                    response.read()
                    raise self._error_from(response, path)
                yield response
            finally:
                response.close()
        except httpx.TimeoutException as exc:
            raise TimedOut(f"{method} {path}: no answer from {self.url} in time ({exc})") from None
        except httpx.TransportError as exc:
            raise Unavailable(f"lost Warden at {self.url}: {exc}; is `warden serve` running?") from None

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def _may_wait(self, response: httpx.Response) -> httpx.Response:
        """A 202 holding an approval: the operation waits for a person (raised as Pending)."""
        if response.status_code == 202:
            body = response.json()
            if isinstance(body, dict) and isinstance(body.get("approval"), dict):
                message = str(body.get("message") or "waiting for approval")
                approval_id = body["approval"].get("id")
                if isinstance(approval_id, str):
                    # The server says how an HTTP client waits ("poll GET /v1/approvals/ID"); this
                    # client's own way is its call.
                    message = message.replace(f"poll GET /v1/approvals/{approval_id}",
                                              f"wait with client.wait_for_approval({approval_id!r})")
                raise Pending(message, approval=body["approval"])
        return response

    # -- approvals -------------------------------------------------------------------------------
    def approval(self, approval_id: str) -> dict[str, Any]:
        """A request's status (`pending`, `approving`, `approved`, `denied`, `expired`, `failed`)."""
        view: dict[str, Any] = self._json("GET", f"/v1/approvals/{approval_id}")["approval"]
        return view

    def wait_for_approval(self, approval_id: str, *, timeout: float | None = None,
                          interval: float = 0.5) -> dict[str, Any]:
        """Poll until a person answered (or it expired); the request as it ended. `approved`
        means the operation has been carried out; TimedOut after `timeout` seconds."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.approval(approval_id)
            if view["status"] not in ("pending", "approving"):
                return view
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut(f"no answer to {approval_id} within {timeout} s; it is still {view['status']}")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

    def approvals(self, workspace: str, *, everything: bool = False) -> list[dict[str, Any]]:
        """A workspace's requests (needs a grant with `approve` there)."""
        found: list[dict[str, Any]] = self._json("GET", f"/v1/workspaces/{workspace}/approvals",
                                                 params={"all": "true" if everything else "false"})["approvals"]
        return found

    def approve(self, approval_id: str, *, note: str | None = None) -> dict[str, Any]:
        """Approve another bot's request (needs `approve`); Warden carries it out."""
        view: dict[str, Any] = self._json("POST", f"/v1/approvals/{approval_id}/approve", json={"note": note})
        return view["approval"]  # type: ignore[no-any-return]

    def deny(self, approval_id: str, *, note: str | None = None) -> dict[str, Any]:
        """Deny another bot's request (needs `approve`); nothing is done."""
        view: dict[str, Any] = self._json("POST", f"/v1/approvals/{approval_id}/deny", json={"note": note})
        return view["approval"]  # type: ignore[no-any-return]

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
              ttl: str | None = None, max_ttl: str | None = None, domains: Sequence[str] = ()) -> IssuedGrant:
        """Mint a child grant on `workspace` for `bot` (needs admin; clamped to this token's grant)."""
        return self.workspace(workspace).grant(bot, permissions, zones=zones, secrets=secrets, ttl=ttl,
                                               max_ttl=max_ttl, domains=domains)

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
        """Replace the file at `path` with `data`; returns the size written. Pending (with
        `.approval_id`) when the zone asks a person first: see `Client.wait_for_approval`."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        client = self._ws.client
        result = client._may_wait(client.request("PUT", self._path("/content"), params={"path": path},
                                                 content=payload,
                                                 headers={"content-type": "application/octet-stream"})).json()
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
        while isinstance(result.get("next_offset"), int):  # a large directory comes in pages
            result = self._ws.client.request("GET", self._path(), params={"path": path,
                                                                          "offset": result["next_offset"]}).json()
            entries += result.get("entries") or []
        return entries

    def delete(self, path: str) -> None:
        """Delete a file, a link or an empty folder; Pending when the zone asks a person first."""
        client = self._ws.client
        client._may_wait(client.request("DELETE", self._path(), params={"path": path}))

    def move(self, source: str, destination: str) -> dict[str, Any]:
        """Move (rename) a file or folder, never over an existing entry; answers `{source,
        destination, type}`, or Pending when a zone asks a person first (as `write` and `delete`:
        the HTTP API, the CLI's `fs mv` and MCP's `move_file` had it, the SDK did not)."""
        client = self._ws.client
        moved: dict[str, Any] = client._may_wait(client.request(
            "POST", self._path("/move"), json={"source": source, "destination": destination})).json()
        return moved

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def watch(self, *, timeout: float | None = None, count: int | None = None) -> Iterator[Batch]:
        """The workspace's file changes as they happen (`GET …/events`, server-sent events): one
        `Batch` per debounced burst, until `count` batches, `timeout` seconds, or the workspace
        goes (then the iterator just ends). Needs `read`; a grant sees its zones' paths only, and
        one revoked or expired while it watches raises `Denied`.

            for batch in ws.files.watch(timeout=60):
                for change in batch.changes: print(change.change, change.path)
        """
        params = {} if timeout is None else {"timeout": timeout}
        got = 0
        if count is not None and count < 1:
            return
        # The server sends a comment every 15 s: a longer silence is a lost server.
        read = httpx.Timeout(self._ws.client._timeout, read=_WATCH_SILENCE_S)
        with self._ws.client.streaming("GET", f"/v1/workspaces/{self._ws.name}/events", params=params,
                                       timeout=read) as response:
            kind = ""
            for line in response.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "change":
                    yield _batch(json.loads(line[5:]))
                    got += 1
                    if count is not None and got >= count:
                        return
                elif line.startswith("data:") and kind == "end":
                    if json.loads(line[5:]).get("reason") == "denied":  # its grant revoked or expired meanwhile
                        raise Denied("permission denied")
                    return
                elif not line:
                    kind = ""


def _batch(data: Mapping[str, Any]) -> Batch:
    changes = tuple(Change(c["change"], c["path"]) for c in data.get("changes", ()))
    return Batch(changes, str(data.get("at", "")), int(data.get("count", len(changes))), bool(data.get("overflow")))


class RemoteGit:
    """The workspace's repository: look, stage changes as a proposal, and ask the person to push
    it (a bot never pushes by itself)."""

    def __init__(self, workspace: RemoteWorkspace) -> None:
        self._ws = workspace

    def _path(self, suffix: str) -> str:
        return f"/v1/workspaces/{self._ws.name}/git/{suffix}"

    def status(self) -> dict[str, Any]:
        """{branch, upstream, ahead, behind, changes: [{code, path}]} (needs `read`)."""
        result: dict[str, Any] = self._ws.client.request("GET", self._path("status")).json()
        return result

    def diff(self) -> dict[str, Any]:
        """What staging would propose now: {files: [{status, path}], diff} (needs `read`)."""
        result: dict[str, Any] = self._ws.client.request("GET", self._path("diff")).json()
        return result

    def staged(self) -> list[dict[str, Any]]:
        """The proposals waiting for the person (needs `read`)."""
        result: list[dict[str, Any]] = self._ws.client.request("GET", self._path("staged")).json()
        return result

    def push(self, proposal: str | None = None) -> dict[str, Any]:
        """Ask a person to push a proposal (the only one waiting when None): raises Pending, whose
        `.approval_id` `Client.wait_for_approval` follows; once approved it has been pushed."""
        client = self._ws.client
        client._may_wait(client.request("POST", self._path("push"), json={"proposal": proposal}))
        raise WardenError("the server pushed without a person's approval")  # never: a bot's push always waits

    def stage(self, message: str) -> dict[str, Any]:
        """Propose the working tree's changes as one commit; the proposal with its diff (needs
        `write` on the whole workspace)."""
        result: dict[str, Any] = self._ws.client.request("POST", self._path("stage"),
                                                         json={"message": message}).json()
        return result


@dataclass(frozen=True)
class ProcessInfo:
    """A background process as the API shows it; `status` is starting, running, exited, killed
    (a signal, its timeout or its sandbox's stop) or lost (its end was never seen)."""

    id: str
    cmd: tuple[str, ...]
    status: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    started_at: str
    ended_at: str | None
    stopped_by: str | None = None  # why Warden stopped its sandbox under it (a policy change, a revoke…)

    @property
    def running(self) -> bool:
        return self.status in ("starting", "running")

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> ProcessInfo:
        return cls(str(data["id"]), tuple(str(a) for a in data["cmd"]), str(data["status"]), data.get("exit_code"),
                   data.get("signal"), bool(data.get("timed_out")), str(data["started_at"]), data.get("ended_at"),
                   data.get("stopped_by"))


@dataclass(frozen=True)
class ProcessOutput:
    """What a background process printed, as much as Warden kept (`dropped_*`: bytes lost at the front)."""

    stdout: str
    stderr: str
    dropped_stdout: int = 0
    dropped_stderr: int = 0


class RemoteProcesses:
    """The background processes this client's grant started in one workspace (`ws.processes`)."""

    def __init__(self, workspace: RemoteWorkspace) -> None:
        self._ws = workspace

    def _path(self, suffix: str = "") -> str:
        return f"/v1/workspaces/{self._ws.name}/processes{suffix}"

    def list(self) -> list[ProcessInfo]:
        return [ProcessInfo.of(item) for item in self._ws.client.request("GET", self._path()).json()]

    def get(self, process_id: str) -> ProcessInfo:
        return ProcessInfo.of(self._ws.client.request("GET", self._path(f"/{process_id}")).json())

    def logs(self, process_id: str) -> ProcessOutput:
        data = self._ws.client.request("GET", self._path(f"/{process_id}/logs")).json()
        dropped = data.get("dropped") or {}
        return ProcessOutput(data["stdout"], data["stderr"], int(dropped.get("stdout", 0)),
                             int(dropped.get("stderr", 0)))

    def follow(self, process_id: str) -> Iterator[RunEvent]:
        """Its output so far, then as it comes, then (last) its `exit` event."""
        path = self._path(f"/{process_id}/logs")
        with self._ws.client.streaming("GET", path, params={"follow": "true"},
                                       timeout=httpx.Timeout(self._ws.client._timeout, read=None)) as response:
            for line in response.iter_lines():
                event = _event(line) if line.strip() else None
                if event is None:
                    continue
                yield event
                if event.type == "exit":
                    return
        raise WardenError(f"the server's stream ended before process {process_id} did; follow it again")

    def kill(self, process_id: str, signal: str = "TERM") -> ProcessInfo:
        """Signal it and what it started (TERM, KILL, INT, …); it is shown as it is afterwards.
        One that has ended already is shown as it ended (a cleanup's `finally: p.kill()` does not
        raise), though the server answers such a kill 409 and `warden kill` exits 5."""
        try:
            return ProcessInfo.of(self._ws.client.request("DELETE", self._path(f"/{process_id}"),
                                                          params={"signal": signal}).json())
        except Conflict:
            info = self.get(process_id)
            if info.status == "running":
                raise
            return info

    def wait(self, process_id: str, timeout: float | None = None) -> ProcessInfo:
        """The process once it has ended; TimedOut when it still runs after `timeout` seconds."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # The server holds each request until the process ends or up to 30 s (its long poll).
            left = 30.0 if deadline is None else min(deadline - time.monotonic(), 30.0)
            if left <= 0:
                info = self.get(process_id)
            else:
                info = ProcessInfo.of(self._ws.client.request(
                    "GET", self._path(f"/{process_id}/wait"), params={"timeout": f"{max(left, 0.001):.3f}"},
                    timeout=left + 30.0).json())
            if not info.running:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut(f"process {process_id} still runs after {timeout:g} s")


class RemoteProcess:
    """A background process `ws.run(..., background=True)` started."""

    def __init__(self, workspace: RemoteWorkspace, process_id: str) -> None:
        self.workspace = workspace
        self.id = process_id

    def __repr__(self) -> str:
        return f"RemoteProcess({self.id!r}, workspace={self.workspace.name!r})"

    def info(self) -> ProcessInfo:
        return self.workspace.processes.get(self.id)

    def logs(self) -> ProcessOutput:
        return self.workspace.processes.logs(self.id)

    def follow(self) -> Iterator[RunEvent]:
        return self.workspace.processes.follow(self.id)

    def kill(self, signal: str = "TERM") -> ProcessInfo:
        return self.workspace.processes.kill(self.id, signal)

    def wait(self, timeout: float | None = None) -> ProcessInfo:
        return self.workspace.processes.wait(self.id, timeout)


class RemoteWorkspace:
    """One workspace on a Warden server, reached with the client's token."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        # The token its requests carry, for what the SDK does not wrap (the PTY WebSocket's header,
        # as docs/bots-and-api.md shows): a handle from `Client(url, grant).workspace(name)` had
        # none, and the docs' example failed there with AttributeError.
        self.access_token: str | None = client._token
        self.files = RemoteFiles(self)
        self.processes = RemoteProcesses(self)
        self.git = RemoteGit(self)

    def __repr__(self) -> str:
        return f"RemoteWorkspace({self.name!r}, url={self.client.url!r})"

    def info(self) -> dict[str, Any]:
        result: dict[str, Any] = self.client.request("GET", f"/v1/workspaces/{self.name}").json()
        return result

    @overload
    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            stdin: str | None = None, cwd: str | None = None, network: Sequence[str] | None = None,
            on_stdout: Callable[[str], None] | None = None, on_stderr: Callable[[str], None] | None = None,
            background: Literal[False] = False) -> RunResult: ...

    @overload
    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            stdin: str | None = None, cwd: str | None = None, network: Sequence[str] | None = None,
            on_stdout: Callable[[str], None] | None = None, on_stderr: Callable[[str], None] | None = None,
            background: Literal[True]) -> RemoteProcess: ...

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            stdin: str | None = None, cwd: str | None = None, network: Sequence[str] | None = None,
            on_stdout: Callable[[str], None] | None = None,
            on_stderr: Callable[[str], None] | None = None, background: bool = False) -> RunResult | RemoteProcess:
        """Run `argv` in the workspace's sandbox (needs execute). `cwd`: its working folder,
        relative to the workspace; `network`: the hosts (`host:port`) this command may reach,
        within the domains the grant allows (None: no network). `on_stdout` / `on_stderr`: called
        with each piece of output text as it comes (the run is streamed, see `stream`); the
        result holds all of it too. `background=True`: start it in this grant's live sandbox and
        return at once, a `RemoteProcess` (its servers answer this grant's next commands on
        127.0.0.1; `ws.processes` lists and follows them)."""
        body = _exec_body(argv, timeout=timeout, env=env, stdin=stdin, cwd=cwd, network=network)
        if background:
            if on_stdout is not None or on_stderr is not None or stdin is not None:
                raise InvalidInput("a background process takes no stdin and streams nothing: read its output "
                                   "with ws.processes.logs(id) or follow(id)")
            data = self.client.request("POST", f"/v1/workspaces/{self.name}/exec",
                                       json={**body, "background": True}).json()
            return RemoteProcess(self, str(data["id"]))
        if on_stdout is not None or on_stderr is not None:
            return self._run_streamed(body, on_stdout, on_stderr)
        data = self.client.request("POST", f"/v1/workspaces/{self.name}/exec", json=body,
                                   timeout=self._answer_timeout(timeout)).json()
        return RunResult(exit_code=int(data["exit_code"]), stdout=data["stdout"], stderr=data["stderr"],
                         duration_s=float(data["duration_s"]), timed_out=bool(data["timed_out"]),
                         signal=data.get("signal"), usage=_usage(data.get("usage")),
                         truncated=bool(data.get("truncated")), limits_via=str(data.get("limits_via", "rlimit")),
                         seccomp=bool(data.get("seccomp")))

    def stream(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
               stdin: str | None = None, cwd: str | None = None,
               network: Sequence[str] | None = None) -> Iterator[RunEvent]:
        """Run `argv` like `run`, yielding its output as it comes and, last, how it ended:

            for event in ws.stream(["make", "test"]):
                if event.type == "stdout": print(event.data, end="")
                elif event.type == "exit": status = event.exit_code

        Leaving the loop early (or closing the iterator) drops the connection, and the server
        kills the command. A refusal raises before the first event, as `run` does.
        """
        body = _exec_body(argv, timeout=timeout, env=env, stdin=stdin, cwd=cwd, network=network)
        return self._events(body)

    def _answer_timeout(self, timeout: float | None) -> httpx.Timeout:
        """How long a run's answer (or, streamed, the silence between two pieces of its output) is
        waited for: its own timeout and a margin. Without one it may run as long as the server lets
        it (sandbox.timeout, 10 minutes by default, which the client does not know), and the server
        answers by then: the client's own `timeout` is for calls, not for commands."""
        return httpx.Timeout(self.client._timeout, read=None if timeout is None else timeout + _ANSWER_MARGIN_S)

    def _events(self, body: dict[str, Any]) -> Iterator[RunEvent]:
        with self.client.streaming("POST", f"/v1/workspaces/{self.name}/exec", json={**body, "stream": True},
                                   timeout=self._answer_timeout(body.get("timeout"))) as response:
            for line in response.iter_lines():
                event = _event(line) if line.strip() else None
                if event is None:
                    continue
                yield event
                if event.type == "exit":
                    return
        raise WardenError("the server's stream ended before the command's exit status; run it again")

    def _run_streamed(self, body: dict[str, Any], on_stdout: Callable[[str], None] | None,
                      on_stderr: Callable[[str], None] | None) -> RunResult:
        out: list[str] = []
        err: list[str] = []
        for event in self._events(body):
            if event.type == "exit":
                return RunResult(exit_code=int(event.exit_code or 0), stdout="".join(out), stderr="".join(err),
                                 duration_s=float(event.duration_s or 0.0), timed_out=event.timed_out,
                                 signal=event.signal)
            (out if event.type == "stdout" else err).append(event.data)
            callback = on_stdout if event.type == "stdout" else on_stderr
            if callback is not None:
                callback(event.data)
        raise WardenError("the server's stream ended before the command's exit status; run it again")

    def install(self, packages: Sequence[str], *, node: bool = False, timeout: float = 1800.0) -> dict[str, Any]:
        """Add Python packages (or npm ones, `node`) to the workspace, installed in its sandbox from the
        indexes the server allows (needs write and execute); what was installed and recorded."""
        if isinstance(packages, str):
            raise InvalidInput("packages is a list, e.g. ['requests>=2']")
        result: dict[str, Any] = self.client.request(
            "POST", f"/v1/workspaces/{self.name}/install", json={"packages": list(packages), "node": node},
            timeout=httpx.Timeout(self.client._timeout, read=timeout + 30.0)).json()
        return result

    def checkpoint(self, message: str = "") -> dict[str, Any]:
        """Save the workspace's content as a checkpoint (needs write on the whole workspace); its
        `id`, `files`, `size`. Rolling back to it is the person's (`warden rollback NAME ID`)."""
        result: dict[str, Any] = self.client.request(
            "POST", f"/v1/workspaces/{self.name}/checkpoints", json={"message": message}).json()
        return result

    def checkpoints(self) -> list[dict[str, Any]]:
        """The workspace's checkpoints, newest first (needs read on the whole workspace)."""
        result: list[dict[str, Any]] = self.client.request("GET", f"/v1/workspaces/{self.name}/checkpoints").json()
        return result

    def grant(self, bot: str, permissions: Sequence[str], *, zones: Sequence[str] | None = None,
              secrets: Sequence[str] = (), ttl: str | None = None, max_ttl: str | None = None,
              domains: Sequence[str] = ()) -> IssuedGrant:
        """Mint a child grant for `bot` (needs admin); it is never wider than this token's grant.
        `domains`: what its commands may ask to reach, within this grant's domains."""
        body: dict[str, Any] = {"bot": bot, "permissions": list(permissions), "secrets": list(secrets)}
        if domains:
            body["domains"] = list(domains)
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
                           parent=data.get("parent"), raw={k: v for k, v in data.items() if k != "token"},
                           domains=tuple(data.get("domains") or ()))

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
