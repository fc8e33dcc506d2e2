"""How many JSON values a request body would make the server build, counted before it is parsed (pure).

A body within api.max_body can still cost the server far more than its size: 16 MiB of `[],`
is five million lists, which json.loads builds while the garbage collector walks all of them
again and again (47 s of a server's event loop and 540 MiB, measured), before any model sees
that `cmd` takes at most 4096 strings. What Warden's requests legitimately carry is a few
thousand values at most (argv, environment, package lists); the large part of a large body is
one string (stdin, a file's text). So a body is measured by its containers and separators
outside strings, in a few passes of `bytes.count`, and refused past a bound before it is parsed.
"""

from __future__ import annotations

import json
import re

__all__ = ["MAX_JSON_VALUES", "json_values"]

# Far above anything a request of the API or MCP needs (an exec's 4096 arguments and its
# environment), far below what makes parsing costly (a hundred thousand small lists is ~7 MiB).
MAX_JSON_VALUES = 100_000

_STRING = re.compile(rb'"[^"]*"')


def json_values(body: bytes, limit: int = MAX_JSON_VALUES) -> int | None:
    """An upper bound of the values `body` holds when it is more than `limit`, else None.

    Counted: the `[`, `{` and `,` outside strings, and the strings. Cheap first: those bytes
    anywhere (inside strings too) bound the count from above, and most bodies stop there. Only
    a body past it has its strings taken out, which costs a pass per string: so strings are
    counted first (their quotes, escaped ones aside) and a body with too many stops there.
    Not a validator: a malformed body passes (json.loads refuses it next, cheaply); nor exact
    for one: its count may be off by its malformation, never by what a string holds.
    """
    encoding = json.detect_encoding(body)
    if encoding not in ("utf-8", "utf-8-sig"):
        # json.loads takes UTF-16 and UTF-32 bodies too, whose code units may hold a `"` byte
        # inside a string (U+0122 is 22 01 in UTF-16-LE): counted as bytes, 16 MiB of `[],`
        # between two such strings looked like one string and held the event loop for seconds.
        # Counted as the UTF-8 they decode to (a body that does not decode is refused by
        # json.loads before it builds anything).
        try:
            body = body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        except UnicodeError:
            return None
    rough = body.count(b"[") + body.count(b"{") + body.count(b",")
    quotes = body.count(b'"')
    if rough + quotes // 2 <= limit:
        return None
    # Inside a JSON string a backslash escapes the next character: pairs of backslashes first
    # (an escaped backslash), then an escaped quote; what remains of `"` opens and closes strings.
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = plain.count(b'"') // 2
    if strings > limit:
        return strings
    outside = _STRING.sub(b"", plain) if strings else plain
    values = strings + outside.count(b"[") + outside.count(b"{") + outside.count(b",")
    return values if values > limit else None
