"""The keys of a cluster: the pepper and secrets data keys in the shared registry, wrapped
(AES-256-GCM, envelope encryption) under the cluster key each node holds outside it.

The cluster key (KEK) is `WARDEN_CLUSTER_KEY` (base64 of 32 bytes) or `keys/cluster.key`
(mode 0600). The registry stores the KEK's check value: a node holding another KEK is refused
(`keys_mismatch`) before it refuses a token or fails a secret. Every change of the keyring
compares-and-sets its version, so two nodes rotating at once cannot both win.

Keys are read from the registry at each use (a rotation on another node is seen at once);
unwrapped keys are kept in memory by id (an id is a hash of its key, so it never changes
meaning), and so is the node's cluster key once it is found to be the registry's (its files are
read again only when the registry names another).

Rotating the KEK writes the new one to `keys/cluster.key.next` before the registry
commits and renames it over `cluster.key` after; a crash in between is finished by the next
reader, which finds the registry's KEK in the `.next` file. On one node, those writes and
renames take turns under a lock file (keys/.cluster.key.lock), so two rotations at once, or a
rotation and a reader finishing a crashed one, never put an uncommitted key in place of the
registry's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path

from warden.adapters.atomic import exclusive
from warden.adapters.keystore import (
    KEY_BYTES,
    NONCE_BYTES,
    decode_env_key,
    open_sealed,
    read_key_file,
    seal_with,
    write_private_tmp,
)
from warden.adapters.store.db import Database, Sql
from warden.adapters.store.keyring import SqlKeyring
from warden.adapters.store.secrets import SqlSecrets
from warden.core.errors import Conflict, InvalidInput, KeysMismatch, Unavailable
from warden.core.keyring import (
    CURRENT,
    PEPPER,
    PREVIOUS,
    PURPOSES,
    SECRETS,
    KeyringState,
    KeyRow,
    Purpose,
    kek_id,
    new_key_id,
    wrap_context,
)
from warden.core.secrets import Sealed

__all__ = ["CLUSTER_ENV", "ClusterKeys", "read_new_kek"]

CLUSTER_ENV = "WARDEN_CLUSTER_KEY"


def _where(url: str) -> str:
    """A database URL without its user and password."""
    return url.split("@")[-1]


class ClusterKeys:
    """The Keys port (tokens, secrets) and the keyring's management, for a shared registry."""

    def __init__(self, db: Database, directory: Path, environ: Mapping[str, str], *,
                 clock: Callable[[], datetime], random: Callable[[int], bytes] = os.urandom) -> None:
        self._db = db
        self.directory = directory
        self._environ = environ
        self._clock = clock
        self._random = random
        self._plain: dict[str, bytes] = {}
        # The cluster key last found to be the registry's, by check value: a token check or a
        # secret read then reads no key file, only the registry (whose KEK may have changed).
        self._kek: tuple[str, bytes] | None = None

    # -- the cluster key (held by this node) -------------------------------------------------
    @property
    def cluster_file(self) -> Path:
        return self.directory / "cluster.key"

    @property
    def next_file(self) -> Path:
        return self.directory / "cluster.key.next"

    @property
    def from_environment(self) -> bool:
        return CLUSTER_ENV in self._environ

    def source(self) -> str:
        """Where this node's cluster key comes from, for messages."""
        return CLUSTER_ENV if self.from_environment else str(self.cluster_file)

    def _node_keks(self) -> dict[str, tuple[bytes, Path | None]]:
        """This node's cluster keys by check value, with the file each came from (None: environment)."""
        raw = self._environ.get(CLUSTER_ENV)
        if raw is not None:
            key = decode_env_key(CLUSTER_ENV, raw)
            return {kek_id(key): (key, None)}
        found: dict[str, tuple[bytes, Path | None]] = {}
        for path in (self.cluster_file, self.next_file):
            key_or_none = read_key_file(path)
            if key_or_none is not None:
                found.setdefault(kek_id(key_or_none), (key_or_none, path))
        return found

    def node_kek_id(self) -> str | None:
        """The check value of the key this node holds (None: it holds none)."""
        raw = self._environ.get(CLUSTER_ENV)
        if raw is not None:
            return kek_id(decode_env_key(CLUSTER_ENV, raw))
        key = read_key_file(self.cluster_file)
        return kek_id(key) if key is not None else None

    def _kek_for(self, state: KeyringState, *, renaming_held: bool = False) -> bytes:
        if self._kek is not None and self._kek[0] == state.kek_id:
            return self._kek[1]
        keks = self._node_keks()
        if state.kek_id in keks:
            key, path = keks[state.kek_id]
            if path == self.next_file:  # a KEK rotation committed, its rename did not happen
                self._finish_rename(key, held=renaming_held)
            self._kek = (state.kek_id, key)
            return key
        where = _where(self._db.url)
        if not keks:
            raise KeysMismatch(f"this node holds no cluster key, but the registry at {where} is a cluster's "
                               f"(key {state.kek_id}): copy keys/cluster.key from one of its nodes into "
                               f"{self.directory} (mode 0600) or set {CLUSTER_ENV}")
        mine = ", ".join(sorted(keks))
        raise KeysMismatch(f"this node's cluster key ({mine}, from {self.source()}) is not the cluster's "
                           f"({state.kek_id}) in the registry at {where}: copy keys/cluster.key from a node "
                           f"of the cluster (the one that rotated it last) or set {CLUSTER_ENV}")

    def _write_key_file(self, path: Path, key: bytes, *, exclusive: bool = False) -> bytes:
        """`key` in `path`; with `exclusive`, only if `path` is not there yet (two processes at once
        agree on the first one's key). Answers the key `path` holds now."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = write_private_tmp(path, key, self._random(4).hex())
        try:
            if not exclusive:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    theirs = read_key_file(path)
                    assert theirs is not None
                    key = theirs
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._fsync_dir()
        return key

    @contextlib.contextmanager
    def _renaming(self) -> Iterator[None]:
        """One writer of cluster.key.next and its rename on this node at a time (a lock file in keys/):
        a second `keys rotate kek`, or a reader finishing a crashed one, never renames a key file
        another process is in the middle of writing. The lock goes with the process (kill -9 too)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with exclusive(self.directory / ".cluster.key.lock"):
            yield

    def _finish_rename(self, key: bytes, *, held: bool = False) -> None:
        """cluster.key.next holds `key`, which the registry names: make it cluster.key (unless
        another process did already). `held`: this caller holds `_renaming` already (flock is per
        open file, so taking it again would wait on itself)."""
        with contextlib.nullcontext() if held else self._renaming():
            if read_key_file(self.next_file) == key:
                os.replace(self.next_file, self.cluster_file)
                self._fsync_dir()

    def _fsync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- wrapping ----------------------------------------------------------------------------
    def _wrap(self, kek: bytes, purpose: Purpose, key_id: str, key: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = self._random(NONCE_BYTES)
        return nonce + AESGCM(kek).encrypt(nonce, key, wrap_context(purpose, key_id))

    def _unwrap(self, kek: bytes, row: KeyRow) -> bytes:
        cached = self._plain.get(row.id)
        if cached is not None:
            return cached
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            key = AESGCM(kek).decrypt(row.wrapped[:NONCE_BYTES], row.wrapped[NONCE_BYTES:],
                                      wrap_context(row.purpose, row.id))
        except InvalidTag:
            key = b""
        if len(key) != KEY_BYTES or new_key_id(row.purpose, key) != row.id:
            raise KeysMismatch(f"the cluster's {row.purpose} key {row.id} does not unwrap under this node's "
                               f"cluster key ({row.kek_id}): its registry row was altered; restore the registry "
                               "from a backup")
        self._plain[row.id] = key
        return key

    def _new(self, kek: bytes, purpose: Purpose, key: bytes | None = None) -> tuple[KeyRow, bytes]:
        material = key if key is not None else self._random(KEY_BYTES)
        kid = new_key_id(purpose, material)
        row = KeyRow(kid, purpose, CURRENT, self._wrap(kek, purpose, kid, material), kek_id(kek),
                     self._clock().isoformat())
        return row, material

    # -- reading -----------------------------------------------------------------------------
    def _ring(self) -> tuple[KeyringState, list[KeyRow]]:
        with self._db.transaction(write=False) as sql:
            ring = SqlKeyring(sql)
            state = ring.state()
            rows = ring.list_keys() if state is not None else []
        if state is None:
            raise Unavailable(f"the registry at {_where(self._db.url)} holds no cluster keys yet: run `warden init` "
                              "on the cluster's first node (with WARDEN_DATABASE_URL set), then `warden init "
                              "--join URL` on the others")
        return state, rows

    def _keys(self) -> list[tuple[KeyRow, bytes]]:
        state, rows = self._ring()
        kek = self._kek_for(state)
        return [(row, self._unwrap(kek, row)) for row in rows]

    def state(self) -> KeyringState | None:
        """The registry's keyring state, unchecked (None: it has none)."""
        with self._db.transaction(write=False) as sql:
            return SqlKeyring(sql).state()

    def check(self) -> KeyringState:
        """The keyring, once this node's cluster key is known to unwrap every key in it."""
        state, rows = self._ring()
        kek = self._kek_for(state)
        for row in rows:
            self._unwrap(kek, row)
        for purpose in PURPOSES:
            if not any(row.purpose == purpose and row.state == CURRENT for row in rows):
                raise Unavailable(f"the cluster's keyring has no current {purpose} key: restore the registry "
                                  "from a backup")
        return state

    def ensure(self) -> list[str]:
        """`warden serve` and `init` on a cluster node: refuse at once when the keys are not the cluster's."""
        self.check()
        return []

    def rows(self) -> list[KeyRow]:
        return self._ring()[1]

    # -- the Keys port -----------------------------------------------------------------------
    def _current(self, purpose: Purpose) -> tuple[str, bytes]:
        for row, key in self._keys():
            if row.purpose == purpose and row.state == CURRENT:
                return row.id, key
        raise Unavailable(f"the cluster's keyring has no current {purpose} key: restore the registry from a backup")

    def pepper(self) -> bytes:
        """The pepper new tokens are hashed under."""
        return self._current(PEPPER)[1]

    def peppers(self) -> list[bytes]:
        """Every pepper a token may be hashed under: the current one, then those kept after rotations."""
        keys = [(row, key) for row, key in self._keys() if row.purpose == PEPPER]
        return [key for row, key in keys if row.state == CURRENT] + [key for row, key in keys if row.state != CURRENT]

    def current_key(self) -> tuple[str, bytes]:
        return self._current(SECRETS)

    def seal(self, name: str, plaintext: bytes, *, key: tuple[str, bytes] | None = None) -> Sealed:
        return seal_with(key or self._current(SECRETS), name, plaintext, self._random(NONCE_BYTES))

    def open(self, name: str, sealed: Sealed) -> bytes:
        found = {row.id: key for row, key in self._keys() if row.purpose == SECRETS}
        material = found.get(sealed.key_id)
        if material is None:
            raise Unavailable(f"secret {name!r} was sealed with key {sealed.key_id}, which the cluster's keyring "
                              "no longer holds; set the secret again")
        return open_sealed(material, name, sealed)

    def begin_rotation(self) -> tuple[str, bytes]:
        raise InvalidInput("this node's keys are the cluster's: rotate them with `warden keys rotate secrets`")

    def sealing(self, *, rotating: bool = False) -> contextlib.AbstractContextManager[None]:
        # The keyring's row is held in the storing transaction instead (secrets.hold_key).
        return contextlib.nullcontext()

    def finish_rotation(self) -> None:
        raise InvalidInput("this node's keys are the cluster's: rotate them with `warden keys rotate secrets`")

    # -- the keyring's changes ---------------------------------------------------------------
    def create(self, *, pepper: bytes | None = None, secrets_key: bytes | None = None) -> tuple[KeyringState, bool]:
        """The first node: a keyring with this pepper and data key (adopted from the node's own,
        so tokens and secrets made before keep working) or new ones, wrapped under this node's
        cluster key (made now in keys/cluster.key when it has none). False: it existed already."""
        existing = self.state()
        if existing is not None:
            return existing, False
        keks = self._node_keks()
        if keks:
            kek = next(iter(keks.values()))[0]
        else:  # another `init` on this node may be making one at the same moment: the first one stands
            kek = self._write_key_file(self.cluster_file, self._random(KEY_BYTES), exclusive=True)
        at = self._clock().isoformat()
        try:
            with self._db.transaction() as sql:
                ring = SqlKeyring(sql)
                ring.create(kek_id(kek), at)
                ring.add(self._new(kek, PEPPER, pepper)[0])
                ring.add(self._new(kek, SECRETS, secrets_key)[0])
        except Conflict:  # another node made it between our look and our insert: theirs stands
            state = self.state()
            assert state is not None
            return state, False
        return self.check(), True

    def _changing(self, sql: Sql, expected: int | None, *,
                  renaming_held: bool = False) -> tuple[SqlKeyring, KeyringState, bytes]:
        ring = SqlKeyring(sql)
        state = ring.state()
        if state is None:
            raise Unavailable(f"the registry at {_where(self._db.url)} holds no cluster keys yet: run `warden init`")
        if expected is not None and expected != state.version:
            raise Conflict(f"the cluster's keyring is at version {state.version}, not {expected}: another node "
                           "changed it; look with `warden keys show`, then try again")
        return ring, state, self._kek_for(state, renaming_held=renaming_held)

    def _advance(self, ring: SqlKeyring, state: KeyringState, new_kek_id: str | None = None) -> int:
        if not ring.advance(state.version, new_kek_id or state.kek_id, self._clock().isoformat()):
            raise Conflict("another node changed the cluster's keyring at the same moment (compare-and-set "
                           "lost); look with `warden keys show`, then try again")
        return state.version + 1

    def rotate(self, purpose: Purpose, *, expected: int | None = None) -> dict[str, object]:
        """A new current key for `purpose`. The pepper: the old one is kept to verify tokens hashed
        under it (until `retire_peppers`). The data key: every secret is re-sealed under the new
        one in this same transaction; the old one is kept one rotation for readers already past
        their row read."""
        with self._db.transaction() as sql:
            ring, state, kek = self._changing(sql, expected)
            version = self._advance(ring, state)
            rows = ring.list_keys()
            old = [row for row in rows if row.purpose == purpose]
            new_row, new_key = self._new(kek, purpose)
            resealed = 0
            if purpose == SECRETS:
                opened = {row.id: self._unwrap(kek, row) for row in old}
                for row in old:
                    if row.state != CURRENT:
                        ring.delete(row.id)
                table = SqlSecrets(sql)
                for secret in table.list_all():
                    material = opened.get(secret.sealed.key_id)
                    if material is None:
                        continue  # sealed under a key long gone: unreadable before as after
                    plain = open_sealed(material, secret.name, secret.sealed, "set it again with `warden "
                                        "secret set` or remove it, then rotate")
                    table.upsert(secret.name, self.seal(secret.name, plain, key=(new_row.id, new_key)),
                                 secret.updated_at)
                    resealed += 1
            for row in old:
                if row.state == CURRENT:
                    ring.set_state(row.id, PREVIOUS)
            ring.add(new_row)
        detail: dict[str, object] = {"version": version, "purpose": purpose, "key_id": new_row.id,
                                     "previous": [row.id for row in old if row.state == CURRENT]}
        if purpose == SECRETS:
            detail["resealed"] = resealed
        return detail

    def retire_peppers(self, *, expected: int | None = None) -> dict[str, object]:
        """Forget the peppers kept after rotations: tokens hashed under them stop working."""
        with self._db.transaction() as sql:
            ring, state, _ = self._changing(sql, expected)
            gone = [row.id for row in ring.list_keys() if row.purpose == PEPPER and row.state != CURRENT]
            if not gone:
                return {"version": state.version, "retired": []}
            version = self._advance(ring, state)
            for kid in gone:
                ring.delete(kid)
        return {"version": version, "retired": gone}

    def rotate_kek(self, *, new_key: bytes | None = None, expected: int | None = None) -> dict[str, object]:
        """Re-wrap every key under a new cluster key. This node keeps it in keys/cluster.key;
        every other node is refused until given it."""
        if self.from_environment and new_key is None:
            raise InvalidInput(f"this node's cluster key comes from {CLUSTER_ENV}: give the new one with "
                               "--key-file FILE (base64 of 32 random bytes), then set it on every node")
        kek_new = new_key if new_key is not None else self._random(KEY_BYTES)
        new_id = kek_id(kek_new)
        with self._renaming():
            state_now = self.state()
            if state_now is not None:
                # A crashed rotation's committed key is renamed into place before .next is written again.
                self._kek_for(state_now, renaming_held=True)
            written = False
            if not self.from_environment:
                self._write_key_file(self.next_file, kek_new)  # before the registry names it: never a KEK lost
                written = True
            try:
                with self._db.transaction() as sql:
                    ring, state, kek = self._changing(sql, expected, renaming_held=True)
                    if new_id == state.kek_id:
                        raise InvalidInput("the new cluster key is the current one; make a new one")
                    version = self._advance(ring, state, new_id)
                    for row in ring.list_keys():
                        ring.rewrap(row.id, self._wrap(kek_new, row.purpose, row.id, self._unwrap(kek, row)),
                                    new_id)
            except BaseException:
                # Removed only once the registry is seen not to name it: a connection lost at COMMIT
                # may leave the rotation committed, and .next is then the only copy of its key (a
                # reader renames it into place once it checks the registry names it).
                if written:
                    with contextlib.suppress(Exception):
                        now = self.state()
                        if now is None or now.kek_id != new_id:
                            self.next_file.unlink(missing_ok=True)
                raise
            if written:
                os.replace(self.next_file, self.cluster_file)
                self._fsync_dir()
        self._kek = (new_id, kek_new)
        return {"version": version, "kek_id": new_id, "previous_kek_id": state.kek_id,
                "key_file": None if self.from_environment else str(self.cluster_file)}


def read_new_kek(path: Path) -> bytes:
    """A new cluster key from a file the operator made: base64 of 32 bytes (or the 32 bytes)."""
    try:
        data = path.read_bytes()[:4096]
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    if len(data) == KEY_BYTES:
        return data
    return decode_env_key(str(path), data.decode("ascii", "replace"))

