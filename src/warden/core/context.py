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
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from warden.core.errors import InvalidInput, NotFound

__all__ = ["MAX_HISTORY", "MAX_SNAPSHOTS", "StateSnapshot", "TerminalContext", "branch_of_head", "check_label",
           "check_variables",
           "export_blob", "match_workspace", "parse_blob", "restore_lines"]

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


# -- a workspace's saved working state (`warden ws snapshot|restore|export|import`) -----------------

MAX_SNAPSHOTS = 50
MAX_BLOB = 256 * 1024
EXPORT_KIND = "warden-workspace-state/1"
# Names that look like they hold a credential: never saved, whatever the person asks.
_SECRETISH = re.compile(r"TOKEN|SECRET|PASSW|PASS($|_)|PWD|CREDENTIAL|PRIVATE|(^|_)KEY($|_)|APIKEY|AUTH|"
                        r"(^|_)PAT($|_)|DSN|WEBHOOK|COOKIE|SESSION|_URL$|^OPENAI$", re.IGNORECASE)
# Values that are credentials whatever their name (GitHub, OpenAI/Anthropic, Slack, AWS keys, URLs
# with a password).
_SECRET_VALUE = re.compile(r"^(ghp_|gho_|ghs_|github_pat_|sk-|xox[abpr]-|AKIA)|://[^/@\s]*:[^/@\s]*@")
# Variables that steer the shell or what it runs: restoring one is running code (an imported
# state could carry it), so a saved state never holds them.
_STEERING = re.compile(r"^(PATH|IFS|ENV|BASH_ENV|PROMPT_COMMAND|PS[0-9]|ZDOTDIR|CDPATH|SHELL|HOME|TERM|"
                       r"PYTHON[A-Z]+|NODE_OPTIONS|PERL5?LIB|PERL5OPT|RUBYOPT|RUBYLIB|LD_[A-Z_]*|DYLD_[A-Z_]*|"
                       r"GIT_[A-Z_]*|fish_[A-Za-z_]*|WARDEN_[A-Z_]*)$")
MAX_SAVED_VALUES = 16 * 1024  # bytes of variable values one saved state may hold
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class StateSnapshot:
    """Where the person was in a workspace: folder (workspace-relative), chosen variables, branch."""

    label: str
    created: str
    cwd: str = "/"
    env: Mapping[str, str] = field(default_factory=dict)
    git_branch: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"label": self.label, "created": self.created, "cwd": self.cwd, "env": dict(self.env),
                "git_branch": self.git_branch}

    @classmethod
    def from_json(cls, doc: object) -> StateSnapshot:
        if not isinstance(doc, Mapping):
            raise InvalidInput("a saved state is an object")
        label, created, cwd, env, branch = (doc.get("label"), doc.get("created"), doc.get("cwd", "/"),
                                            doc.get("env", {}), doc.get("git_branch"))
        if not isinstance(label, str) or not _LABEL.match(label) or not isinstance(created, str):
            raise InvalidInput(f"bad saved state label {label!r}")
        if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd or "/../" in f"{cwd}/":
            raise InvalidInput(f"bad saved folder {cwd!r}")
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str) and "\0" not in v
                for k, v in env.items()):
            raise InvalidInput("bad saved variables")
        check_variables(list(env), values=env)
        if branch is not None and (not isinstance(branch, str) or len(branch) > 255):
            raise InvalidInput("bad saved branch")
        return cls(label, created, cwd, dict(env), branch)


def branch_of_head(head: bytes | None) -> str | None:
    """The branch a repository's `.git/HEAD` names (None: detached, missing or unreadable)."""
    text = (head or b"").decode("utf-8", "replace").strip()
    return text.removeprefix("ref: refs/heads/") if text.startswith("ref: refs/heads/") else None


def check_label(label: str) -> str:
    if not _LABEL.match(label):
        raise InvalidInput(f"bad label {label!r}: 1-64 letters, digits, '.', '_' or '-'")
    return label


def check_variables(names: Sequence[str], secrets: Collection[str] = (),
                    values: Mapping[str, str] | None = None) -> None:
    """Variables a saved state may keep: never a Warden secret's name or one that looks like a
    credential (by name or by value), never one that steers the shell, within a size."""
    for name in names:
        if not _ENV_NAME.match(name):
            raise InvalidInput(f"bad variable name {name!r}")
        if name in secrets or _SECRETISH.search(name) or (values and _SECRET_VALUE.search(values.get(name, ""))):
            raise InvalidInput(f"{name} looks like a secret; a saved state never keeps one (secrets go in "
                               "`warden secret set`)")
        if _STEERING.match(name):
            raise InvalidInput(f"{name} steers the shell or what it runs; a saved state never keeps it")
    if values is not None and sum(len(v) for v in values.values()) > MAX_SAVED_VALUES:
        raise InvalidInput(f"the variables' values are over {MAX_SAVED_VALUES} bytes; keep fewer or shorter ones")


def restore_lines(root: str, snapshot: StateSnapshot, shell: str = "sh") -> str:
    """Shell lines that put a shell back where `snapshot` was (for `eval`, or `warden shell-init`)."""
    import shlex

    def fish_quote(text: str) -> str:
        # fish reads \\ and \' as escapes inside single quotes, where POSIX shells read none:
        # shlex.quote("a\\") would leave fish an open quote (and what follows, code).
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    quote = fish_quote if shell == "fish" else shlex.quote
    folder = root.rstrip("/") + (snapshot.cwd if snapshot.cwd != "/" else "")
    lines = [f"cd -- {quote(folder)}"]
    for name, value in snapshot.env.items():
        lines.append(f"set -gx {name} {quote(value)}" if shell == "fish" else f"export {name}={quote(value)}")
    return "\n".join(lines)


def export_blob(state: Mapping[str, object]) -> str:
    import base64
    import json

    text = base64.b64encode(json.dumps({"kind": EXPORT_KIND, **state}, sort_keys=True).encode()).decode()
    if len(text) > MAX_BLOB:
        raise InvalidInput("this workspace's state is too large to export")
    return text


def parse_blob(text: str) -> dict[str, object]:
    """What `export_blob` made, checked; InvalidInput for anything else."""
    import base64
    import binascii
    import json

    raw = text.strip()
    if len(raw) > MAX_BLOB:
        raise InvalidInput(f"an exported state is at most {MAX_BLOB} characters")
    try:
        doc = json.loads(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise InvalidInput("not an exported workspace state (expected `warden ws export` output on stdin)") from None
    if not isinstance(doc, dict) or doc.get("kind") != EXPORT_KIND:
        raise InvalidInput("not an exported workspace state (expected `warden ws export` output on stdin)")
    return doc
