"""Resource limits of one sandboxed command: defaults from settings, overrides per run (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from warden.core.durations import check_timeout, parse_size
from warden.core.errors import InvalidInput

__all__ = ["MAX_CPU_SECONDS", "MAX_MEMORY", "MAX_PIDS", "MIN_MEMORY", "Limits", "apply_overrides"]

MiB = 1024 * 1024
# The smallest memory limit a run may have: below it the sandbox cannot even start Python.
MIN_MEMORY = 16 * MiB
# The largest limits a run may ask for: beyond them a number no longer fits the kernel's
# types (setrlimit's rlim_t, bwrap's --size) and the run would fail half set up.
MAX_MEMORY = 64 * 1024 * 1024 * MiB  # 64T
MAX_CPU_SECONDS = 366 * 86400  # a year of CPU time
MAX_PIDS = 4_194_304  # the kernel's PID_MAX_LIMIT on 64-bit (include/linux/threads.h)


@dataclass(frozen=True)
class Limits:
    """What one run may use. Sizes in bytes, times in seconds."""

    memory: int = 1024 * MiB
    cpu_seconds: int = 300
    pids: int = 256
    open_files: int = 1024
    file_size: int = 100 * MiB
    timeout_s: float = 600.0

    def to_json(self) -> dict[str, object]:
        return {"memory": self.memory, "cpu_seconds": self.cpu_seconds, "pids": self.pids,
                "open_files": self.open_files, "file_size": self.file_size,
                "timeout_s": self.timeout_s}


def apply_overrides(base: Limits, *, timeout: float | None = None, memory: str | int | None = None,
                    cpu: int | None = None, pids: int | None = None) -> Limits:
    """`base` with the per-run overrides, each checked; InvalidInput names the bad one."""
    changes: dict[str, object] = {}
    if timeout is not None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            raise InvalidInput(f"bad timeout {timeout!r}: give a positive number of seconds")
        changes["timeout_s"] = check_timeout(float(timeout))  # above zero, at most a day
    if memory is not None:
        size = parse_size(memory) if isinstance(memory, str) else memory
        if isinstance(size, bool) or not isinstance(size, int) or size < MIN_MEMORY:
            raise InvalidInput(f"bad memory limit {memory!r}: give at least 16M (e.g. 256M, 2G)")
        if size > MAX_MEMORY:
            raise InvalidInput(f"memory limit {memory!r} is above the maximum of 64T; give a smaller one "
                               "(e.g. 256M, 2G)")
        changes["memory"] = size
    if cpu is not None:
        if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 1:
            raise InvalidInput(f"bad CPU limit {cpu!r}: give a whole number of seconds >= 1")
        if cpu > MAX_CPU_SECONDS:
            raise InvalidInput(f"CPU limit {cpu} is above the maximum of {MAX_CPU_SECONDS} seconds (366 days); "
                               "give a smaller one")
        changes["cpu_seconds"] = cpu
    if pids is not None:
        if isinstance(pids, bool) or not isinstance(pids, int) or pids < 4:
            raise InvalidInput(f"bad process limit {pids!r}: give a whole number >= 4")
        if pids > MAX_PIDS:
            raise InvalidInput(f"process limit {pids} is above the maximum of {MAX_PIDS} (the kernel's); "
                               "give a smaller one")
        changes["pids"] = pids
    return replace(base, **changes)  # type: ignore[arg-type]
