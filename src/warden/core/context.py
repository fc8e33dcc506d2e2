"""A terminal's working context (pure): its current workspace and the way back and forward.

Each terminal (`WARDEN_TERMINAL`, else its session) has a current workspace, set with `warden
ws set NAME` (or `warden @NAME`), and a history like a browser's: `ws back` and `ws forward`
move along it, and setting a workspace after going back drops the forward part. Commands that
take a workspace use the current one when none is named (`-w/--workspace NAME` or their own
NAME argument). Matching a typed name: the exact name, else the one workspace whose name starts
with it, else the one that contains it; several → a clear choice, never a guess.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from warden.core.errors import InvalidInput, NotFound

__all__ = ["MAX_HISTORY", "TerminalContext", "match_workspace"]

MAX_HISTORY = 50


@dataclass(frozen=True)
class TerminalContext:
    """`history` oldest first; `position` indexes the current entry (-1: none yet)."""

    history: tuple[str, ...] = ()
    position: int = -1
    recent: tuple[str, ...] = field(default=())  # distinct names, most recent first (`ws history`)

    @property
    def current(self) -> str | None:
        return self.history[self.position] if 0 <= self.position < len(self.history) else None

    def set(self, name: str) -> TerminalContext:
        if name == self.current:
            return replace(self, recent=_front(self.recent, name))
        kept = (*self.history[: self.position + 1], name)[-MAX_HISTORY:]
        return TerminalContext(kept, len(kept) - 1, _front(self.recent, name))

    def back(self) -> TerminalContext:
        if self.position <= 0:
            raise InvalidInput("no earlier workspace in this terminal's history; see `warden ws history`")
        return replace(self, position=self.position - 1, recent=_front(self.recent, self.history[self.position - 1]))

    def forward(self) -> TerminalContext:
        if self.position + 1 >= len(self.history):
            raise InvalidInput("no later workspace in this terminal's history (`ws forward` follows `ws back`)")
        return replace(self, position=self.position + 1, recent=_front(self.recent, self.history[self.position + 1]))

    def to_json(self) -> dict[str, object]:
        return {"history": list(self.history), "position": self.position, "recent": list(self.recent)}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> TerminalContext:
        """Read back what `to_json` wrote; anything malformed gives an empty context, not an error
        (the file is Warden's own, but a person may have edited it)."""
        history, position, recent = doc.get("history"), doc.get("position"), doc.get("recent", [])
        if (not isinstance(history, list) or not all(isinstance(h, str) for h in history)
                or not isinstance(position, int) or not -1 <= position < max(len(history), 0)
                or not isinstance(recent, list) or not all(isinstance(r, str) for r in recent)):
            return cls()
        return cls(tuple(history[-MAX_HISTORY:]), min(position, len(history[-MAX_HISTORY:]) - 1),
                   tuple(recent[:MAX_HISTORY]))


def _front(recent: Sequence[str], name: str) -> tuple[str, ...]:
    return (name, *(r for r in recent if r != name))[:MAX_HISTORY]


def match_workspace(typed: str, names: Sequence[str], *, exact_only: bool = False) -> str:
    """The workspace `typed` means among `names`. `exact_only` for what destroys or changes a
    lot: no guessing there."""
    if typed in names:
        return typed
    if not exact_only:
        for found in ([n for n in names if n.startswith(typed)], [n for n in names if typed in n]):
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                shown = ", ".join(sorted(found)[:8]) + (" …" if len(found) > 8 else "")
                raise InvalidInput(f"{typed!r} matches several workspaces: {shown}; give more of the name")
    near = difflib.get_close_matches(typed, names, n=3)
    hint = f"; did you mean {' or '.join(near)}?" if near else "; see `warden list`"
    raise NotFound(f"no workspace {typed!r}{hint}")
