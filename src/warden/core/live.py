"""Live sandboxes and their background processes (pure): names, keys, records, and the wire
protocol Warden speaks with the supervisor inside a live sandbox.

A live sandbox is one long-lived sandbox of one workspace for one principal (the person, or one
grant: the audit actor `bot:NAME@acc_…`) and one network policy. A small supervisor of ours runs
inside it, with the bot's rights only, and starts commands there on request over a Unix socket
that only Warden can reach. Commands of one principal with one network policy share it (a server
started with `--detach` is reached on 127.0.0.1 by that principal's next command); commands of
another principal or network policy never do.

Everything the supervisor says is untrusted input: it runs beside the bot's code. Its answers
arrive as length-prefixed JSON frames of bounded size (MAX_ANSWER), and each answer is parsed
here into a typed value, or refused as `BadAnswer`, before Warden acts on it: ids must have our
shape, numbers their range, lists their bound, output bytes their cap.
"""

from __future__ import annotations

import binascii
import json
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from warden.core.errors import InvalidInput, Unavailable
from warden.core.runs import Usage

SUPERVISOR_PATH = "/etc/warden/supervisor.py"  # where a live sandbox runs its supervisor, inside it

__all__ = [
    "FRAME_HEADER",
    "MAX_ANSWER",
    "MAX_BACKGROUND",
    "MAX_LISTED",
    "MAX_REQUEST",
    "PROCESS_ID",
    "RING_BYTES",
    "SANDBOX_ID",
    "STATUSES",
    "SUPERVISOR_PATH",
    "BadAnswer",
    "Chunk",
    "Exited",
    "Full",
    "LiveProcess",
    "LiveSandbox",
    "Logs",
    "NotListening",
    "ProcessView",
    "Spawned",
    "StartedSandbox",
    "Supervised",
    "check_process_id",
    "complete_process_id",
    "decode_frame_length",
    "encode_frame",
    "exit_status",
    "network_key",
    "parse_chunk_event",
    "parse_connected",
    "parse_exit",
    "parse_exit_event",
    "parse_listing",
    "parse_logs",
    "parse_ok",
    "parse_spawned",
    "parse_waited",
    "plan_fingerprint",
    "signal_number",
    "too_many_background",
]

# A background process's id (its run id in the audit log) and a live sandbox's id.
PROCESS_ID = re.compile(r"^[0-9a-f]{16}$")
PROCESS_ID_START = re.compile(r"^[0-9a-f]{1,16}$")
SANDBOX_ID = re.compile(r"^sbx_[0-9a-f]{16}$")
# Output kept per stream of one background process, by the supervisor (its oldest bytes drop).
RING_BYTES = 1 << 20
# Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
FRAME_HEADER = 4
MAX_REQUEST = 1 << 20  # what Warden sends (argv and environment of one command)
# What Warden reads from a supervisor: a logs answer carries two rings in base64 (4/3 of 2 MiB).
MAX_ANSWER = 4 << 20
MAX_LISTED = 256  # processes one supervisor may list
# Background processes a live sandbox keeps at once (its supervisor's MAX_PROCS: it refuses more).
MAX_BACKGROUND = 64
STATUSES = ("starting", "running", "exited", "killed", "lost")
_SUPERVISED_STATUSES = ("starting", "running", "exited", "failed")
_MAX_PID = 1 << 22  # the kernel's PID_MAX_LIMIT
_SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15,
            "CONT": 18, "STOP": 19}


class BadAnswer(Exception):
    """A supervisor's answer that is not what the protocol allows (too big, malformed, out of range)."""


class Full(Exception):
    """A supervisor's refusal of a background start: it keeps MAX_BACKGROUND processes already.
    An answer of the protocol, not a bad one: the sandbox is sound and goes on."""


class NotListening(Exception):
    """A supervisor's answer to `connect`: nothing accepted a connection on that port in its
    sandbox (in time). An answer of the protocol, not a bad one: the sandbox goes on."""


class HungUpFirst(Unavailable):
    """A foreground command's live sandbox refused its connection or hung up before it answered
    the command's spawn (rule `live.unreachable`): nothing of the command ran there. Its
    supervisor has ended or is ending: an idle stop meets a command sent just as it ends (on a
    kept connection, or a connect after its last look), so a fresh sandbox is to run it."""

    retry = False  # set where its sandbox was stopped for it: the start may go to a new one


def too_many_background(workspace: str) -> str:
    """Why a background start past MAX_BACKGROUND is refused, and the way out."""
    return (f"the live sandbox of {workspace!r} already runs {MAX_BACKGROUND} background processes, the most one "
            f"keeps; `warden ps {workspace}` lists them and `warden kill {workspace} ID` ends one")


