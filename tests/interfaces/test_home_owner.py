"""A home another user made, or may change, is refused before Warden trusts anything in it.

Found by an attack: a user who made the (empty) home folder mode 777 before `warden init` kept
it theirs. They could replace `keys/` or `warden.db`, or hold the keys' lock file and so block
every `keys rotate`, `secret set` and `backup` for good.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import Cli, CliResult

pytestmark = pytest.mark.empty_home

NOBODY = 65534
ROOT = os.geteuid() == 0


def _refused(result: CliResult, *words: str) -> None:
    assert result.code == 3, result.stderr  # denied
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_a_home_others_may_write_to_is_refused_and_nothing_is_made_in_it(cli: Cli, home: Path) -> None:
    home.chmod(0o777)
    _refused(cli("init"), f"chmod go-w {home}", "other users")
    assert list(home.iterdir()) == []  # no registry, no keys, no config: nothing to take over
    if ROOT:  # (only root may give a folder to a group it is not in)
        os.chown(home, -1, NOBODY)
        home.chmod(0o775)
        _refused(cli("list"), "mode 775")
        os.chown(home, -1, os.getegid())
    home.chmod(0o755)  # readable by others, as a mkdir under umask 022 makes it: that is the user's choice
    made = cli("init")
    assert made.code == 0, made.stderr
    assert cli("list").code == 0


def _skip_unless_private_group() -> None:
    import grp
    import pwd

    me = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(me.pw_gid)
    if group.gr_name != me.pw_name or set(group.gr_mem) - {me.pw_name}:
        pytest.skip(f"{me.pw_name}'s primary group is not a private one here")


def test_a_home_only_the_users_private_group_may_write_is_the_users_alone(cli: Cli, tmp_path: Path) -> None:
    """Debian and Ubuntu give each user a group of their own and umask 002: the folders a person
    makes are group-writable, by that group alone. A home in them, or made so, is not refused."""
    _skip_unless_private_group()
    projects = tmp_path / "projects"
    projects.mkdir()
    projects.chmod(0o775)
    home = projects / "warden-home"
    home.mkdir()
    home.chmod(0o775)
    made = cli("init", env={"WARDEN_HOME": str(home)})
    assert made.code == 0, made.stderr


def test_a_folder_whose_access_list_lets_another_user_write_is_refused(cli: Cli, tmp_path: Path) -> None:
    """The private group's pass is the group's alone: with an access list the group bits are its
    mask, and `setfacl -m u:bob:rwx ~/projects` (mode 775 then) let Bob swap the home in it."""
    import errno
    import struct

    _skip_unless_private_group()
    projects = tmp_path / "projects"
    projects.mkdir()
    projects.chmod(0o775)
    # setfacl's own encoding (linux/posix_acl_xattr.h): owner, user NOBODY, group, mask, other.
    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, NOBODY), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
               (0x20, 5, 0xFFFFFFFF)]
    try:
        os.setxattr(projects, "system.posix_acl_access",
                    struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise
        pytest.skip("no access lists on this file system")
    assert stat.S_IMODE(projects.stat().st_mode) == 0o775
    _refused(cli("init", env={"WARDEN_HOME": str(projects / "warden-home")}), f"{projects} above it")
    assert not (projects / "warden-home").exists()


def test_a_home_inside_a_folder_anyone_may_write_to_is_refused(cli: Cli, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone may rename the home away and put theirs there
    result = cli("init", env={"WARDEN_HOME": str(shared / "home")})
    _refused(result, f"{shared} above it", f"chmod go-w {shared}")
    assert not (shared / "home").exists()
    shared.chmod(0o1777)  # as /tmp: others cannot rename what is not theirs
    assert cli("init", env={"WARDEN_HOME": str(shared / "home")}).code == 0


@pytest.mark.skipif(not ROOT, reason="giving a folder to another user needs root")
def test_a_home_or_key_folder_another_user_made_is_refused(cli: Cli, home: Path) -> None:
    os.chown(home, NOBODY, NOBODY)
    home.chmod(0o700)
    _refused(cli("init"), f"belongs to uid {NOBODY}")
    assert list(home.iterdir()) == []
    os.chown(home, 0, 0)
    keys = home / "keys"
    keys.mkdir(mode=0o700)
    os.chown(keys, NOBODY, NOBODY)  # made first by the other user, to read, swap or lock
    _refused(cli("init"), f"key folder {keys}", "another user")
    assert list(keys.iterdir()) == []  # no key was written into it


def test_the_registry_is_its_owners_alone(cli: Cli, home: Path) -> None:
    old = os.umask(0o022)
    try:
        assert cli("init").code == 0
    finally:
        os.umask(old)
    db = home / "warden.db"
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    db.chmod(0o644)  # a registry made by an earlier version
    assert cli("list").code == 0
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_a_registry_named_in_a_folder_others_may_write_is_refused(cli: Cli, home: Path, tmp_path: Path) -> None:
    """`database.url` (WARDEN_DATABASE_URL) naming a SQLite file outside the home was used
    wherever it lay: in a folder anyone may write (/tmp itself), another user could make its
    -wal first or put their own file in its place. It is held to the home's rule."""
    assert cli("init").code == 0
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: anyone may make the registry's journal next to it
    url = {"WARDEN_DATABASE_URL": f"sqlite:///{shared}/registry.db"}
    _refused(cli("list", env=url), f"the registry {shared}/registry.db (database.url)", "other users may write",
             "a folder of yours")
    assert list(shared.iterdir()) == []  # nothing opened, nothing made
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    url = {"WARDEN_DATABASE_URL": f"sqlite:///{mine}/registry.db"}
    made = cli("list", env=url)
    assert made.code == 0, made.stderr
    assert (mine / "registry.db").exists()
    if ROOT:  # (only root may give a file to another user)
        os.chown(mine / "registry.db", NOBODY, NOBODY)
        _refused(cli("list", env=url), f"registry file {mine}/registry.db", f"uid {NOBODY}")
        os.chown(mine / "registry.db", 0, 0)
    (mine / "registry.db").chmod(0o666)
    _refused(cli("list", env=url), "mode 666")


