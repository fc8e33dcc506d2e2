"""A run's output as the events of a streamed exec (`"stream": true`), one JSON object a line (pure).

`{"type": "stdout"|"stderr", "data": TEXT}` as output arrives, and last `{"type": "exit",
"exit_code", "timed_out", "signal", "duration_s"}`. Output is bytes and may split a UTF-8
character between two reads, so each stream is decoded incrementally (invalid bytes become
U+FFFD, never an error); each event holds at most `MAX_EVENT` characters of output; and each stream
keeps at most `max_output` bytes (`api.max_output`, as a captured exec does): what comes after is
counted, not sent, and one last stderr line says so, before the exit line. Warden's own lines
(why a command failed, a refused connection) are stderr events outside the cap.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable
from typing import Any, Literal

from warden.core.runs import RunResult

__all__ = ["MAX_EVENT", "OutputEvents", "error_event", "exit_event", "merge", "ndjson"]

Stream = Literal["stdout", "stderr"]
Event = dict[str, Any]
MAX_EVENT = 64 * 1024


class OutputEvents:
    """The output events of one run, stream by stream, under the cap of `max_output` bytes each."""

    def __init__(self, max_output: int) -> None:
        self.max_output = max_output
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        self._sent = {"stdout": 0, "stderr": 0}
        self.dropped = {"stdout": 0, "stderr": 0}

    def feed(self, stream: Stream, chunk: bytes) -> list[Event]:
        """The events for `chunk` of `stream` (none while a character is incomplete, or past the cap)."""
        room = max(self.max_output - self._sent[stream], 0)
        kept, over = chunk[:room], len(chunk) - min(room, len(chunk))
        self._sent[stream] += len(kept)
        self.dropped[stream] += over
        events = []
        for start in range(0, len(kept), MAX_EVENT):
            text = self._decoders[stream].decode(kept[start:start + MAX_EVENT])
            if text:
                events.append({"type": stream, "data": text})
        return events

    @staticmethod
    def notice(text: bytes) -> list[Event]:
        """Warden's own line on stderr (not counted against the cap)."""
        return [{"type": "stderr", "data": text.decode("utf-8", "replace")}]

    def finish(self) -> list[Event]:
        """What is left once the output has ended: a character cut short (as U+FFFD), and the line
        saying how much output the cap dropped, if it dropped any."""
        events = []
        for stream, decoder in self._decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                events.append({"type": stream, "data": text})
        dropped = [f"{stream} {n} bytes" for stream, n in self.dropped.items() if n]
        if dropped:
            events.append({"type": "stderr", "data": f"warden: output beyond {self.max_output} bytes per stream was "
                                                    f"dropped ({', '.join(dropped)}; api.max_output)\n"})
        return events


def merge(events: Iterable[Event]) -> list[Event]:
    """Adjacent output events of one stream joined, each still at most MAX_EVENT characters."""
    merged: list[Event] = []
    for event in events:
        last = merged[-1] if merged else None
        if (last is not None and event["type"] in ("stdout", "stderr") and last["type"] == event["type"]
                and len(last["data"]) + len(event["data"]) <= MAX_EVENT):
            merged[-1] = {"type": last["type"], "data": last["data"] + event["data"]}
        else:
            merged.append(event)
    return merged


def exit_event(result: RunResult) -> Event:
    """The last line: how the command ended (its output has been sent already). Exactly the
    fields INTERFACES.md lists; what the run used is in the audit's run event and, asked for,
    in a non-streamed answer."""
    return {"type": "exit", "exit_code": result.exit_code, "timed_out": result.timed_out, "signal": result.signal,
            "duration_s": round(result.duration_s, 6)}


def error_event(code: str, message: str) -> Event:
    """The last line of a stream that could not end with the command's status (the error envelope)."""
    return {"type": "error", "error": {"code": code, "message": message}}


def ndjson(events: Iterable[Event]) -> bytes:
    """The events as NDJSON: one compact JSON object a line, UTF-8."""
    return b"".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n" for e in events)