# -- keys ------------------------------------------------------------------------------------------
def network_key(policy: Mapping[str, Sequence[str]] | None) -> str:
    """The network part of a live sandbox's key: "none", or a digest of the policy (its JSON)."""
    if policy is None:
        return "none"
    import hashlib

    text = json.dumps({k: sorted(v) for k, v in policy.items()}, sort_keys=True)
    return "net-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def plan_fingerprint(parts: Mapping[str, object]) -> str:
    """A digest of what a sandbox mounts and how (paths, modes, network): a live sandbox started
    under another plan (a path denied since, a layer added) is stopped rather than reused."""
    import hashlib

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=list).encode()).hexdigest()[:32]


def check_process_id(text: str) -> str:
    """`text` when it has the shape of a process id (16 hex digits); InvalidInput otherwise."""
    if not isinstance(text, str) or not PROCESS_ID.fullmatch(text):
        raise InvalidInput(f"bad process id {str(text)[:40]!r}: give the id `warden ps` shows (16 hex digits)")
    return text


def complete_process_id(text: str, ids: Iterable[str]) -> str | None:
    """The one id of `ids` that `text` begins, as docker takes a container's: `warden logs ws 9d3b`;
    None when none does. `ids` are the ones the asker may see (a bot's own): a prefix never reaches
    another's process, nor says it exists. Several: InvalidInput naming them, acting on none."""
    if not isinstance(text, str) or not PROCESS_ID_START.fullmatch(text):
        raise InvalidInput(f"bad process id {str(text)[:40]!r}: give the id `warden ps` shows (16 hex digits), "
                           "or enough of its start to tell it from the others")
    if PROCESS_ID.fullmatch(text):
        return text
    found = [i for i in ids if i.startswith(text)]
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise InvalidInput(f"process id {text!r} is ambiguous: it begins {shown}; give more of it")
    return found[0] if found else None


def signal_number(name: str | int) -> int:
    """A signal given as TERM, SIGTERM or 15 (only those a person sends to a process)."""
    if isinstance(name, int) and not isinstance(name, bool):
        number = name
    else:
        text = str(name).strip().upper().removeprefix("SIG")
        number = int(text) if text.isdigit() else _SIGNALS.get(text, 0)
    if number not in _SIGNALS.values():
        raise InvalidInput(f"bad signal {name!r}: use one of {', '.join(_SIGNALS)} (or its number)")
    return number


# -- registry records ----------------------------------------------------------------------------
class LiveSandbox(NamedTuple):
    """A live sandbox as the registry keeps it, so any Warden process of its node finds it."""

    id: str
    workspace: str
    workspace_id: str
    principal: str  # whose commands it runs: "user", or "bot:NAME@acc_…"
    network: str  # network_key of its policy
    fingerprint: str  # plan_fingerprint of its mounts
    fence: int  # the workspace lease's fencing number when it started: a change means its lease is lost
    node: str
    pid: int  # bwrap on the host
    pid_start: int
    supervisor_pid: int  # the supervisor, as the host numbers it
    supervisor_start: int
    socket: str  # the supervisor's socket in Warden's home
    started_at: str
    last_used: str
    meta: Mapping[str, object]  # the host's details (init pid, cgroups, run folder, seccomp, …)


class StartedSandbox(NamedTuple):
    """What the host reports of a live sandbox it has just started (the row's host part)."""

    pid: int
    pid_start: int
    supervisor_pid: int
    supervisor_start: int
    socket: str
    meta: Mapping[str, object]


class LiveProcess(NamedTuple):
    """A background process as the registry keeps it: its record from start to outcome."""

    id: str
    sandbox_id: str
    workspace: str
    principal: str
    bot: str  # the bot whose API exec slots it takes (its grant chain's minter); "" for the person
    argv: tuple[str, ...]
    status: str  # one of STATUSES
    exit_code: int | None
    signal: int | None
    timed_out: bool
    started_at: str
    ended_at: str | None
    node: str
    meta: Mapping[str, object]  # the host's details (its pid, cgroups, starter, deadline)

    @property
    def running(self) -> bool:
        return self.status in ("starting", "running")


@dataclass(frozen=True)
class ProcessView:
    """A background process as `warden ps` and the API show it."""

    id: str
    workspace: str
    cmd: tuple[str, ...]
    status: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    started_at: str
    ended_at: str | None
    principal: str
    # What it has used so far, while it runs (its outcome's is in the audit's `run` event);
    # None when not measured (ended, another node's, or nothing here says).
    usage: Usage | None = None
    stopped_by: str | None = None  # why Warden stopped its sandbox under it (killed or lost)

    @classmethod
    def of(cls, process: LiveProcess, usage: Usage | None = None) -> ProcessView:
        stopped_by = process.meta.get("stopped_by")
        return cls(process.id, process.workspace, process.argv, process.status, process.exit_code,
                   process.signal, process.timed_out, process.started_at, process.ended_at, process.principal,
                   usage, stopped_by if isinstance(stopped_by, str) and not process.running else None)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "id": self.id, "cmd": list(self.cmd), "status": self.status, "exit_code": self.exit_code,
            "signal": self.signal, "timed_out": self.timed_out, "started_at": self.started_at,
            "ended_at": self.ended_at, "usage": self.usage.to_json() if self.usage is not None else None}
        if self.stopped_by is not None:
            data["stopped_by"] = self.stopped_by
        return data