@pytest.mark.skipif(not ROOT, reason="giving a link to another user needs root")
def test_a_home_reached_through_another_users_link_is_refused(cli: Cli, tmp_path: Path) -> None:
    # Found by an attack: `nobody` made /tmp/a4-link -> root's home, and root's `warden list`
    # with WARDEN_HOME=/tmp/a4-link was served. The link is its maker's in a sticky folder: they
    # swapped it for one to their own 777 folder while `warden create` ran, and root went on
    # building the layer under theirs. A link on the way to a link is theirs to swap as well.
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    theirs = shared / "theirs"
    theirs.symlink_to(mine)
    os.lchown(theirs, NOBODY, NOBODY)
    _refused(cli("init", env={"WARDEN_HOME": str(theirs)}), f"{theirs}", f"uid {NOBODY}")
    assert list(mine.iterdir()) == []
    chained = shared / "chained"
    chained.symlink_to(theirs)  # root's own link, leading through theirs
    _refused(cli("init", env={"WARDEN_HOME": str(chained)}), f"{theirs}", f"uid {NOBODY}")
    relative = tmp_path / "relative"
    relative.mkdir(mode=0o700)
    (relative / "up").symlink_to("../shared/theirs")  # a relative link, read from its own folder
    _refused(cli("init", env={"WARDEN_HOME": str(relative / "up")}), f"{theirs}", f"uid {NOBODY}")
    os.lchown(theirs, 0, 0)  # root's own links in a sticky folder: only root may swap them
    assert cli("init", env={"WARDEN_HOME": str(chained)}).code == 0
    assert cli("list", env={"WARDEN_HOME": str(relative / "up")}).code == 0


def test_a_home_through_a_link_works_and_is_used_by_its_real_path(cli: Cli, tmp_path: Path) -> None:
    """~/.warden a link to a folder on a data disk, made before the folder itself: `init` said
    "internal error" (its mkdir stopped at the link), and through a link to a folder made,
    `create` could not build its layer (the sandbox met the link in its read-only system)."""
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "warden"
    link = tmp_path / "dot-warden"
    link.symlink_to(real)
    env = {"WARDEN_HOME": str(link)}
    made = cli("init", env=env)
    assert made.code == 0, made.stderr
    assert (real / "keys" / "pepper").is_file() and link.is_symlink()
    created = cli("create", "linked", "--template", "minimal", env=env)
    assert created.code == 0, created.stderr
    ran = cli("run", "linked", "--", "pwd", env=env)
    assert ran.code == 0 and ran.stdout.strip() == str(real / "workspaces" / "linked"), ran.stderr


