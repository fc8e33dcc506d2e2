"""The audit chain's pure parts (core/audit.py)."""

from __future__ import annotations


def test_bytes_that_are_not_utf8_are_kept_as_text_that_hashes() -> None:
    # `warden run W -- printf caf\xe9` once ended in an internal error: the command line's lone
    # surrogate could not be encoded for the chain.
    from warden.core.audit import AuditEvent, event_hash, scrub

    odd = b"caf\xe9".decode("utf-8", "surrogateescape")
    detail = scrub({"argv": ("printf", odd), "nested": {"k": [odd]}, "plain": "été"})
    assert detail == {"argv": ["printf", "caf\\xe9"], "nested": {"k": ["caf\\xe9"]}, "plain": "été"}
    event = AuditEvent(at="t", actor="user", action="run", target="w", decision="allow", rule="r",
                       result="0", detail=detail)
    assert len(event_hash(event, 1, "0" * 64)) == 64