@dataclass(frozen=True)
class Logs:
    """What a background process printed, as much as the ring kept (`dropped`: bytes lost at the front)."""

    stdout: bytes
    stderr: bytes
    dropped_stdout: int = 0
    dropped_stderr: int = 0

    def to_json(self) -> dict[str, object]:
        return {"stdout": self.stdout.decode("utf-8", "replace"), "stderr": self.stderr.decode("utf-8", "replace"),
                "dropped": {"stdout": self.dropped_stdout, "stderr": self.dropped_stderr}}


# -- the wire ------------------------------------------------------------------------------------
def encode_frame(message: Mapping[str, object]) -> bytes:
    """One frame to the supervisor."""
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_REQUEST:
        raise InvalidInput(f"the command and its environment take {len(data)} bytes; at most {MAX_REQUEST} "
                           "can be sent to a live sandbox")
    return struct.pack(">I", len(data)) + data


def decode_frame_length(header: bytes, limit: int = MAX_ANSWER) -> int:
    """The length a frame header announces; BadAnswer past `limit`."""
    if len(header) != FRAME_HEADER:
        raise BadAnswer("a truncated frame header")
    (length,) = struct.unpack(">I", header)
    if length > limit:
        raise BadAnswer(f"a frame of {length} bytes, over the limit of {limit}")
    return int(length)


def _object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: `[[[[…` nested past the stack
        raise BadAnswer("an answer that is not JSON") from None
    if not isinstance(value, dict):
        raise BadAnswer("an answer that is not a JSON object")
    return value


