"""Whether $WARDEN_HOME was set up, so lost state is an error rather than silently remade.

`warden init` writes the marker `.initialised` (atomically) once the registry and the keys
exist. Afterwards a missing `warden.db` (the SQLite default) or a missing key file is not
"first use" but loss: recreating them would drop every workspace record, grant and audit
event, or void every grant token and stored secret. Homes made before the marker count as
set up when they hold key files (for the registry) or rows that need a key (for the keys).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.owned import ancestor_problem, home_problem, others_may_write
from warden.adapters.store.db import Database
from warden.core.errors import Denied, Unavailable

__all__ = ["KEY_USERS", "MARKER", "check_owned", "check_registry", "check_registry_owned", "key_required", "mark"]

MARKER = ".initialised"
# Which tables hold rows that a key file makes usable (HMACs under the pepper, ciphertexts).
KEY_USERS = {"pepper": ("bots", "grants"), "master.key": ("secrets",)}


def is_marked(root: Path) -> bool:
    return (root / MARKER).exists()


def mark(root: Path, clock: Callable[[], datetime]) -> bool:
    """Write the marker; True when it is new (a fresh home, or one made before markers)."""
    if is_marked(root):
        return False
    body = {"initialised_at": clock().isoformat(timespec="seconds"), "format": 1}
    write_atomic(root / MARKER, (json.dumps(body) + "\n").encode(), mode=0o600)
    return True


def check_owned(root: Path, user_home: str | None = None) -> None:
    """Denied unless the home `root` is a folder of this user's that no other user can change or
    swap: owned by this user, writable by no group or other, on a path only this user and root
    control (adapters/owned.py). Its keys, registry and daemon socket are trusted on that: a home
    another user made first (an empty folder they left mode 777 before `warden init`) let them
    replace `keys/` or `warden.db`, or hold the keys' lock to block every rotation for good.

    `user_home`: the HOME `root` was found in (~/.warden, neither WARDEN_HOME nor --home given).
    When that HOME is another user's (left so by `sudo -E` or `su -m`), a refusal names it and the
    fix: the home's own folder or path is not what went wrong."""
    try:
        _check_owned(root)
    except (Denied, PermissionError):
        owner = _owner(user_home)
        # HOME=/ is root's too, but no `sudo -E` left it so: a container started with `--user` and
        # no home has it, and its fix is WARDEN_HOME alone (the refusal _check_makeable gives).
        if user_home is None or owner is None or owner == os.geteuid() or os.path.realpath(user_home) == "/":
            raise
        raise Denied(f"Warden's home {root} (~/.warden) cannot be used: HOME {user_home} belongs to uid {owner}, "
                     f"not to you (uid {os.geteuid()}), as after `sudo -E` or `su -m`; keep HOME your own "
                     "(`sudo -H`, `su -`), or set WARDEN_HOME to a folder of yours", rule="home.owner") from None


def _check_makeable(root: Path, me: int) -> None:
    """Denied when the missing home cannot be made: a container started with `--user` and no home
    has HOME=/, and ~/.warden was refused "permission denied by the file system: /.warden", which
    names no fix; the fix is a home elsewhere, WARDEN_HOME."""
    above = root.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if os.access(above, os.W_OK | os.X_OK):
        return
    raise Denied(f"Warden's home {root} cannot be made: {above} is not writable by you (uid {me}), as when "
                 "HOME is / (a container started with `--user` and no home); set WARDEN_HOME=/some/folder "
                 "(a folder of yours; `warden init` makes it), or give --home", rule="home.unwritable")


def _owner(path: str | None) -> int | None:
    try:
        return os.stat(path).st_uid if path else None
    except OSError:
        return None


def _check_owned(root: Path) -> None:
    me = os.geteuid()
    problem = home_problem(root)  # the rules, shared with the daemon and its clients
    if problem is None:
        if not os.path.lexists(root):
            _check_makeable(root, me)  # to be made by this user, mode 0700 (and looked at again then)
        return
    if problem.rule == "path":
        raise Denied(f"WARDEN_HOME {root} cannot be trusted: {problem.why}; {problem.fix}", rule="home.owner")
    st = problem.st
    assert st is not None  # the folder's rules carry its stat
    if problem.rule == "folder":
        raise Denied(f"WARDEN_HOME {root} is not a folder; point WARDEN_HOME at a folder of yours", rule="home.owner")
    if problem.rule == "owner":
        raise Denied(f"WARDEN_HOME {root} belongs to uid {st.st_uid}, not to you (uid {me}): its owner could "
                     "replace its keys and registry; use a home of your own (unset WARDEN_HOME for ~/.warden)",
                     rule="home.owner")
    raise Denied(f"WARDEN_HOME {root} may be written by other users (mode {stat.S_IMODE(st.st_mode):o}): they "
                 f"could replace its keys and registry; run `chmod go-w {root}` if no one else did",
                 rule="home.owner")


def check_registry_owned(db_path: Path) -> None:
    """Denied unless a SQLite registry named outside the home (`database.url`, WARDEN_DATABASE_URL
    `sqlite:///PATH`) is as safe from other users as the home: its folder (where SQLite makes
    its -wal and -shm files next to it) on a path only this user and root control, owned by this
    user or root and writable by no other user, and the file and its -wal and -shm, where they
    exist, this user's and writable by no one else. A registry in a folder another user may
    write (/tmp) could be replaced, or its journal made first, by that user."""
    me = os.geteuid()
    folder = db_path.absolute().parent
    fix = "keep the registry in a folder of yours (or unset database.url for the home's own warden.db)"
    problem = ancestor_problem(folder)
    if problem is not None:
        raise Denied(f"the registry {db_path} (database.url) cannot be trusted: {problem[0]}; {fix}",
                     rule="home.owner")
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return  # SQLite says the folder is not there
    if st.st_uid not in (me, 0) or others_may_write(st, os.path.realpath(folder)):
        raise Denied(f"the registry {db_path} (database.url) lies in {folder}, which other users may write "
                     f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): they could replace it or make "
                     f"its journal first; {fix}", rule="home.owner")
    for path in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_uid != me or others_may_write(st, os.path.realpath(path)):
            raise Denied(f"the registry file {path} (database.url) belongs to uid {st.st_uid} with mode "
                         f"{stat.S_IMODE(st.st_mode):o}, not to you (uid {me}) alone: its owner could change it; {fix}",
                         rule="home.owner")


def check_registry(root: Path, db_path: Path) -> None:
    """Unavailable when the home was set up but its SQLite registry is gone or emptied."""
    try:
        size: int | None = db_path.stat().st_size
    except FileNotFoundError:
        size = None
    if size:
        return
    keys = root / "keys"
    if not (is_marked(root) or (keys / "pepper").exists() or (keys / "master.key").exists()):
        return  # first use
    state = "missing" if size is None else "empty"
    raise Unavailable(
        f"the registry {db_path} is {state}, but {root} was set up with it (workspaces, grants and the "
        f"audit log live there); restore it from a backup of {root}, or to start over with an empty "
        f"registry remove {root / MARKER} and run `warden init`")


def key_required(root: Path, name: str, db: Callable[[], Database]) -> bool:
    """Whether the key file `name` must already exist: the home is marked, or rows need it."""
    if is_marked(root):
        return True
    tables = KEY_USERS.get(name, ())
    if not tables:
        return False
    with db().transaction(write=False) as tx:
        return any(tx.execute(f"SELECT 1 FROM {table} LIMIT 1") for table in tables)  # noqa: S608 (fixed names)
