"""Setting up $WARDEN_HOME and changing settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from warden.core.errors import Conflict, InvalidInput, Unavailable
from warden.core.ports import Clock, ClusterKeyring, ConfigFile, HomeFiles, KeyFiles
from warden.core.settings import coerce
from warden.services.audit import AuditLog

__all__ = ["HomeSetup", "set_setting"]

_CONFIG_HEADER = """\
# Warden settings. `warden config show` lists every key with its value and source;
# `warden config set KEY VALUE` changes one. Environment variables WARDEN_<KEY>
# (dots as underscores, e.g. WARDEN_SANDBOX_MAX_FILE_SIZE_MB) override this file.

[sandbox]
"""


class HomeSetup:
    """`warden init`: the folders, config file, registry and keys of $WARDEN_HOME."""

    def __init__(self, *, root: Path, folders: Sequence[tuple[Path, int]], config: Path, files: HomeFiles,
                 open_registry: Callable[[], object], keys: Callable[[], KeyFiles],
                 audit: Callable[[], AuditLog], clock: Clock,
                 cluster: Callable[[], ClusterKeyring] | None = None,
                 adopt: Callable[[], tuple[bytes | None, bytes | None]] | None = None) -> None:
        self.root = root
        # A node of a cluster (a shared registry): its keys are the cluster's keyring, and `adopt`
        # gives the keys this home had before, which the cluster's first node brings along.
        self._cluster = cluster
        self._adopt = adopt or (lambda: (None, None))
        self._folders = folders
        self._config = config
        self._files = files
        self._open_registry = open_registry
        self._keys = keys
        self._audit = audit
        self._clock = clock

    def init(self, *, reset_keys: bool = False) -> list[str]:
        """Create the home folders, config and database; returns what was new (idempotent).

        With `reset_keys`, make a new pepper and master key: every grant token and every stored
        secret made before stops working (the old key files are kept in keys/replaced-*/).
        On a node of a cluster: the first node makes the cluster's keyring; any other is checked
        against it (KeysMismatch, before anything is written) and never makes keys of its own."""
        if reset_keys and self._cluster is not None:
            raise InvalidInput("this node's keys are its cluster's: --reset-keys would void every node's tokens "
                               "and secrets; rotate them with `warden keys rotate pepper|secrets|kek` instead")
        created: list[str] = []
        if self._cluster is not None:
            created += self._cluster_keys(self._cluster())
        for path, mode in self._folders:
            if self._files.make_folder(str(path), mode):
                created.append(path.name or str(path))
        if self._files.create_config(str(self._config), _CONFIG_HEADER):
            created.append("config.toml")
        self._open_registry()  # opening migrates the registry to the current schema
        if self._cluster is None:
            keys = self._keys()
            if reset_keys:
                stamp = self._clock().strftime("%Y%m%dT%H%M%S")
                created += keys.reset(stamp)
                self._audit().record(actor="user", action="keys.reset", target=str(self.root / "keys"),
                                     detail={"replaced_into": f"keys/replaced-{stamp}"})
            created += keys.ensure()  # token pepper and secrets master key, mode 0600
        if self._files.mark(self._clock):  # from now on a lost registry or key file is an error
            created.append(".initialised")
        self._audit().record(actor="user", action="init", target=str(self.root), detail={"created": created})
        return created


    def _cluster_keys(self, keyring: ClusterKeyring) -> list[str]:
        """The first node makes the keyring (with the keys this home had, if any); others check it."""
        if keyring.state() is not None:
            keyring.check()  # KeysMismatch: refused before a folder or a marker is written
            return []
        had_kek = keyring.node_kek_id() is not None
        pepper, secrets_key = self._adopt()
        _, made = keyring.create(pepper=pepper, secrets_key=secrets_key)
        if not made:  # another node made it at the same moment: be one of its nodes
            keyring.check()
            return []
        return ["cluster keyring"] + ([] if had_kek else ["keys/cluster.key"])

    def join(self, url: str, *, keyring_at: Callable[[str], ClusterKeyring], record: Callable[[str], None],
             current_url: str | None, set_up: bool) -> None:
        """`warden init --join URL`: check this node's cluster key against the keyring at `url`, then
        record `url` as the home's registry. Refused, with nothing written, when the keys differ,
        when there is no cluster there, or when this home already has a registry of its own."""
        if current_url is not None and current_url != url:
            raise Conflict(f"this home already uses the registry at {current_url.split('@')[-1]}; join from "
                           "another WARDEN_HOME (or change database.url with `warden config set`)")
        if current_url is None and set_up:
            raise Conflict(f"{self.root} was set up with its own SQLite registry (its workspaces and grants live "
                           "there); join the cluster from a new WARDEN_HOME")
        keyring = keyring_at(url)
        if keyring.state() is None:
            raise Unavailable(f"the registry at {url.split('@')[-1]} holds no cluster keys: set the cluster up on "
                              "its first node with `WARDEN_DATABASE_URL=URL warden init`, then join")
        keyring.check()
        if current_url is None:
            record(url)


def set_setting(config: ConfigFile, key: str, raw: str) -> object:
    """Validate `raw` for `key`, then write it to config.toml; a bad value changes nothing.

    Only this key is judged, from the file alone (no other setting): `config set` is how a
    person fixes a wrong value, so another wrong value in the file must not stop it.
    """
    value = coerce(key, raw)
    config.read()  # a file that is not TOML at all: say so, write nothing
    config.set_value(key, value)
    return value
