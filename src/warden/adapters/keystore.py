"""Key material in $WARDEN_HOME/keys/: the token pepper and the secrets master key.

Both are 32 random bytes in files of mode 0600 inside a 0700 folder, created atomically
(written to a temporary file, then hard-linked into place, so two processes that start at
once agree on one key). The pepper may come from WARDEN_TOKEN_PEPPER and the master key from
WARDEN_MASTER_KEY instead (base64 of 32 bytes), for several nodes sharing one registry.
Secrets are sealed with AES-256-GCM; the associated data binds each ciphertext to its name,
so a row copied onto another name does not decrypt.

Rotation writes the new key to `master.key.next` first, re-encrypts every row, then renames
it over `master.key`; a reader finds a key by the id stored with each row in either file, so
a crash at any point leaves every secret readable.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from warden.adapters.atomic import exclusive, naming
from warden.core.errors import Denied, InvalidInput, Unavailable
from warden.core.secrets import Sealed

__all__ = ["KEY_BYTES", "Keystore", "Sealed", "decode_env_key", "open_sealed", "read_key_file", "seal_with",
           "write_private_tmp"]

KEY_BYTES = 32
NONCE_BYTES = 12
PEPPER_ENV = "WARDEN_TOKEN_PEPPER"
MASTER_ENV = "WARDEN_MASTER_KEY"


def key_id(key: bytes) -> str:
    """A short public name of a key (a hash prefix; it reveals nothing usable)."""
    return "mk_" + hashlib.sha256(b"warden-key-id:" + key).hexdigest()[:16]


def decode_env_key(name: str, raw: str) -> bytes:
    text = raw.strip()
    try:
        padded = text + "=" * (-len(text) % 4)
        value = base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))
    except (binascii.Error, ValueError):
        value = b""
    if len(value) != KEY_BYTES:
        raise InvalidInput(f"{name} must be base64 of {KEY_BYTES} random bytes (make one with: "
                           "python3 -c \"import os,base64;print(base64.b64encode(os.urandom(32)).decode())\")")
    return value


def read_key_file(path: Path) -> bytes | None:
    """The 32-byte key in `path` (None: no such file); refused when it is a link, not a regular
    file, readable by others, or of the wrong size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unavailable(f"cannot read key file {path}: {exc.strerror}; check its owner and mode") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unavailable(f"key file {path} is not a regular file; remove it and run `warden init`")
        if info.st_mode & 0o077:
            raise Unavailable(f"key file {path} is readable by others (mode {info.st_mode & 0o777:o}); "
                              f"run `chmod 600 {path}`")
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise Unavailable(f"key file {path} is damaged (not {KEY_BYTES} bytes); restore it from a backup")
    return data