def _int(value: object, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadAnswer(f"{what} out of range")
    return int(value)


def _opt_int(value: object, low: int, high: int, what: str) -> int | None:
    return None if value is None else _int(value, low, high, what)


def _number(value: object, low: float, high: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= float(value) <= high:
        raise BadAnswer(f"{what} out of range")
    return float(value)


def _bytes(value: object, cap: int, what: str) -> bytes:
    if not isinstance(value, str) or len(value) > (cap + 2) // 3 * 4:
        raise BadAnswer(f"{what} is not base64 of at most {cap} bytes")
    import base64

    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadAnswer(f"{what} is not base64") from None
    return data


def _checked(data: bytes) -> dict[str, Any]:
    """An answer object; its `ok: false` as BadAnswer carrying the supervisor's reason (bounded)."""
    answer = _object(data)
    if answer.get("ok") is not True:
        if answer.get("full") is True:
            raise Full
        error = answer.get("error")
        raise BadAnswer(f"refused: {error[:200]}" if isinstance(error, str) else "an answer without ok")
    return answer


def parse_ok(data: bytes) -> None:
    _checked(data)


def parse_connected(data: bytes, port: int) -> None:
    """The answer to `connect` (the socket itself comes beside it, checked by the adapter):
    NotListening when the supervisor found nothing on `port`; BadAnswer for anything else but a
    yes for that very port."""
    answer = _object(data)
    if answer.get("ok") is False and answer.get("refused") is True:
        raise NotListening
    answer = _checked(data)
    if answer.get("port") != port or isinstance(answer.get("port"), bool):
        raise BadAnswer("a connection to another port than the one asked for")


class Spawned(NamedTuple):
    """The answer to `spawn`: the new process's pid inside the sandbox, whether it joined the
    cgroups whose `tasks` files came with the request itself, and whether it waits for `go`
    (a supervisor of the first protocols holds every command; one of protocol 3 only when it
    was asked to, or could not start the command with its limits in place)."""

    pid: int
    joined: bool
    held: bool = True


def parse_spawned(data: bytes) -> Spawned:
    answer = _checked(data)
    joined, held = answer.get("joined", False), answer.get("held", True)
    if not isinstance(joined, bool) or not isinstance(held, bool):
        raise BadAnswer("joined or held is not true or false")
    return Spawned(_int(answer.get("pid"), 2, _MAX_PID, "pid"), joined, held)


@dataclass(frozen=True)
class Exited:
    """How a process ended, as the supervisor saw it."""

    exit_code: int
    signal: int | None
    timed_out: bool = False
    # What it used (wait4), when said: a measurement, not part of how it ended (not compared).
    cpu_ms: int | None = field(default=None, compare=False)  # the process and all it reaped
    maxrss_kib: int | None = field(default=None, compare=False)  # its largest process's peak


def exit_status(exit_code: int, signal: int | None) -> tuple[int, int | None]:
    """The status as a shell reports it (128+N for signal N) and the signal."""
    return (128 + signal, signal) if signal is not None else (exit_code, None)


def parse_exit(value: object) -> Exited:
    """An `exit` event (or the end of a listed process)."""
    if not isinstance(value, dict):
        raise BadAnswer("an exit that is not an object")
    signal = _opt_int(value.get("signal"), 1, 64, "signal")
    code = _int(value.get("exit_code"), 0, 255, "exit_code") if signal is None else 0
    timed_out = value.get("timed_out", False)
    if not isinstance(timed_out, bool):
        raise BadAnswer("timed_out is not a boolean")
    status, sig = exit_status(code, signal)
    # A day of CPU on every core and a terabyte of memory bound what a supervisor may claim.
    cpu = _opt_int(value.get("cpu_ms"), 0, 86_400_000 * 1024, "cpu_ms")
    rss = _opt_int(value.get("maxrss_kib"), 0, 1 << 30, "maxrss_kib")
    return Exited(status, sig, timed_out, cpu, rss)


def parse_exit_event(data: bytes) -> Exited:
    """The `exit` event a foreground command's caller gets."""
    event = _object(data)
    if event.get("event") != "exit":
        raise BadAnswer("an event Warden does not know")
    return parse_exit(event)


@dataclass(frozen=True)
class Supervised:
    """One process as its supervisor lists it."""

    id: str
    pid: int
    status: str  # starting, running, exited, failed (never released)
    exited: Exited | None
    ended_ago: float | None  # seconds since it ended
    background: bool


def _supervised(value: object) -> Supervised:
    if not isinstance(value, dict):
        raise BadAnswer("a listed process that is not an object")
    pid_id = value.get("id")
    if not isinstance(pid_id, str) or not PROCESS_ID.fullmatch(pid_id):
        raise BadAnswer("a process id of the wrong shape")
    status = value.get("status")
    if status not in _SUPERVISED_STATUSES:
        raise BadAnswer("a process status Warden does not know")
    exited = parse_exit(value) if status == "exited" else None
    ago = value.get("ended_ago")
    background = value.get("background", True)
    if not isinstance(background, bool):
        raise BadAnswer("background is not a boolean")
    return Supervised(pid_id, _int(value.get("pid"), 2, _MAX_PID, "pid"), str(status), exited,
                      None if ago is None else _number(ago, 0, 10 * 365 * 86400, "ended_ago"), background)


def parse_listing(data: bytes) -> list[Supervised]:
    """The answer to `list`: at most MAX_LISTED processes, each well formed."""
    listed = _checked(data).get("processes")
    if not isinstance(listed, list) or len(listed) > MAX_LISTED:
        raise BadAnswer("a process list that is not a list of at most 256")
    return [_supervised(item) for item in listed]


def parse_waited(data: bytes) -> Supervised:
    """The answer to `wait`: the process as it is now (ended, or still running at the deadline)."""
    return _supervised(_checked(data).get("process"))


def parse_logs(data: bytes, ring: int = RING_BYTES) -> tuple[Logs, Exited | None]:
    """The answer to `logs`: the rings' contents, and how the process ended if it did."""
    answer = _checked(data)
    dropped = answer.get("dropped", [0, 0])
    if not isinstance(dropped, list) or len(dropped) != 2:
        raise BadAnswer("dropped is not a pair")
    ended = answer.get("exit")
    return (Logs(_bytes(answer.get("stdout", ""), ring, "stdout"), _bytes(answer.get("stderr", ""), ring, "stderr"),
                 _int(dropped[0], 0, 1 << 62, "dropped"), _int(dropped[1], 0, 1 << 62, "dropped")),
            None if ended is None else parse_exit(ended))


class Chunk(NamedTuple):
    """Output a followed process printed, or (`exited` set) its end."""

    stream: str  # stdout or stderr ("" with exited)
    data: bytes
    exited: Exited | None = None


def parse_chunk_event(data: bytes, ring: int = RING_BYTES) -> Chunk:
    """One event of a followed process: an `output` chunk or its `exit`."""
    event = _object(data)
    kind = event.get("event")
    if kind == "exit":
        return Chunk("", b"", parse_exit(event))
    if kind != "output" or event.get("stream") not in ("stdout", "stderr"):
        raise BadAnswer("an event Warden does not know")
    return Chunk(str(event["stream"]), _bytes(event.get("data"), ring, "data"))
