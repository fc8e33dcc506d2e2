"""What a model reads when Warden refuses, or when a change waits for a person.

The services word their refusals for people and the audit log, with Warden's own vocabulary
(zones, grants, rules). A model is shown a plain filesystem instead (seed 003: "zone" never
appears; a read-only folder is "read-only"), the rule that decided, and what to do next. This
module only rewords: every decision was taken by the services.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warden.core.errors import Denied, NotFound, Pending, WardenError

__all__ = ["Answer", "pending_text", "plain", "refusal_text"]


@dataclass(frozen=True)
class Answer:
    """What a tool answers: the text a model reads, and the same as structured content."""

    text: str
    data: dict[str, Any] | None = None

# The permission each tool needs from the grant (what a person would add to allow it).
NEEDS = {"exec": "execute", "process_logs": "execute", "process_kill": "execute", "read_file": "read",
         "list_directory": "read", "directory_tree": "read", "search_files": "read", "file_info": "read",
         "write_file": "write", "edit_file": "write", "delete_file": "write", "move_file": "write"}


def _folders(names: str) -> str:
    listed = [f"/{name.strip()}" for name in names.split(",") if name.strip() and name.strip() != "none"]
    return ", ".join(listed) or "none"


_REWORDINGS: tuple[tuple[re.Pattern[str], Any], ...] = (
    # The person's hint (where zone rules live) means nothing to a model, which cannot edit it.
    (re.compile(r"; a zone's rules are set in the workspace's \.warden/zones\.yaml"), ""),
    (re.compile(r"\bzone (\S+) is ro\b"), r"/\1 is read-only"),
    (re.compile(r"\bzone (\S+) blocks (\w+)"), r"/\1 does not allow \2"),
    (re.compile(r"\bzone (\S+) \((rw|ro)\)"), r"/\1 (\2)"),
    (re.compile(r"no granted zone holds (\S+) \(granted: ([^)]*)\)"),
     lambda m: f"{m[1]} is outside the folders this token may use ({_folders(m[2])})"),
    (re.compile(r"is limited to zones? ([^;]*?) and cannot reach the whole workspace"),
     lambda m: f"may use only the folders {_folders(m[1])}, not the whole workspace"),
    # The word alone, not a part of a name: `/zone/a.txt`, `zones.yaml`, a workspace `time-zones`.
    (re.compile(r"(?<![\w./\-\x00])zones(?![\w/\-\x00]|\.\w)"), "folders"),
    (re.compile(r"(?<![\w./\-\x00])zone(?![\w/\-\x00]|\.\w)"), "folder"),
)


def plain(text: str, keep: Sequence[str] = ()) -> str:
    """`text` with Warden's words for folders replaced by a filesystem's, except inside the strings
    of `keep` (the paths and workspace a model named: told back as given, "/zone/a" never "/folder/a")."""
    # Only a string holding the word can be changed by it; others stay out of the way of the patterns.
    kept = sorted({k for k in keep if "zone" in k and "\x00" not in k}, key=len, reverse=True)
    for i, k in enumerate(kept):  # a stand-in without spaces: the patterns' (\S+) still take it whole
        text = text.replace(k, f"\x00{i}\x00")
    for pattern, replacement in _REWORDINGS:
        text = pattern.sub(replacement, text)
    for i, k in enumerate(kept):
        text = text.replace(f"\x00{i}\x00", k)
    return text


def refusal_text(exc: WardenError, *, tool: str, workspace: str | None, bot: str | None,
                 keep: Sequence[str] = ()) -> str:
    """A refusal as a model should read it: what happened, the rule, what to do; the strings of
    `keep` (the call's own paths and names) as given."""
    keep = (*keep, workspace) if workspace else tuple(keep)
    rule = exc.rule or ""
    where = f"workspace {workspace}" if workspace else "this workspace"
    if isinstance(exc, Denied) and exc.message.startswith("permission denied"):
        # The services answer every grant refusal alike (nothing learned about other tokens); the
        # caller is already known here, so say which of its own limits applied.
        if rule in ("grant.none", "grant.workspace", "workspace.gone"):
            text = (f"permission denied ({rule}): this token may not use {where}. Call list_workspaces for "
                    "the workspaces you may use, or create_workspace for a new one.")
        elif rule == "grant.permission":
            needed = NEEDS.get(tool, "that permission")
            text = (f"permission denied ({rule}): your access to {where} does not include `{needed}`. Ask a "
                    f"person to grant it: `warden grant {workspace or 'WORKSPACE'} {bot or 'BOT'} "
                    f"--permissions read,write,execute`.")
        elif rule == "grant.zone":
            text = (f"permission denied (grant.folders): this token may use only some folders of {where} "
                    f"(list_directory '/' shows them), and {tool} needs the whole workspace.")
        elif rule in ("grant.revoked", "grant.parent_revoked", "grant.expired"):
            text = (f"permission denied ({rule}): this token's access was revoked or has expired. Ask a "
                    "person for a new grant.")
        elif rule == "token.not_identity":
            text = ("permission denied (token.not_identity): this token is for one workspace and cannot create "
                    "workspaces. Use the bot's identity token (from `warden bot register NAME`).")
        else:
            text = f"permission denied ({rule or 'denied'}). Ask a person to check your grant."
        return plain(text, keep)
    text = f"{exc.code}: {exc.message}"
    if rule and rule not in text:
        text += f" (rule: {rule})"
    if rule.startswith("deny: protected workspace file"):
        # The rule alone reads as if a grant could open it: none can, and the model should move on.
        text += (" Those are the workspace's own settings and metadata (its rules, .git internals, shell "
                 "start-up files): no token may change them. Put your files elsewhere in the workspace.")
    if isinstance(exc, NotFound) and tool not in ("process_logs", "process_kill"):
        text += " Use list_directory or search_files to see what is there."
    return plain(text, keep)


def pending_text(exc: Pending) -> tuple[str, dict[str, Any]]:
    """A change that waits for a person: the text and the approval as a model is shown it."""
    approval: Mapping[str, Any] = exc.approval
    shown = {k: v for k, v in approval.items() if k in (
        "id", "status", "workspace", "operation", "path", "destination", "size", "expires")}
    what = f"{approval.get('operation', 'change')} {approval.get('path', '')}".strip()
    if approval.get("destination"):
        what += f" to {approval['destination']}"
    ident = approval.get("id", "")
    text = (f"waiting for approval: {what} needs a person's approval and has NOT been done yet. Approval id: "
            f"{ident}. Ask a person to run `warden approve {ident}` (or `warden deny {ident}`); once approved, "
            "Warden makes exactly this change. Do not repeat the request meanwhile.")
    return text, shown
