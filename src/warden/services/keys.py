"""`warden keys`: what keys this node uses, and their rotation (a cluster's, or this home's).

In a cluster every change is one registry transaction that compares-and-sets the keyring's
version, so two nodes rotating at once cannot both win: the loser gets `conflict` and
changes nothing. `expected` lets a script say which version it looked at (`--if-version`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from warden.core.errors import InvalidInput
from warden.core.keyring import PEPPER, SECRETS
from warden.core.ports import ClusterKeyring
from warden.services.audit import AuditLog
from warden.services.secrets import SecretService

__all__ = ["ROTATABLE", "KeyService", "KeysView", "check_cluster_url"]

ROTATABLE = ("kek", "secrets", "pepper")


def check_cluster_url(url: str) -> str:
    """The registry URL a cluster shares (what WARDEN_DATABASE_URL takes), or InvalidInput.
    `postgresql://` is read as psycopg's (the driver `warden[postgres]` installs)."""
    text = url.strip()
    if any(ch.isspace() or ord(ch) < 32 for ch in text) or len(text) > 2048:
        raise InvalidInput("bad registry URL: it holds spaces or control characters")
    scheme, sep, rest = text.partition("://")
    if not sep or not rest:
        raise InvalidInput(f"bad registry URL {text.split('@')[-1]!r}: use postgresql+psycopg://USER@HOST:PORT/DB")
    if scheme == "postgresql":
        return "postgresql+psycopg://" + rest
    if scheme != "postgresql+psycopg":
        raise InvalidInput(f"a cluster shares a PostgreSQL registry, not {scheme!r}: use "
                           "postgresql+psycopg://USER@HOST:PORT/DB")
    return text


@dataclass(frozen=True)
class KeysView:
    """`warden keys show`: where the keys come from and which ones (ids, never key bytes)."""

    mode: str  # "cluster" or "local"
    data: dict[str, object]

    def to_json(self) -> dict[str, object]:
        return {"mode": self.mode, **self.data}


class KeyService:
    def __init__(self, *, cluster: ClusterKeyring | None, secrets: Callable[[], SecretService],
                 audit: AuditLog) -> None:
        self._cluster = cluster
        self._secrets = secrets
        self._audit = audit

    def show(self) -> KeysView:
        if self._cluster is None:
            return KeysView("local", {"pepper": "keys/pepper (or WARDEN_TOKEN_PEPPER)",
                                      "secrets": "keys/master.key (or WARDEN_MASTER_KEY)"})
        state = self._cluster.state()
        mine = self._cluster.node_kek_id()
        data: dict[str, object] = {"node_kek_id": mine, "node_kek_source": self._cluster.source()}
        if state is None:
            return KeysView("cluster", {**data, "keyring": None})
        rows = self._cluster.rows()
        return KeysView("cluster", {**data, "version": state.version, "kek_id": state.kek_id,
                                    "matches": mine == state.kek_id, "updated": state.updated_at,
                                    "keys": [row.to_json() for row in rows]})

    def _need_cluster(self, what: str) -> ClusterKeyring:
        if self._cluster is None:
            raise InvalidInput(f"rotating the {what} keeps old tokens working only in a cluster's keyring; on one "
                               "machine `warden keys rotate secrets` re-seals secrets, and `warden init "
                               "--reset-keys --yes` makes a new pepper (voids every token)")
        return self._cluster

    def rotate(self, what: str, *, expected: int | None = None, new_kek: bytes | None = None,
               actor: str = "user") -> dict[str, object]:
        """A new key of `what` (kek, secrets, pepper); audited."""
        if what not in ROTATABLE:
            raise InvalidInput(f"bad key {what!r}: rotate one of {', '.join(ROTATABLE)}")
        if new_kek is not None and what != "kek":
            raise InvalidInput("--key-file gives a new cluster key: only with `warden keys rotate kek`")
        if what == "secrets" and self._cluster is None:
            kid, count = self._secrets().rotate_key(actor=actor)
            return {"purpose": SECRETS, "key_id": kid, "resealed": count}
        cluster = self._need_cluster("cluster key" if what == "kek" else "pepper")
        detail = (cluster.rotate_kek(new_key=new_kek, expected=expected) if what == "kek"
                  else cluster.rotate(PEPPER if what == "pepper" else SECRETS, expected=expected))
        shown = {k: v for k, v in detail.items() if k != "key_file"}
        self._audit.record_made(actor=actor, action=f"keys.rotate_{what}", target="cluster keyring", detail=shown)
        return detail

    def retire_peppers(self, *, expected: int | None = None, actor: str = "user") -> dict[str, object]:
        """Forget the peppers kept after rotations (tokens hashed under them stop working); audited."""
        detail = self._need_cluster("pepper").retire_peppers(expected=expected)
        self._audit.record_made(actor=actor, action="keys.retire_pepper", target="cluster keyring", detail=detail)
        return detail
