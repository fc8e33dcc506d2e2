"""Never following links: every way Warden opens a path inside a folder a bot controls.

A bot can turn any file or folder of its workspace into a symbolic link, a FIFO or a device
between two commands, so Warden never resolves such a path by its text alone. Each module
here holds a directory descriptor and refuses (or, for Warden's own set-up writes, replaces)
whatever link it meets, at any depth:

- `root`: `SafeRoot`, the file operations bots ask for (read, list, stat, write, mkdir,
  delete), with `openat2` where the kernel has it and an `O_NOFOLLOW` walk where it does not;
- `hostread`: Warden's own bounded reads of bot-controlled files (health checks, repair);
- `fdtree`: Warden's own writes of venv files and `node_modules` links into bot-writable
  folders, where a link in place of a folder is removed and replaced, never followed;
- `trees`: a whole workspace read and rewritten by descriptor for checkpoints and rollbacks;
- `openat2`: the openat2(2) system call through ctypes, which `root` prefers.
"""

from __future__ import annotations

from warden.adapters.safefs.hostread import links_in, read_heads, read_small, regular_dirs
from warden.adapters.safefs.root import OPENAT2_AVAILABLE, Entry, HostSafeRoots, SafeRoot

__all__ = ["OPENAT2_AVAILABLE", "Entry", "HostSafeRoots", "SafeRoot", "links_in", "read_heads", "read_small",
           "regular_dirs"]
