"""Real-filesystem escape attempts against the safe file layer, with openat2 and with the walk.

Every attack the MCP filesystem server and its CVEs teach (CVE-2025-53110 prefix siblings,
CVE-2025-53109 symlinks), run against both resolution paths: openat2 where the kernel has
it, and the component-by-component O_NOFOLLOW walk forced on.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import stat
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.adapters import safefs
from warden.adapters.safefs import SafeRoot, openat2
from warden.core.errors import Denied, InvalidInput, NotFound, TooLarge, WardenError
from warden.core.paths import canonical, within

SECRET = b"OUTSIDE SECRET"
MODES = ["openat2", "walk"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "openat2" and not safefs.OPENAT2_AVAILABLE:
        pytest.skip("this kernel has no openat2")
    return str(request.param)


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """tmp/safe (the root) beside tmp/outside and the siblings 'safe-evil', 'safe ', "safe'"."""
    (tmp_path / "safe").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(SECRET)
    for sibling in ("safe-evil", "safe ", "safe'"):
        (tmp_path / sibling).mkdir()
        (tmp_path / sibling / "secret").write_bytes(SECRET)
    return tmp_path


@pytest.fixture
def root(layout: Path, mode: str) -> Iterator[SafeRoot]:
    with SafeRoot.open(layout / "safe", max_bytes=1 << 20, use_openat2=mode == "openat2") as handle:
        yield handle


def ws(layout: Path) -> Path:
    return layout / "safe"


def test_the_requested_resolution_is_the_one_used(layout: Path, mode: str, root: SafeRoot) -> None:
    assert root.use_openat2 is (mode == "openat2")


def test_round_trip_text_and_binary(root: SafeRoot, layout: Path) -> None:
    assert root.write_text("/notes/a.txt", "héllo") == 6
    assert root.read_text("/notes/a.txt") == "héllo"
    blob = bytes(range(256)) * 17
    root.write_bytes("/bin/blob", blob)
    assert root.read_bytes("/bin/blob") == blob
    assert (ws(layout) / "bin" / "blob").read_bytes() == blob
    assert [e.name for e in root.list("/")] == ["bin", "notes"]
    assert root.stat("/notes/a.txt").type == "file" and root.stat("/notes").type == "dir"
    assert root.exists("/notes/a.txt") and not root.exists("/notes/b.txt")
    root.mkdir("/m/n/o")
    root.mkdir("/m/n/o")  # idempotent
    assert root.delete("/notes/a.txt") == "file"
    with pytest.raises(WardenError, match="not empty"):
        root.delete("/m")
    assert root.delete("/m", recursive=True) == "dir"
    assert not (ws(layout) / "m").exists()
    assert not [p for p in ws(layout).rglob("*") if p.name.endswith(".warden-tmp")]


def test_write_replaces_atomically_and_keeps_the_mode(root: SafeRoot, layout: Path) -> None:
    target = ws(layout) / "run.sh"
    target.write_text("old")
    target.chmod(0o750)
    inode = target.stat().st_ino
    root.write_text("/run.sh", "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.stat().st_ino != inode  # a new file renamed over, not written in place


# -- prefix, quote and whitespace siblings (CVE-2025-53110) ---------------------------------------

@pytest.mark.parametrize("sibling", ["safe-evil", "safe ", "safe'"])
def test_siblings_are_unreachable(root: SafeRoot, layout: Path, sibling: str) -> None:
    assert not within(str(layout / sibling / "secret"), [str(ws(layout))])
    with pytest.raises(InvalidInput, match="climbs above"):
        canonical(f"/../{sibling}/secret")
    os.symlink(f"../{sibling}", ws(layout) / "door")
    with pytest.raises(Denied, match="symbolic link"):
        root.read_bytes("/door/secret")
    with pytest.raises(Denied):
        root.write_bytes("/door/planted", b"x")
    assert not (layout / sibling / "planted").exists()


# -- symbolic links (CVE-2025-53109) ----------------------------------------------------------------

def test_symlink_to_an_outside_file_and_directory(root: SafeRoot, layout: Path) -> None:
    os.symlink(layout / "outside" / "secret", ws(layout) / "file-link")
    os.symlink(layout / "outside", ws(layout) / "dir-link")
    os.symlink("../outside", ws(layout) / "rel-link")
    for path in ("/file-link", "/dir-link/secret", "/rel-link/secret"):
        with pytest.raises(Denied, match="symbolic link"):
            root.read_bytes(path)
    for path in ("/file-link", "/dir-link/secret", "/rel-link/new"):
        with pytest.raises(Denied):
            root.write_bytes(path, b"pwned")
    assert (layout / "outside" / "secret").read_bytes() == SECRET
    assert not (layout / "outside" / "new").exists()
    with pytest.raises(Denied):
        root.list("/dir-link")
    with pytest.raises(Denied):
        root.mkdir("/dir-link/made")
    assert not (layout / "outside" / "made").exists()


def test_dangling_symlink_to_outside_is_not_created_through(root: SafeRoot, layout: Path) -> None:
    os.symlink(layout / "outside" / "not-yet", ws(layout) / "dangling")
    with pytest.raises(Denied):
        root.write_bytes("/dangling", b"created outside?")
    assert not (layout / "outside" / "not-yet").exists()
    with pytest.raises(Denied):
        root.read_bytes("/dangling")
    # The link itself can be seen (as a link) and removed; its target is untouched.
    assert root.stat("/dangling").type == "symlink"
    assert root.exists("/dangling")
    assert root.delete("/dangling") == "symlink"
    assert not os.path.lexists(ws(layout) / "dangling")


def test_symlink_chains_are_refused(root: SafeRoot, layout: Path) -> None:
    os.symlink(layout / "outside", ws(layout) / "c")
    os.symlink("c", ws(layout) / "b")
    os.symlink("b", ws(layout) / "a")
    with pytest.raises(Denied):
        root.read_bytes("/a/secret")
    # Even a chain that stays inside is not followed: a link could cross zones.
    (ws(layout) / "real").write_text("inside")
    os.symlink("real", ws(layout) / "in1")
    os.symlink("in1", ws(layout) / "in2")
    with pytest.raises(Denied):
        root.read_bytes("/in2")


def test_dotdot_after_a_symlink_is_resolved_lexically_never_through_the_link(root: SafeRoot, layout: Path) -> None:
    (layout / "outside" / "deep").mkdir()
    os.symlink(layout / "outside" / "deep", ws(layout) / "link")
    # The kernel would read outside/secret for "link/../secret"; the canonical path is /secret.
    assert canonical("/link/../secret") == "/secret"
    with pytest.raises(NotFound):
        root.read_bytes(canonical("/link/../secret"))
    # Non-canonical paths never reach the kernel.
    with pytest.raises(InvalidInput, match="not canonical"):
        root.read_bytes("/link/../secret")


def test_magic_links_are_refused(root: SafeRoot, layout: Path) -> None:
    os.symlink("/proc/self/root/etc", ws(layout) / "magic")
    with pytest.raises(Denied):
        root.read_bytes("/magic/hostname")


def test_listing_never_reveals_where_a_link_points(root: SafeRoot, layout: Path) -> None:
    os.symlink(layout / "outside" / "a-very-long-target-name-that-would-show-in-a-size", ws(layout) / "l")
    [entry] = root.list("/")
    assert entry.type == "symlink" and entry.size == 0
    assert "outside" not in repr(entry.to_json()) and "target" not in entry.to_json()


# -- a parent swapped for a symlink between check and use -----------------------------------------

def _exchange() -> object:
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.renameat2
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    return call


def test_parent_swapped_for_a_symlink_in_a_race(root: SafeRoot, layout: Path) -> None:
    real = ws(layout) / "dir"
    real.mkdir()
    (real / "f").write_bytes(b"inside")
    (layout / "outside" / "f").write_bytes(SECRET)
    evil = ws(layout) / "evil"
    os.symlink(layout / "outside", evil)
    try:
        renameat2 = _exchange()
    except AttributeError:
        pytest.skip("libc has no renameat2")
    at_fdcwd, rename_exchange = -100, 2
    stop = threading.Event()
    swaps = [0]

    def swapper() -> None:
        # Atomically exchange "dir" and the link to outside, over and over: at any instant
        # "dir" is either the real directory or a link out (renameat2 RENAME_EXCHANGE).
        a, b = os.fsencode(real), os.fsencode(evil)
        while not stop.is_set():
            if renameat2(at_fdcwd, a, at_fdcwd, b, rename_exchange) != 0:  # type: ignore[operator]
                raise OSError(ctypes.get_errno(), "renameat2")
            swaps[0] += 1

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 1.5
    try:
        for i in range(20000):
            if time.monotonic() > deadline:
                break
            try:
                assert root.read_bytes("/dir/f") == b"inside"
                seen["inside"] = seen.get("inside", 0) + 1
            except (Denied, NotFound) as exc:
                seen[type(exc).__name__] = seen.get(type(exc).__name__, 0) + 1
            with contextlib.suppress(Denied, NotFound):
                root.write_bytes(f"/dir/w{i % 4}", b"planted")
    finally:
        stop.set()
        thread.join(5)
    assert swaps[0] > 100 and sum(seen.values()) > 100, (swaps, seen)
    assert sorted(p.name for p in (layout / "outside").iterdir()) == ["f", "secret"]
    assert (layout / "outside" / "f").read_bytes() == SECRET


# -- hard links -------------------------------------------------------------------------------------

def test_hardlink_to_an_outside_file(root: SafeRoot, layout: Path) -> None:
    outside = layout / "outside" / "secret"
    os.link(outside, ws(layout) / "hard")
    with pytest.raises(Denied, match="hard links"):
        root.write_bytes("/hard", b"overwrite")
    assert outside.read_bytes() == SECRET
    # Decision (see safefs docstring): reading a hard link is allowed; its bytes are already
    # part of the workspace a sandboxed command can read. Deleting removes only this name.
    assert root.read_bytes("/hard") == SECRET
    assert root.delete("/hard") == "file"
    assert outside.read_bytes() == SECRET


# -- special files ---------------------------------------------------------------------------------

@pytest.mark.timeout(20)
def test_fifo_is_refused_without_hanging(root: SafeRoot, layout: Path) -> None:
    os.mkfifo(ws(layout) / "pipe")
    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(root.read_bytes("/pipe"))
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO hung"
    assert isinstance(outcome[0], Denied) and "fifo" in str(outcome[0])
    with pytest.raises(Denied):
        root.write_bytes("/pipe", b"x")
    assert root.stat("/pipe").type == "fifo"


def test_socket_is_refused(root: SafeRoot, layout: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(ws(layout) / "sock"))
        with pytest.raises(Denied):
            root.read_bytes("/sock")
        assert [e.type for e in root.list("/")] == ["socket"]
    finally:
        server.close()


def test_device_is_refused(root: SafeRoot, layout: Path) -> None:
    try:
        os.mknod(ws(layout) / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    with pytest.raises(Denied, match="device"):
        root.read_bytes("/null")


# -- names ------------------------------------------------------------------------------------------

def test_nul_bytes_are_refused(root: SafeRoot) -> None:
    with pytest.raises(InvalidInput, match="NUL"):
        canonical("/a\0/../etc/passwd")
    with pytest.raises(InvalidInput):
        root.read_bytes("/a\0b")


def test_nfc_and_nfd_names_are_different_files(root: SafeRoot, layout: Path) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    root.write_text("/" + nfc, "composed")
    with pytest.raises(NotFound):
        root.read_bytes("/" + nfd)
    root.write_text("/" + nfd, "decomposed")
    assert root.read_text("/" + nfc) == "composed"
    assert sorted(e.name for e in root.list("/")) == sorted([nfc, nfd])
    assert not within("/w/" + nfd + "/x", ["/w/" + nfc])


def test_whitespace_and_quote_names_are_taken_literally(root: SafeRoot, layout: Path) -> None:
    root.write_text("/dir /a", "space")
    root.write_text("/dir'/a", "quote")
    assert (ws(layout) / "dir " / "a").read_text() == "space"
    assert (ws(layout) / "dir'" / "a").read_text() == "quote"
    with pytest.raises(NotFound):
        root.read_bytes("/dir/a")


# -- size limits ------------------------------------------------------------------------------------

def test_size_limit_applies_before_bytes_land(layout: Path, mode: str) -> None:
    with SafeRoot.open(ws(layout), max_bytes=1000, use_openat2=mode == "openat2") as small:
        with pytest.raises(TooLarge):
            small.write_bytes("/big", b"x" * 1001)
        assert not list(ws(layout).iterdir())
        (ws(layout) / "huge").write_bytes(b"y" * 5000)
        with pytest.raises(TooLarge):
            small.read_bytes("/huge")
        assert small.write_bytes("/ok", b"x" * 1000) == 1000


def test_root_itself_must_not_be_a_symlink(layout: Path) -> None:
    os.symlink(layout / "outside", layout / "root-link")
    with pytest.raises(Denied):
        SafeRoot.open(layout / "root-link")
    with pytest.raises(NotFound):
        SafeRoot.open(layout / "missing")


def test_enosys_falls_back_to_the_walk(layout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_openat2(dirfd: int, path: bytes, how: openat2.OpenHow) -> int:
        ctypes.set_errno(errno.ENOSYS)
        return -1

    monkeypatch.setattr(openat2, "SYSCALL", no_openat2)
    (ws(layout) / "f").write_text("via walk")
    os.symlink(layout / "outside", ws(layout) / "out")
    with SafeRoot(os.open(ws(layout), os.O_RDONLY | os.O_DIRECTORY), use_openat2=True) as root:
        assert root.use_openat2
        assert root.read_text("/f") == "via walk"
        assert not root.use_openat2  # switched for good after ENOSYS
        with pytest.raises(Denied):
            root.read_bytes("/out/secret")


def test_no_descriptor_leaks_on_success_or_refusal(root: SafeRoot, layout: Path) -> None:
    os.symlink(layout / "outside", ws(layout) / "out")
    os.mkfifo(ws(layout) / "pipe")

    def busy() -> None:
        root.write_bytes("/d/e/f", b"x")
        root.read_bytes("/d/e/f")
        root.list("/d")
        root.stat("/d/e/f")
        for bad in ("/out/secret", "/pipe", "/missing/x", "/d/e/f/g"):
            with contextlib.suppress(WardenError):
                root.read_bytes(bad)
        with contextlib.suppress(WardenError):
            root.write_bytes("/out/x", b"x")

    busy()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        busy()
    assert len(os.listdir("/proc/self/fd")) == before
