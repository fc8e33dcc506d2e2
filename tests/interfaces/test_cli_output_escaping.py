"""Text for a person never carries a bot's control characters to the terminal (JSON unchanged)."""

from __future__ import annotations

import json

from tests.conftest import Cli
from warden.bootstrap import App
from warden.core.echo import json_printable
from warden.interfaces.cli.output import Output, printable, table

# What a bot can put in a file path it asks for: a forged audit line and colour escapes.
FORGED = "x\n2026-01-01T00:00:00  user  fs.delete  demo:/  allow\x1b[31mRED\x1b]0;title\x07\r\t\x7f\x9b1m\u202e"


def test_warden_audit_shows_control_characters_escaped(app: App, cli: Cli) -> None:
    app.audit.record(actor="bot:mallory@acc_0", action="fs.read", target=f"demo:{FORGED}", decision="allow",
                     rule="grant.allow", result="ok")
    app.audit.record(actor="user", action="note", target="demo:after", decision="none")
    result = cli("audit")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3  # header and one line per event: no forged line
    forged_row = next(line for line in lines if "bot:mallory" in line)
    for raw in ("\x1b", "\r", "\t", "\x07", "\x7f", "\x9b", "\u202e"):
        assert raw not in result.stdout
    assert "x\\n2026-01-01T00:00:00" in forged_row and "\\x1b[31mRED" in forged_row
    assert "\\x07\\r\\t\\x7f\\x9b1m\\u202e" in forged_row
    assert forged_row.split()[-3:] == ["allow", "grant.allow", "ok"]  # the columns after it stay in place

    # JSON stays exactly as it was: the original string, escaped by JSON itself.
    as_json = cli("audit", "--json")
    assert as_json.code == 0, as_json.stderr
    events = as_json.json["data"]
    assert any(e["target"] == f"demo:{FORGED}" for e in events)
    assert "\\u001b[31mRED" in as_json.stdout and "\n2026" not in as_json.stdout.split("\n", 1)[0]


def test_tables_and_rendered_text_escape_but_keep_their_own_lines() -> None:
    text = table(["Name", "Note"], [["a\nb", "\x1b[2J"], ["c", None]])
    assert text.splitlines() == ["Name  Note", "a\\nb  \\x1b[2J", "c"]
    rendered = Output({"name": "w\x1b]0;x\x07", "items": ["1\n2"]},
                      render=lambda d: f"name: {d['name']}\nitems: {', '.join(d['items'])}")
    assert rendered.human() == "name: w\\x1b]0;x\\x07\nitems: 1\\n2"
    # A command's own text keeps its line breaks; any other control character is shown escaped.
    assert Output({}, "line one\nline two\x1b[0m\r").human() == "line one\nline two\\x1b[0m\\r"
    assert printable("plain ascii, ünïcode and \\n as typed") == "plain ascii, ünïcode and \\n as typed"
    # Invisible characters a reviewer cannot see: zero-width ones, directional marks, separators.
    assert printable("done\u200b.md\u200f\u2028x\ufeff") == "done\\u200b.md\\u200f\\u2028x\\ufeff"
    # And those a terminal shows as nothing too: a soft hyphen, a filler, the tag characters (an
    # invisible copy of ASCII: "done.md" with a hidden sentence after it).
    hidden = "done\u00ad.md\u3164\U000e0041\U000e0020\u206a"
    assert printable(hidden) == "done\\u00ad.md\\u3164\\U000e0041\\U000e0020\\u206a"
    # --json says them as JSON escapes (a pair past U+FFFF): the same document for a program.
    as_json = json_printable(json.dumps({"path": hidden}, ensure_ascii=False))
    assert as_json.isascii() and json.loads(as_json) == {"path": hidden}
    assert "\\udb40\\udc41" in as_json


def test_json_envelope_is_unchanged(app: App, cli: Cli) -> None:
    app.audit.record(actor="user", action="note", target="demo:tab\there", decision="none")
    result = cli("audit", "--json", "--limit", "1")
    document = json.loads(result.stdout)
    assert document["data"][0]["target"] == "demo:tab\there"
