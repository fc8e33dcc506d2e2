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


def test_secret_looking_keys_are_redacted_at_any_depth_every_time() -> None:
    # Each key's verdict is remembered (the same few keys fill every event): a key is judged the
    # same on its hundredth event as on its first, in any case, nested in a mapping or a list.
    from collections import OrderedDict

    from warden.core.audit import scrub

    detail = {"API_Token": "t", "password": "p", "secret_names": ["A"], "Secrets": ["B"], "count": 3,
              "ok": True, "none": None, "ratio": 0.5,
              "runs": [{"value": "v", "exit_code": 0}, ("x", {"authorization": "a"})],
              "nested": OrderedDict(key_material="k", program="true")}
    expected = {"API_Token": "[redacted]", "password": "[redacted]", "secret_names": ["A"], "Secrets": ["B"],
                "count": 3, "ok": True, "none": None, "ratio": 0.5,
                "runs": [{"value": "[redacted]", "exit_code": 0}, ["x", {"authorization": "[redacted]"}]],
                "nested": {"key_material": "[redacted]", "program": "true"}}
    for _ in range(3):
        assert scrub(detail) == expected
    assert scrub({"my_secret": {"inner": 1}}) == {"my_secret": "[redacted]"}  # a whole mapping under one