def test_a_home_in_another_users_HOME_says_HOME_is_why(cli: Cli, tmp_path: Path) -> None:
    """~/.warden with HOME left at another user's (`sudo -E`, `su -m`): the one line names HOME and
    how to keep one's own, not a WARDEN_HOME nobody set."""
    if ROOT:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, NOBODY, NOBODY)
    else:
        theirs = Path("/root")  # root's own, closed to others: ~/.warden in it cannot even be looked at
        if not theirs.is_dir() or os.access(theirs, os.X_OK):
            pytest.skip("no folder of another user's closed to this one here")
    result = cli("list", env={"HOME": str(theirs), "WARDEN_HOME": ""})
    _refused(result, f"HOME {theirs} belongs to uid", "sudo -H", "set WARDEN_HOME to a folder of yours")
    assert not os.path.lexists(theirs / ".warden")  # (False too where this user may not look)
    named = cli("list", env={"HOME": str(theirs), "WARDEN_HOME": str(theirs / ".warden")})
    assert named.code == 3 and "sudo -H" not in named.stderr  # named by the user: HOME is not why


@pytest.mark.skipif(not ROOT or not os.path.exists("/usr/bin/python3"),
                    reason="a folder of root's that another user's home lies in needs root to make")
def test_a_folder_of_roots_a_group_may_write_is_not_the_users_to_close() -> None:
    """A team's folder (/srv/projects, root's, 2775): the fix is a home outside it, never a chmod
    the user may not run and the team relies on not being run."""
    import json
    import subprocess
    import tempfile

    import warden

    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # tmp_path lies in root's 0700 folder: closed to them
    try:
        shared.chmod(0o2775)
        # As that user, what the home check tells them; by the system's Python (the venv's may
        # lie in a folder of root's closed to others), which reads the module alone (stdlib only).
        asked = subprocess.run(
            ["/usr/bin/python3", "-I", "-c", "import json, sys; from pathlib import Path; sys.path.insert(0, "
             "sys.argv[1]); from warden.adapters.owned import ancestor_problem; "
             "print(json.dumps(ancestor_problem(Path(sys.argv[2]))))",
             str(Path(warden.__file__).parent.parent), str(shared / "me" / "warden")],
            user=NOBODY, group=NOBODY, extra_groups=[], cwd="/", capture_output=True, text=True, timeout=60,
            check=False)
    finally:
        shared.rmdir()
    assert asked.returncode == 0, asked.stderr
    problem = json.loads(asked.stdout)
    assert problem is not None and f"{shared} above it may be written" in problem[0]
    assert "chmod" not in problem[1] and f"outside {shared}" in problem[1]


def test_doctor_says_a_home_refused_is_missing(cli: Cli, home: Path) -> None:
    """`warden doctor` is where a refused person looks: it said "isolation works here" (exit 0)
    while every other command refused the home."""
    home.chmod(0o777)
    said = cli("doctor", "--json")
    row = next(c for c in said.json["data"]["checks"] if c["name"] == "home")
    assert said.code == 1 and not said.json["data"]["ok"], said.stdout
    assert not row["ok"] and row["required"] and "other users" in row["detail"]
    assert row["fix"].startswith(f"run `chmod go-w {home}`")
    assert "refuses every command with this home" in cli("doctor").stdout
    home.chmod(0o700)
    row = next(c for c in cli("doctor", "--json").json["data"]["checks"] if c["name"] == "home")
    assert row["ok"] and str(home) in row["detail"]


@pytest.mark.skipif(ROOT, reason="root may make /.warden: the refusal needs a user who may not write /")
def test_a_home_that_cannot_be_made_names_WARDEN_HOME_as_the_fix(cli: Cli) -> None:
    """A container started with `--user` and no home has HOME=/: ~/.warden was refused "permission
    denied by the file system: /.warden", naming no fix. The refusal names WARDEN_HOME, and doctor
    (where a refused person looks) says the home is missing, with that fix."""
    env = {"HOME": "/", "WARDEN_HOME": ""}
    _refused(cli("init", env=env), "/.warden cannot be made", "WARDEN_HOME=/some/folder")
    _refused(cli("list", env=env), "WARDEN_HOME=/some/folder")
    assert "sudo -E" not in cli("list", env=env).stderr  # HOME=/ is root's, but no `sudo -E` left it so
    said = cli("doctor", "--json", env=env)
    row = next(c for c in said.json["data"]["checks"] if c["name"] == "home")
    assert said.code == 1 and not row["ok"] and row["fix"].startswith("set WARDEN_HOME=/some/folder"), said.stdout
