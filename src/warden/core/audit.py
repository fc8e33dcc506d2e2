"""The audit log's hash chain (pure): each event holds the SHA-256 of the one before it."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warden.core.errors import InvalidInput

__all__ = [
    "GENESIS",
    "AuditEvent",
    "ChainBreak",
    "DuplicateKey",
    "StoredEvent",
    "check_anchor",
    "detail_text",
    "event_hash",
    "parse_anchor",
    "parse_detail",
    "scrub",
    "verify_chain",
]

GENESIS = "0" * 64

# Keys whose values are never written to the log, whatever a caller passes (tokens, secrets).
_SECRET_KEYS = ("token", "secret", "password", "value", "key_material", "authorization")


@dataclass(frozen=True)
class AuditEvent:
    at: str
    actor: str
    action: str
    target: str
    decision: str  # allow | deny | none
    rule: str
    result: str
    detail: Mapping[str, object] = field(default_factory=dict)
    seq: int = 0
    prev_hash: str = GENESIS
    hash: str = ""


@dataclass(frozen=True)
class StoredEvent:
    """An event as the registry holds it: the detail still JSON text, parsed by `to_event`."""

    seq: int
    at: str
    actor: str
    action: str
    target: str
    decision: str
    rule: str
    result: str
    detail: str
    prev_hash: str
    hash: str

    def to_event(self, *, strict: bool = False) -> AuditEvent:
        """The event; `strict` refuses detail Warden never writes (bad JSON, a key twice)."""
        detail = parse_detail(self.detail) if strict else json.loads(self.detail)
        return AuditEvent(seq=self.seq, at=self.at, actor=self.actor, action=self.action, target=self.target,
                          decision=self.decision, rule=self.rule, result=self.result, detail=detail,
                          prev_hash=self.prev_hash, hash=self.hash)


def detail_text(detail: Mapping[str, object]) -> str:
    """The detail as stored: canonical JSON (sorted keys), non-JSON values as their text."""
    return json.dumps(detail, sort_keys=True, default=str, ensure_ascii=False)


def scrub(detail: Mapping[str, object]) -> dict[str, object]:
    """Drop values under secret-looking keys, recursively (defence in depth for callers), and
    give bytes that are not UTF-8 (a command line's, kept by Python as lone surrogates) as
    `\\xNN` text, which a log row can hold and hash."""
    # `_text`'s test for plain ASCII made here first: most keys and values are, and a call each
    # was a fifth of an exec's audit.
    return {key if key.isascii() else _text(key): "[redacted]" if _secret_looking(key) else _clean(value)
            for key, value in detail.items()}


@functools.lru_cache(maxsize=1024)
def _secret_looking(key: str) -> bool:
    """Whether a detail key names a secret. Remembered per key: every event's detail holds the same
    few dozen keys, and this was most of an event's cost; a pure function of the key, so a cached
    answer is the answer (keys past the bound are judged anew)."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_KEYS) and lowered not in {"secret_names", "secrets"}


def _clean(value: object) -> object:
    """One value as the log holds it: text as `_text` gives it, a mapping scrubbed, a list or tuple
    as a list of clean values, anything else as it is. The common kinds are told apart first:
    `isinstance` against the Mapping ABC costs several times a plain one."""
    if isinstance(value, str):
        return value if value.isascii() else _text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Mapping):
        return scrub(value)
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    return value


def _text(value: str) -> str:
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return value


class DuplicateKey(ValueError):
    """A stored JSON object names one key twice (json.loads would silently keep the last)."""


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(f"the key {key!r} appears twice")
        result[key] = value
    return result


def parse_detail(text: str) -> dict[str, object]:
    """A stored `detail` column, refusing duplicate keys: `{"a":1,"a":1}` hashes like `{"a":1}`,
    so a row padded that way would otherwise still verify (RFC 8259 §4 leaves duplicates open)."""
    value = json.loads(text, object_pairs_hook=_unique_pairs)
    if not isinstance(value, dict):
        raise ValueError("it is not a JSON object")
    return value


def _canonical(event: AuditEvent, seq: int, prev_hash: str) -> bytes:
    body = {
        "seq": seq, "prev": prev_hash, "at": event.at, "actor": event.actor,
        "action": event.action, "target": event.target, "decision": event.decision,
        "rule": event.rule, "result": event.result, "detail": event.detail,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode("utf-8")


def event_hash(event: AuditEvent, seq: int, prev_hash: str) -> str:
    """The SHA-256 that row `seq` stores, given the hash of the row before."""
    import hashlib  # here: its OpenSSL loads in 2 ms, which a command that writes no event never needs

    return hashlib.sha256(prev_hash.encode("ascii") + _canonical(event, seq, prev_hash)).hexdigest()


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    reason: str


def verify_chain(events: Iterable[AuditEvent]) -> ChainBreak | None:
    """The first broken row (edited, deleted or reordered), or None when the chain holds."""
    prev_hash = GENESIS
    expected_seq: int | None = None
    for event in events:
        if expected_seq is not None and event.seq != expected_seq:
            return ChainBreak(expected_seq, f"row {expected_seq} is missing (deleted)")
        if event.prev_hash != prev_hash:
            return ChainBreak(event.seq, "its link to the row before does not match "
                                         "(a row before it was deleted or edited)")
        if event_hash(event, event.seq, prev_hash) != event.hash:
            return ChainBreak(event.seq, "its content does not match its hash (edited)")
        prev_hash = event.hash
        expected_seq = event.seq + 1
    return None


def parse_anchor(text: str) -> tuple[int, str]:
    """`SEQ:HASH`, a head that `warden audit verify` printed earlier, as (seq, hash)."""
    seq_text, _, digest = text.strip().partition(":")
    digest = digest.lower()
    if not seq_text.isdigit() or int(seq_text) < 1 or len(digest) != 64 \
            or any(c not in "0123456789abcdef" for c in digest):
        raise InvalidInput(f"bad anchor {text!r}: give SEQ:HASH as `warden audit verify` printed it "
                           "(a row number, a colon, 64 hex digits)")
    return int(seq_text), digest


def check_anchor(events: Iterable[AuditEvent], seq: int, digest: str) -> ChainBreak | None:
    """Whether a head recorded earlier is still in the log, unchanged.

    A hash chain shows that no row was edited and none was removed before the newest one;
    removing the newest rows leaves a shorter chain that still holds. A head kept elsewhere
    (seq and hash) catches that: its row must still be there with the same hash.
    """
    for event in events:
        if event.seq == seq:
            if event.hash != digest:
                return ChainBreak(seq, "it differs from the recorded anchor (edited or rewritten)")
            return None
    return ChainBreak(seq, "the recorded anchor's row is gone (the newest events were deleted)")
