"""Inside a sandbox: forbid removing and renaming in some folders (Landlock), then exec the command.

Run by the sandbox's own python3 (`python3 -I -S /etc/warden/landlock.py [--setenv NAME VALUE]...
KEEP... -- CMD...`; the loader's variables come as --setenv, set only for CMD),
standard library only, after bubblewrap has built the mounts, so the rules are made on the
sandbox's own view. Landlock only allows (a ruleset denies what it handles unless a rule grants
it beneath some folder), so "no removal in KEEP" is said as: removal allowed beneath every
folder that neither is a KEEP folder nor holds one; the folders holding one (the workspace, its
parents) get no such rule, so their own entries cannot be removed or renamed either, and a
folder made after this runs has no rule (it fails closed). Renaming across folders (REFER) is
allowed everywhere: on its own it never removes anything from a KEEP folder.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

_CREATE, _ADD, _RESTRICT = 444, 445, 446  # the same numbers on every architecture
_REMOVE_DIR, _REMOVE_FILE, _REFER = 1 << 4, 1 << 5, 1 << 13
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38


def _fail(message: str) -> None:
    sys.stderr.write(f"warden: cannot enforce the workspace's zone rules: {message}\n")
    sys.stderr.flush()
    os._exit(126)


def main(argv: list[str]) -> None:
    try:
        split = argv.index("--")
    except ValueError:
        _fail("no command")
    own, keep, setenv = argv[1:split], [], {}
    while own:
        if own[0] == "--setenv" and len(own) >= 3:
            setenv[own[1]] = own[2]
            own = own[3:]
        else:
            keep.append(os.path.normpath(own[0]))
            own = own[1:]
    command = argv[split + 1:]
    if not command:
        _fail("no command")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = ctypes.create_string_buffer(struct.pack("<Q", _REMOVE_DIR | _REMOVE_FILE | _REFER), 8)
    ruleset = libc.syscall(_CREATE, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        _fail(os.strerror(ctypes.get_errno()))

    def allow(path: str, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # gone, or a link: nothing beneath it to allow
        try:
            rule = ctypes.create_string_buffer(struct.pack("<Qi", access, fd), 12)
            if libc.syscall(_ADD, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), rule,
                            ctypes.c_uint32(0)) < 0:
                _fail(f"{path}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)

    def grant(folder: str) -> None:
        if folder in keep:
            return
        prefix = folder.rstrip("/") + "/"
        if not any(k.startswith(prefix) for k in keep):
            allow(folder, _REMOVE_DIR | _REMOVE_FILE)
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                grant(entry.path)

    allow("/", _REFER)
    grant("/")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail(os.strerror(ctypes.get_errno()))
    if libc.syscall(_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        _fail(os.strerror(ctypes.get_errno()))
    os.close(ruleset)
    os.environ.update(setenv)  # the loader's variables, for the command only (see adapters/sandbox/landlock.py)
    try:
        os.execvp(command[0], command)  # noqa: S606 (the command itself, as bubblewrap would exec it)
    except OSError as exc:  # as bubblewrap itself words it, so a run reads the same either way
        sys.stderr.write(f"bwrap: execvp {command[0]}: {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(1)


main(sys.argv)