class Keystore:
    """Reads and creates the key files; seals and opens secret values."""

    def __init__(self, directory: Path, environ: Mapping[str, str],
                 random: Callable[[int], bytes] = os.urandom,
                 required: Callable[[str], bool] | None = None) -> None:
        self.directory = directory
        self._environ = environ
        self._random = random
        # Whether a missing key file (by name) is lost rather than not made yet (home_state.py).
        self._required = required or (lambda _name: False)
        self._pepper: bytes | None = None

    # -- files -----------------------------------------------------------------------------
    @property
    def pepper_file(self) -> Path:
        return self.directory / "pepper"

    @property
    def master_file(self) -> Path:
        return self.directory / "master.key"

    @property
    def next_file(self) -> Path:
        return self.directory / "master.key.next"

    def _ensure_dir(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(self.directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            # Made by another user before this one's first use: theirs to read, swap or lock.
            raise Denied(f"key folder {self.directory} is not a folder of yours (uid {st.st_uid}): another user "
                         "made it; remove it if no key of yours is in it, and run `warden init`", rule="home.owner")
        os.chmod(self.directory, 0o700)

    def _read_key(self, path: Path) -> bytes | None:
        return read_key_file(path)

    def _create_key(self, path: Path, *, guarded: bool = True) -> tuple[bytes, bool]:
        """The key in `path`, made now if missing; True when this call made it."""
        self._ensure_dir()
        existing = self._read_key(path)
        if existing is not None:
            return existing, False
        if guarded and path in (self.pepper_file, self.master_file) and self._required(path.name):
            voids = "every grant token" if path == self.pepper_file else "every stored secret"
            home = self.directory.parent
            raise Unavailable(f"key file {path} is missing, but {home} was set up with it ({voids} depends "
                              f"on it); restore it from a backup of {home}, or run `warden init "
                              "--reset-keys --yes` to make new keys (voids every grant token and every "
                              "stored secret)")
        key = self._random(KEY_BYTES)
        tmp = write_private_tmp(path, key, self._random(4).hex())
        try:
            os.link(tmp, path)  # fails if another process made the key first: use theirs
            made = True
        except FileExistsError:
            made = False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._fsync_dir()
        if not made:
            other = self._read_key(path)
            assert other is not None
            return other, False
        return key, True

    def temp_names_key(self, *, make: bool) -> bytes | None:
        """The key that signs the names of Warden's temporary files in workspaces
        (safefs/temps.py), made now when `make` and missing (None: none yet). Its own file, not
        the pepper: made on a write's first need, in a home whose pepper may not exist yet."""
        path = self.directory / "temp-names.key"
        return self._create_key(path, guarded=False)[0] if make else self._read_key(path)

    def _fsync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def ensure(self) -> list[str]:
        """Create whichever key files are missing (not those given by the environment)."""
        made: list[str] = []
        if PEPPER_ENV not in self._environ and self._create_key(self.pepper_file)[1]:
            made.append("keys/pepper")
        if MASTER_ENV not in self._environ and self._create_key(self.master_file)[1]:
            made.append("keys/master.key")
        return made

    def reset(self, stamp: str) -> list[str]:
        """New pepper and master key (those from the environment aside); old files are kept in
        keys/replaced-<stamp>/ so a mistaken reset can be undone by moving them back."""
        made: list[str] = []
        keep = self.directory / f"replaced-{stamp}"
        for path, env in ((self.pepper_file, PEPPER_ENV), (self.master_file, MASTER_ENV),
                          (self.next_file, MASTER_ENV)):
            if env in self._environ:
                continue
            if path.exists():
                keep.mkdir(mode=0o700, exist_ok=True)
                os.replace(path, keep / path.name)
            if path != self.next_file:
                self._create_key(path, guarded=False)
                made.append(f"keys/{path.name}")
        self._pepper = None
        self._fsync_dir()
        return made

    # -- the pepper ------------------------------------------------------------------------
    def pepper(self) -> bytes:
        """The HMAC key tokens are hashed under (it never changes, so it is read once)."""
        if self._pepper is None:
            raw = self._environ.get(PEPPER_ENV)
            self._pepper = (decode_env_key(PEPPER_ENV, raw) if raw is not None
                            else self._create_key(self.pepper_file)[0])
        return self._pepper

    def peppers(self) -> list[bytes]:
        """Every pepper a token may be hashed under, current first (one on a single machine)."""
        return [self.pepper()]

    def existing(self) -> tuple[bytes | None, bytes | None]:
        """The pepper and master key this home already has (environment or files), making none:
        what the first node of a cluster adopts, so tokens and secrets made before keep working."""
        def one(env: str, path: Path) -> bytes | None:
            raw = self._environ.get(env)
            return decode_env_key(env, raw) if raw is not None else self._read_key(path)

        return one(PEPPER_ENV, self.pepper_file), one(MASTER_ENV, self.master_file)

    # -- the master key --------------------------------------------------------------------
    @property
    def from_environment(self) -> bool:
        return MASTER_ENV in self._environ

    def current_key(self) -> tuple[str, bytes]:
        """The key new values are sealed with (read each time: another process may rotate it)."""
        raw = self._environ.get(MASTER_ENV)
        key = decode_env_key(MASTER_ENV, raw) if raw is not None else self._create_key(self.master_file)[0]
        return key_id(key), key

    def _keys(self) -> dict[str, bytes]:
        keys: dict[str, bytes] = {}
        raw = self._environ.get(MASTER_ENV)
        if raw is not None:
            key = decode_env_key(MASTER_ENV, raw)
            keys[key_id(key)] = key
            return keys
        for path in (self.master_file, self.next_file):
            found = self._read_key(path)
            if found is not None:
                keys[key_id(found)] = found
        return keys

    def seal(self, name: str, plaintext: bytes, *, key: tuple[str, bytes] | None = None) -> Sealed:
        """Encrypt `plaintext` for the secret `name` with AES-256-GCM."""
        return seal_with(key or self.current_key(), name, plaintext, self._random(NONCE_BYTES))

    def open(self, name: str, sealed: Sealed) -> bytes:
        """Decrypt a stored value; Unavailable when its key is gone or the row was altered."""
        material = self._keys().get(sealed.key_id)
        if material is None:
            raise Unavailable(f"secret {name!r} was sealed with key {sealed.key_id}, which is not in "
                              f"{self.directory} or {MASTER_ENV}; restore that key or set the secret again")
        return open_sealed(material, name, sealed)

    # -- rotation --------------------------------------------------------------------------
    def begin_rotation(self) -> tuple[str, bytes]:
        """Make (or reuse, after a crash) the next master key; it lands beside the current one."""
        if self.from_environment:
            raise InvalidInput(f"the master key comes from {MASTER_ENV}; rotate it by re-sealing "
                               "with a new value there (unset it to let Warden keep the key in keys/)")
        self.current_key()  # make sure a current key exists before a next one
        key, _ = self._create_key(self.next_file)
        return key_id(key), key

    def sealing(self, *, rotating: bool = False) -> contextlib.AbstractContextManager[None]:
        """A flock in keys/: shared by each value sealed and stored, held alone by a rotation
        (core/ports). A master key from the environment is never rotated here: nothing to hold."""
        if self.from_environment:
            return contextlib.nullcontext()
        self._ensure_dir()
        return exclusive(self.directory / ".sealing.lock", shared=not rotating)

    def finish_rotation(self) -> None:
        """Make the next key the current one (after every row was re-sealed with it)."""
        os.replace(self.next_file, self.master_file)
        self._fsync_dir()


def write_private_tmp(path: Path, key: bytes, tag: str) -> Path:
    """`key` in a new file beside `path` (mode 0600, made exclusively, never through a link, on
    disk before it is named): the caller links or renames it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{tag}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        with naming(path.parent):
            try:
                if os.write(fd, key) != len(key):  # a full disk may take part of it
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(fd)
            finally:
                os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # half a key, named by nothing: never left behind
        raise
    return tmp


def seal_with(key: tuple[str, bytes], name: str, plaintext: bytes, nonce: bytes) -> Sealed:
    """`plaintext` of the secret `name` sealed (AES-256-GCM) under `key` (id, bytes): the name is
    the associated data, so a row copied onto another name does not open."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    kid, material = key
    return Sealed(AESGCM(material).encrypt(nonce, plaintext, name.encode("utf-8")), nonce, kid)


def open_sealed(material: bytes, name: str, sealed: Sealed,
                advice: str = "set it again with `warden secret set`") -> bytes:
    """The plaintext of a value `seal_with` sealed; Unavailable (with `advice`) when the row was altered."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        return AESGCM(material).decrypt(sealed.nonce, sealed.ciphertext, name.encode("utf-8"))
    except InvalidTag:
        raise Unavailable(f"secret {name!r} does not decrypt (the stored row was altered); {advice}") from None
