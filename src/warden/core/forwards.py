"""Forwarding a port of a live sandbox to the host (pure): what `warden forward` may listen on,
which ports it may reach, whose sandbox it reaches, and what it counted.

A live sandbox has a network namespace of its own, so a dev server a bot starts there
(`python -m http.server 8000`) answers only that sandbox's commands. `warden forward NAME PORT`
listens on the host's loopback and relays each connection it accepts into the live sandbox of
one principal of that workspace (the person's, or a bot's grant), as E2B's `get_host` and
Daytona's preview URLs do for theirs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from warden.core.errors import Denied, InvalidInput
from warden.core.tokens import ACCESSOR_PREFIX

__all__ = [
    "MAX_CONNECTIONS",
    "Connection",
    "ForwardCounts",
    "Reach",
    "allowed_ports",
    "check_port",
    "parse_listen",
    "parse_port",
]

# Connections one forward relays at once; more wait in the listener's backlog.
MAX_CONNECTIONS = 32


class Connection(Protocol):
    """A connection into a sandbox, as a forward relays it (a socket, which the core does not import)."""

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> None: ...

    def shutdown(self, how: int, /) -> None: ...

    def close(self) -> None: ...


def parse_port(text: str | int, what: str = "port") -> int:
    """A TCP port, 1-65535; InvalidInput otherwise."""
    try:
        port = int(str(text).strip(), 10)
    except ValueError:
        raise InvalidInput(f"bad {what} {str(text)[:40]!r}: give a number from 1 to 65535") from None
    if not 1 <= port <= 65535:
        raise InvalidInput(f"bad {what} {port}: give a number from 1 to 65535")
    return port


def allowed_ports(entries: Iterable[str]) -> tuple[range, ...]:
    """`sandbox.forward_ports` read: each entry a port (`8000`) or a range (`3000-3999`)."""
    ranges = []
    for entry in entries:
        low, dash, high = str(entry).partition("-")
        first = parse_port(low, "port in sandbox.forward_ports")
        last = parse_port(high, "port in sandbox.forward_ports") if dash else first
        if last < first:
            raise InvalidInput(f"bad range {entry!r} in sandbox.forward_ports: write the lower port first")
        ranges.append(range(first, last + 1))
    return tuple(ranges)


def check_port(port: int, allowed: Sequence[range]) -> int:
    """`port` when the settings let a forward reach it; Denied (rule `forward.port`) otherwise."""
    if any(port in r for r in allowed):
        return port
    said = ", ".join(f"{r.start}" if len(r) == 1 else f"{r.start}-{r.stop - 1}" for r in allowed) or "none"
    if port < 1024:
        # Widening the setting would not help: a command in the sandbox holds no capability, so no
        # server there listens below 1024.
        raise Denied(f"port {port} is not one a forward may reach, and no server in the sandbox can listen on it "
                     "(its commands hold no capability to take a port below 1024); have the server listen on "
                     f"one from 1024 up (e.g. 8080) and forward that (sandbox.forward_ports: {said})",
                     rule="forward.port")
    raise Denied(f"port {port} is not one a forward may reach (sandbox.forward_ports: {said}); "
                 f"`warden config set sandbox.forward_ports` changes it", rule="forward.port")


def parse_listen(text: str | None, port: int) -> tuple[str, int]:
    """Where the forward listens: `--listen [HOST:]PORT` (HOST a loopback address, 127.0.0.1 when
    not said; PORT 0 for any free one), by default 127.0.0.1 and the sandbox's own port. Never
    another interface: whoever reaches it reaches the bot's server as the person would."""
    if text is None:
        return "127.0.0.1", port
    host, colon, given = text.rpartition(":")
    if not colon:
        host, given = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise InvalidInput(f"bad --listen {text!r}: give PORT or HOST:PORT with HOST a loopback address "
                           "(127.0.0.1, ::1)") from None
    if not address.is_loopback:
        raise Denied(f"--listen {text!r} is not a loopback address: a forward listens on this host alone "
                     "(127.0.0.1 or ::1)", rule="forward.listen")
    listen_port = 0 if given.strip() == "0" else parse_port(given, "--listen port")
    return str(address), listen_port


@dataclass(frozen=True)
class Reach:
    """Whose live sandbox a forward reaches, as `--as` said it: the person's (`user`, the
    default), a bot's (its name: any of its grants on the workspace) or one grant's (its
    accessor, `acc_…`)."""

    said: str = "user"

    @classmethod
    def of(cls, text: str | None) -> Reach:
        said = (text or "user").strip()
        if not said or any(c in said for c in "@: \t\n"):
            raise InvalidInput(f"bad --as {said[:40]!r}: give `user`, a bot's name or a grant's accessor (acc_…)")
        return cls(said)

    def matches(self, principal: str) -> bool:
        """Whether a live sandbox of `principal` (`user`, `bot:NAME@acc_…`) is one this reaches."""
        if self.said == "user":
            return principal == "user"
        name, at, accessor = principal.removeprefix("bot:").partition("@")
        if not principal.startswith("bot:") or not at:
            return False
        return accessor == self.said if self.said.startswith(ACCESSOR_PREFIX) else name == self.said

    def who(self) -> str:
        """Whose live sandbox, in a sentence: `no live sandbox of {who} runs in 'web'`."""
        if self.said == "user":
            return "yours"
        if self.said.startswith(ACCESSOR_PREFIX):
            return f"grant {self.said}"
        return f"bot {self.said!r}"


@dataclass
class ForwardCounts:
    """What one forward relayed, for its `forward.close` event and its last line."""

    connections: int = 0  # accepted from the host
    relayed: int = 0  # of those, connected into the sandbox
    refused: int = 0  # nothing listened there, no live sandbox, or too many at once
    bytes_in: int = 0  # host → sandbox
    bytes_out: int = 0  # sandbox → host

    def to_json(self) -> dict[str, int]:
        return {"connections": self.connections, "relayed": self.relayed, "refused": self.refused,
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out}
