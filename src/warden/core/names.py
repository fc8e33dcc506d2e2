"""Names people and bots give things: workspaces, bots, zones, templates, session ids (pure).

One rule for all of them, because each becomes a folder name, a URL path segment or a word in
the audit log: letters, digits, '.', '_' and '-', starting with a letter or digit (so never
`.`, `..`, a hidden folder or something that reads as an option), with no separator, space
or control character, and bounded in length. The whole string must match: a trailing newline
is not a name.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TypeGuard

from warden.core.errors import InvalidInput

__all__ = ["LONGEST", "check_node_name", "is_name", "name_pattern", "name_regex"]

LONGEST = 63


def name_pattern(longest: int = LONGEST) -> str:
    """The regular expression of a name of 1 to `longest` characters, unanchored (to embed in
    a larger expression, such as a URL route or a schema's `^…$` pattern)."""
    return f"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{longest - 1}}}"


@cache
def name_regex(longest: int = LONGEST) -> re.Pattern[str]:
    """`name_pattern(longest)` compiled and anchored at both ends (`match` is a full match)."""
    return re.compile(rf"(?:{name_pattern(longest)})\Z")


def is_name(value: object, longest: int = LONGEST) -> TypeGuard[str]:
    """Whether `value` is a string that is a whole name of at most `longest` characters."""
    return isinstance(value, str) and name_regex(longest).match(value) is not None


def check_node_name(name: str, *, source: str = "WARDEN_NODE") -> str:
    """A valid node name (it lands in URLs, log lines and file names), or InvalidInput. Here and
    not in core/nodes.py, whose HMAC code every command would otherwise import to start."""
    if not is_name(name):
        shown = name if len(name) <= 80 else name[:80] + "…"
        raise InvalidInput(f"bad {source} {shown!r}: use 1-63 letters, digits, '.', '_' or '-', "
                           "starting with a letter or digit")
    return name
