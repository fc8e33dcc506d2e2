"""What execve(2) accepts: the sizes of arguments and environment, checked before a run.

A command line over the kernel's limits makes bwrap's own exec fail with E2BIG, which would
otherwise surface as an internal error; checked here, the answer names the limit and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from warden.core.errors import InvalidInput

__all__ = ["too_long_for_exec"]

# What execve(2) copies beyond the strings themselves (the file name, the auxiliary vector,
# alignment): kept free under the limit so a size accepted here is not refused by the kernel.
_EXEC_MARGIN = 8192


def _arg_max() -> int:
    """How many bytes of arguments and environment execve accepts here.

    RLIMIT_STACK / 4, as sysconf says, but never over the kernel's own cap of 3/4 of
    _STK_LIM (6 MiB; fs/exec.c), which applies with an unlimited stack.
    """
    try:
        value = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        value = -1
    return min(value if value > 0 else 131072, 6 * 1024 * 1024) - _EXEC_MARGIN


def too_long_for_exec(argv: list[str], environ: Mapping[str, str], *,
                       always: bool = False) -> InvalidInput | None:
    """The error when execve would fail with E2BIG ("Argument list too long"), else None.

    Checked up front rather than left to Popen: the answer names the limit and the fix, and
    no cgroup or process is made for a run that cannot start. `always`: the kernel already
    said E2BIG, so an error comes back whichever limit this side computes as met.
    """
    sizes = [len(os.fsencode(s)) + 1 for s in (*argv, *(f"{k}={v}" for k, v in environ.items()))]
    longest, each = max(sizes), 32 * os.sysconf("SC_PAGE_SIZE")  # the kernel's MAX_ARG_STRLEN
    total, limit = sum(sizes) + 8 * (len(sizes) + 2), _arg_max()  # the strings and their pointers
    fix = "; pass data through stdin or a file"
    if longest > each:
        return InvalidInput(f"an argument or environment variable is too long ({longest} bytes, the limit "
                            f"here is {each} for each){fix}", rule="sandbox.args_too_long")
    if total > limit or always:
        return InvalidInput(f"the command line and environment are too long ({total} bytes, the limit "
                            f"here is {limit}){fix}", rule="sandbox.args_too_long")
    return None
