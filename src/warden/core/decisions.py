"""A decision of one of Warden's rules: allowed or not, which rule decided, and why.

Every check that can refuse — the path policy, grants, the command allowlist, the network
allowlist — answers with this shape (or a subclass adding what only it knows), so the audit
log, the CLI and the API read them all the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Decision"]


@dataclass(frozen=True)
class Decision:
    """Allowed or refused, the rule that decided (its stable name, for the audit log) and a
    one-line reason a person can act on."""

    allowed: bool
    rule: str
    reason: str = ""

    @property
    def decision(self) -> str:
        """The audit log's word for it."""
        return "allow" if self.allowed else "deny"
