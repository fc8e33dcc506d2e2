"""`$WARDEN_HOME/config.toml`: read with tomllib (fast), written with tomlkit (comments kept)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.core.errors import InvalidInput

__all__ = ["read_config", "set_config_value"]


def read_config(path: Path) -> dict[str, object]:
    """The file's tables, or {} when there is no file yet."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not valid TOML ({exc}); fix or remove the file") from None


def set_config_value(path: Path, key: str, value: object) -> None:
    """Set dotted `key` to `value` in the file, keeping its other content and comments."""
    with _writer(path):
        _set(path, key, value)


@contextlib.contextmanager
def _writer(path: Path) -> Iterator[None]:
    """The one writer of `path`: a read, change and write of the whole file by two `config set`
    at once kept only the last one's key (six at once: two kept), each saying it was set. An
    flock on a file beside it (never through a link), let go when its holder ends however."""
    fd = os.open(path.with_name(f".{path.name}.lock"),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _set(path: Path, key: str, value: object) -> None:
    import tomlkit  # only writers pay for tomlkit's import

    try:
        document = tomlkit.parse(path.read_text("utf-8")) if path.exists() else tomlkit.document()
    except tomlkit.exceptions.ParseError as exc:
        raise InvalidInput(f"{path}: not valid TOML ({exc}); fix or remove the file") from None
    *tables, leaf = key.split(".")
    node: tomlkit.container.Container | tomlkit.items.Table = document
    for name in tables:
        child = node.get(name)
        if child is None:
            child = tomlkit.table()
            node[name] = child
        node = child
    node[leaf] = value
    write_atomic(path, tomlkit.dumps(document).encode("utf-8"), mode=0o600)
