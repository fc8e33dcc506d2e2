"""Landlock on this kernel: which ABI it offers, and the launcher that applies it in a sandbox.

Zones whose deletes need a person (`ask`) or are `blocked` stay writable inside runs but nothing
in them may be removed or renamed: the launcher (landlock_launcher.py, a read-only file of the
sandbox) sets that up after the mounts and execs the command. It needs ABI 2 (renames across
folders, REFER, became a right of their own there; under ABI 1 every such rename fails) and the
system python3; without them such zones are mounted read-only instead (stricter, never looser).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

__all__ = ["LAUNCHER_PATH", "abi", "launcher_source", "needed_abi"]

LAUNCHER_PATH = "/etc/warden/landlock.py"  # inside a sandbox
needed_abi = 2
_CREATE_RULESET = 444
_CREATE_RULESET_VERSION = 1


@functools.cache
def abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is switched off)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(version) if version > 0 else 0


@functools.cache
def launcher_source() -> bytes:
    return Path(__file__).with_name("landlock_launcher.py").read_bytes()
