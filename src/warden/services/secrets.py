"""Secrets: named values sealed with AES-GCM, injected only into runs of grants that name them.

No method returns a value to an interface except `environment()`, which the run path uses to
build a sandbox's environment. Values never reach the audit log: events name secrets only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from warden.core.errors import InvalidInput, NotFound
from warden.core.grants import Grant, check_secret_name
from warden.core.ports import Clock, Keys, Registry
from warden.core.secrets import SecretRow
from warden.services.audit import AuditLog

__all__ = ["MAX_SECRET_BYTES", "Injection", "SecretService"]

MAX_SECRET_BYTES = 64 * 1024


@dataclass(frozen=True)
class Injection:
    """The environment a run gets from secrets, and the names that were asked for but are gone."""

    env: dict[str, str]
    missing: tuple[str, ...]


def _clean_value(value: bytes | str) -> str:
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    # `echo KEY | warden secret set` adds one newline the user did not mean as part of the value.
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    if not raw:
        raise InvalidInput("the secret value is empty: pipe it on stdin, "
                           "e.g. `printf %s \"$KEY\" | warden secret set NAME`")
    if len(raw) > MAX_SECRET_BYTES:
        raise InvalidInput(f"the secret value is larger than {MAX_SECRET_BYTES // 1024} KiB; "
                           "store a file in the workspace instead")
    if b"\0" in raw:
        raise InvalidInput("the secret value holds a NUL byte, which an environment variable cannot carry")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the secret value is not UTF-8 text; base64-encode binary values") from None


class SecretService:
    def __init__(self, registry: Registry, audit: AuditLog, keys: Keys, clock: Clock) -> None:
        self._registry = registry
        self._audit = audit
        self._keys = keys
        self._clock = clock

    def set(self, name: str, value: bytes | str, *, actor: str = "user") -> bool:
        """Seal and store `value` under `name`; True when the secret is new."""
        check_secret_name(name)
        text = _clean_value(value)
        with self._keys.sealing():
            return self._store(name, text, actor)

    def _store(self, name: str, text: str, actor: str) -> bool:
        sealed = self._keys.seal(name, text.encode("utf-8"))
        with self._registry.transaction() as tx:
            # A cluster's key is held until this commits: should a rotation on another node have
            # landed since the seal, seal again under the key that is current now.
            current = tx.secrets.hold_key()
            if current is not None and current != sealed.key_id:
                sealed = self._keys.seal(name, text.encode("utf-8"))
            created = tx.secrets.upsert(name, sealed, self._clock().isoformat())
            self._audit.record(actor=actor, action="secret.set", target=f"secret:{name}",
                               detail={"created": created, "key_id": sealed.key_id}, tx=tx)
        return created

    def list_secrets(self) -> list[SecretRow]:
        with self._registry.transaction(write=False) as tx:
            return tx.secrets.list_all()

    def names(self) -> list[str]:
        with self._registry.transaction(write=False) as tx:
            return tx.secrets.names()

    def remove(self, name: str, *, actor: str = "user") -> list[Grant]:
        """Remove the secret; returns the unrevoked, unexpired grants that still name it, whose
        commands now run without it (said by the caller: "removed" alone left a person thinking the
        bots holding it were told, while their runs quietly got an empty variable)."""
        check_secret_name(name)
        now = self._clock()
        with self._registry.transaction() as tx:
            if not tx.secrets.delete(name):
                raise NotFound(f"no secret named {name!r}: `warden secret list` shows them")
            self._audit.record(actor=actor, action="secret.remove", target=f"secret:{name}", tx=tx)
            return [grant for record in tx.workspaces.list_all()
                    for grant in tx.grants.of_workspace(record.name, live_only=True)
                    if name in grant.secrets and grant.expires > now]

    def rotate_key(self, *, actor: str = "user") -> tuple[str, int]:
        """Re-seal every secret under a new master key; returns the new key id and the count.
        One at a time, and never while a value is being sealed and stored (`Keys.sealing`): a
        `secret set` sealed under the old key and stored after the re-seal was lost with that key,
        and every later rotation then failed on it."""
        with self._keys.sealing(rotating=True):
            return self._rotate(actor)

    def _rotate(self, actor: str) -> tuple[str, int]:
        kid, key = self._keys.begin_rotation()
        with self._registry.transaction() as tx:
            stored = tx.secrets.list_all()
            for row in stored:
                plain = self._keys.open(row.name, row.sealed)
                tx.secrets.upsert(row.name, self._keys.seal(row.name, plain, key=(kid, key)), row.updated_at)
            self._audit.record(actor=actor, action="secret.rotate_key", target="keys/master.key",
                               detail={"key_id": kid, "resealed": len(stored)}, tx=tx)
        self._keys.finish_rotation()
        return kid, len(stored)

    def environment(self, names: Iterable[str]) -> Injection:
        """Decrypt the named secrets for one run's environment (only the run path calls this)."""
        wanted = sorted(set(names))
        if not wanted:
            return Injection({}, ())
        env: dict[str, str] = {}
        missing: list[str] = []
        # Read and opened under the sealing lock (shared): a rotation landing between the two
        # retired the key the rows read were sealed with, and the run failed "unavailable".
        with self._keys.sealing():
            with self._registry.transaction(write=False) as tx:
                found = {name: tx.secrets.get(name) for name in wanted}
            for name, row in found.items():
                if row is None or _unsafe_name(name):
                    # Gone, or stored under a name that is refused now (a loader or shell start-up
                    # variable, set by an older Warden): never injected.
                    missing.append(name)
                else:
                    env[name] = self._keys.open(name, row.sealed).decode("utf-8")
        return Injection(env, tuple(missing))


def _unsafe_name(name: str) -> bool:
    try:
        check_secret_name(name)
    except InvalidInput:
        return True
    return False
